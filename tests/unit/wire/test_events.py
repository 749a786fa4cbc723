"""Event payload models: typed on read, lenient across versions, never raising."""

from __future__ import annotations

from ateam.bus.events import Event
from ateam.wire.events import (
    PAYLOADS,
    Chunk,
    EventType,
    Malformed,
    Payload,
    TaskEnd,
    ToolStart,
    parse_payload,
)


def test_every_event_type_has_a_payload_model() -> None:
    assert set(PAYLOADS) == set(EventType)


def test_a_task_end_reads_as_typed_fields() -> None:
    payload = parse_payload("task.end", {"ok": True, "tokens_out": 7, "task_id": "t1"})
    assert isinstance(payload, TaskEnd)
    assert (payload.ok, payload.tokens_out, payload.task_id, payload.error) == (True, 7, "t1", None)


def test_fields_of_a_newer_agent_are_kept_and_unknown_types_still_parse() -> None:
    payload = parse_payload("tool.start", {"name": "fs.read", "input": {"path": b"x"}, "new": 1})
    assert isinstance(payload, ToolStart)
    assert payload.input == {"path": b"x"}
    assert payload.model_extra == {"new": 1}
    future = parse_payload("team.message", {"to": "b"})
    assert type(future) is Payload and future.model_extra == {"to": "b"}


def test_a_payload_that_fits_nothing_becomes_malformed() -> None:
    payload = parse_payload("task.end", {"tokens_in": {"not": "a number"}})
    assert isinstance(payload, Malformed)
    assert "task.end event: 'tokens_in'" in payload.problem


def test_chunks_give_back_their_bytes() -> None:
    assert parse_payload("token", {"text": "héllo"}).data() == "héllo".encode()  # type: ignore[attr-defined]
    binary = parse_payload("tool.output", {"bin": b"\x00\x01\xff"})
    assert isinstance(binary, Chunk) and binary.data() == b"\x00\x01\xff"
    legacy = parse_payload("tool.output", {"b64": "AAEC"})  # what earlier agents sent
    assert isinstance(legacy, Chunk) and legacy.data() == b"\x00\x01\x02"
    assert Chunk(b64="!!").data() == b"<undecodable binary chunk>"


def test_an_event_parses_its_payload_once() -> None:
    event = Event("p/a", 3, "task.start", 0.0, {"text": "do it", "source": "cli"})
    assert event.payload is event.payload
    assert event.payload.model_dump()["text"] == "do it"
