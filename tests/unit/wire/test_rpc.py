"""RPC parameter models: strict where the hand-written checks were, one-line errors."""

from __future__ import annotations

import pytest

from ateam.errors import BadRequest, UsageError
from ateam.wire.rpc import (
    MAX_HISTORY_TAIL,
    HistoryTailParams,
    InputParams,
    KbIngestParams,
    KbSearchParams,
    NoParams,
    parse_params,
)


def test_input_takes_text_and_defaults_the_rest() -> None:
    params = parse_params(InputParams, "input", {"text": "hi"})
    assert (params.text, params.source, params.trace_id) == ("hi", "console", None)


@pytest.mark.parametrize("text", ["", "   ", None, 3, b"bytes"])
def test_input_refuses_text_that_is_not_a_non_empty_string(text: object) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_params(InputParams, "input", {"text": text})
    assert caught.value.code == "bad_request"
    assert caught.value.message.startswith("input: 'text' ")
    assert "\n" not in caught.value.one_line()


def test_a_missing_field_is_named() -> None:
    with pytest.raises(BadRequest, match=r"input: 'text' is required"):
        parse_params(InputParams, "input", {})


@pytest.mark.parametrize("n", [True, "3", -1, MAX_HISTORY_TAIL + 1, 2.5])
def test_integers_are_checked_strictly(n: object) -> None:
    # ``true`` is not 1 and "3" is not 3: the old hand-written checks refused them too.
    with pytest.raises(BadRequest, match=r"history.tail: 'n' "):
        parse_params(HistoryTailParams, "history.tail", {"n": n})


def test_bounds_and_defaults_of_integers() -> None:
    assert parse_params(HistoryTailParams, "history.tail", {}).n == 20
    assert parse_params(HistoryTailParams, "history.tail", {"n": MAX_HISTORY_TAIL}).n == 1000
    assert parse_params(KbSearchParams, "kb.search", {"query": "q"}).k is None


def test_lists_must_hold_the_right_things() -> None:
    with pytest.raises(BadRequest, match=r"kb.ingest: 'paths' must not be empty"):
        parse_params(KbIngestParams, "kb.ingest", {"paths": []})
    with pytest.raises(BadRequest, match=r"kb.ingest: 'paths.1' must be a string"):
        parse_params(KbIngestParams, "kb.ingest", {"paths": ["a", 2]})


def test_unknown_fields_are_ignored_for_newer_clients() -> None:
    assert parse_params(NoParams, "status", {"from_the_future": 1}) == NoParams()


def test_every_problem_is_in_the_detail() -> None:
    with pytest.raises(BadRequest) as caught:
        parse_params(KbSearchParams, "kb.search", {"query": "", "k": 0})
    assert "(and 1 more problem(s))" in caught.value.message
    assert [e["loc"] for e in caught.value.detail["errors"]] == [["query"], ["k"]]


def test_a_bad_request_is_a_usage_error_with_one_code() -> None:
    # One meaning, one code: the console and the verbs catch both as a usage error.
    error = BadRequest("x")
    assert isinstance(error, UsageError)
    assert error.code == UsageError.code == "bad_request"
    assert error.hint == ""
