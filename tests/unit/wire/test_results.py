"""RPC result models: read leniently, kept whole, and a misfit is one ``bad_request`` line."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ateam.errors import BadRequest
from ateam.wire.results import (
    STRICT_ROWS,
    InputResult,
    KbExportResult,
    KbReport,
    MemoryStatsResult,
    ModelListResult,
    OffloadProposal,
    PlanReadResult,
    QueueListResult,
    parse_result,
)


def test_unknown_fields_are_kept_and_missing_ones_default() -> None:
    reply = parse_result(InputResult, "input", {"id": "t1", "from_the_future": 1})
    assert (reply.id, reply.queued, reply.created, reply.redacted) == ("t1", 0, True, 0)
    assert reply.model_extra == {"from_the_future": 1}
    assert reply.wire()["from_the_future"] == 1


def test_aliases_round_trip_to_the_wire_names() -> None:
    plan = parse_result(PlanReadResult, "plan.read", {"text": "x", "path": "p", "bytes": 1})
    assert plan.bytes == 1 and plan.wire() == {"text": "x", "path": "p", "bytes": 1}
    export = parse_result(KbExportResult, "kb.export", {"chunks": [], "from": "p/a"})
    assert export.from_ == "p/a" and export.wire()["from"] == "p/a"
    offload = parse_result(OffloadProposal, "offload.propose", {"from": "p/a", "name": "b"})
    assert offload.from_ == "p/a" and offload.kb_ids == []


def test_nested_rows_are_typed_and_lenient() -> None:
    report = parse_result(
        KbReport,
        "kb.ingest",
        {"ingested": [{"doc_id": "d", "path": "a.md", "chunks": 2, "new": 1}], "skipped": []},
    )
    assert report.ingested[0].chunks == 2 and report.ingested[0].model_extra == {"new": 1}
    assert report["ingested"][0]["path"] == "a.md"  # mapping reads, for older callers
    listing = parse_result(QueueListResult, "queue.list", {"dead": [{"id": "q", "reason": "r"}]})
    assert listing.current is None and listing.dead[0].reason == "r"
    models = parse_result(ModelListResult, "model.list", {"models": [{"id": "m"}]})
    assert models.models[0].healthy and models.pinned is None


def test_an_older_agents_memory_stats_leave_the_new_parts_out() -> None:
    stats = parse_result(MemoryStatsResult, "memory.stats", {"model": "m", "ctx_pct": 3.5})
    assert stats.next_context_tokens is None and stats.working_context is None
    assert stats.usage.per_model == {}


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({}, "reply to input: 'id' is required"),
        ({"id": 3}, "reply to input: 'id' must be a string"),
        (["not", "a", "map"], "reply to input: must be a map, got list"),
    ],
)
def test_a_reply_that_does_not_fit_is_one_bad_request_line(raw: object, words: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_result(InputResult, "input", raw)
    assert caught.value.code == "bad_request"
    assert caught.value.message.startswith(words)
    assert "\n" not in caught.value.one_line()


def test_one_damaged_row_does_not_fail_the_listing() -> None:
    # A hand-edited dead.jsonl line whose text is a number: the other rows are typed,
    # the odd one is still shown with what it holds, and the reply is not an error.
    raw = {
        "current": None,
        "pending": [{"id": "q-1", "text": "fine"}],
        "dead": [{"id": "q-2", "text": 5, "reason": "gave up"}, {"id": "q-3", "text": "ok"}],
    }
    listing = parse_result(QueueListResult, "queue.list", raw)
    assert [row.id for row in listing.dead] == ["q-2", "q-3"]
    assert listing.dead[0].text == 5 and listing.dead[0].reason == "gave up"
    assert listing.pending[0].text == "fine"


def test_the_contract_context_holds_every_row() -> None:
    raw = {"pending": [], "dead": [{"id": "q-2", "text": 5}]}
    with pytest.raises(ValidationError):
        QueueListResult.model_validate(raw, context={STRICT_ROWS: True})
