"""One renderer for both front ends: what a line says is the same in plain and panes mode."""

from __future__ import annotations

import asyncio
import io

from ateam.bus.events import Event
from ateam.console.panes import PanesView
from ateam.console.plain import PlainView
from ateam.console.render import Chunk, Line, Tone, render


def plain_lines(*events: Event) -> list[str]:
    out = io.StringIO()
    view = PlainView(asyncio.Queue(), out, color=False)
    for event in events:
        view.event(event)
    view.flush()
    return out.getvalue().splitlines()


def panes_lines(*events: Event) -> list[str]:
    # Without an app nothing is attached: every agent's lines go to its tail.
    view = PanesView(tail_lines=100)
    for event in events:
        view.event(event)
    view.settle()
    return [text for text, _ in view.tails.get("p/a", ())]


def test_a_tool_call_whose_arguments_hold_bytes_renders_in_both_modes() -> None:
    events = [
        Event("p/a", 1, "tool.start", 0.0, {"name": "fs.write", "input": {"data": b"\x00\xff"}}),
        Event("p/a", 2, "approval.request", 0.0, {"tool": "fs.write", "args": {"b": b"x"}}),
        Event("p/a", 3, "context", 0.0, {"action": "posted", "blob": b"\x01"}),
        Event("p/a", 4, "something.new", 0.0, {"raw": b"\x02"}),
    ]
    plain = plain_lines(*events)
    panes = panes_lines(*events)
    assert plain[0] == '[A:p/a] ▶ fs.write {"data": "b\'\\\\x00\\\\xff\'"}'
    assert panes[0] == plain[0].removeprefix("[A:p/a] ")
    assert len(plain) == len(panes) == 4
    assert all(p.endswith(q) for p, q in zip(plain, panes, strict=True))


def test_lines_carry_tones_and_streams_are_chunks() -> None:
    token = Event("p/a", 1, "token", 0.0, {"text": "hel"})
    assert render(token) == Chunk("hel")
    output = Event("p/a", 2, "tool.output", 0.0, {"bin": b"\x80\xff"})
    assert render(output) == Chunk("\ufffd\ufffd", output=True)
    legacy = Event("p/a", 2, "tool.output", 0.0, {"b64": "gP8="})  # from an earlier agent
    assert render(legacy) == Chunk("\ufffd\ufffd", output=True)
    end = Event("p/a", 3, "task.end", 0.0, {"ok": False, "error": "boom", "task_id": "q-1"})
    assert render(end) == (Line("task q-1 failed: boom", Tone.RULE_FAILED),)
    assert render(Event("p/a", 4, "state", 0.0, {"state": "idle"})) == ()


def test_the_front_ends_differ_only_in_dress() -> None:
    events = [
        Event("p/a", 1, "task.start", 0.0, {"task_id": "q-1", "text": "go"}),
        Event("p/a", 2, "model.switch", 0.0, {"from": "a", "to": "b", "reason": "slow"}),
    ]
    assert plain_lines(*events) == [
        "[A:p/a] --- task q-1: go",
        "*** [A:p/a] model switch: a → b (slow)",
    ]
    assert panes_lines(*events) == ["─── task q-1: go", "⇄ model switch: a → b (slow)"]


def test_a_payload_that_fits_no_model_is_a_warning_not_a_crash() -> None:
    # An agent of another version (or a forger) sends a task.end whose counts are maps.
    odd = Event("p/a", 7, "task.end", 0.0, {"ok": True, "tokens_in": {"x": 1}, "task_id": "q"})
    (line,) = render(odd)  # type: ignore[misc]
    assert line.tone is Tone.WARN
    assert line.text.startswith("malformed event #7: task.end event: 'tokens_in'")
    assert plain_lines(odd) == [f"[A:p/a] {line.text}"]
    assert panes_lines(odd) == [line.text]


def test_renderers_read_typed_payloads() -> None:
    # "from" is a Python keyword: the model reads it under an alias, the line shows it.
    switch = Event("p/a", 1, "model.switch", 0.0, {"from": "big", "to": "small", "reason": "429"})
    assert render(switch) == (Line("model switch: big → small (429)", Tone.SWITCH),)
    newer = Event("p/a", 2, "team.message", 0.0, {"to": "b", "text": "hi"})
    assert render(newer) == (Line('team.message {"to": "b", "text": "hi"}', Tone.QUIET),)


def test_a_team_notice_is_one_line_in_both_modes() -> None:
    sent = Event(
        "p/a",
        1,
        "team.notice",
        0.0,
        {
            "sender": "p/a",
            "kind": "failed",
            "board_task": "t-1",
            "title": "fix it",
            "text": "tests fail",
            "to": ["p/lead"],
        },
    )
    heard = Event("p/a", 2, "team.notice", 0.0, {"sender": "p/b", "kind": "idle"})
    assert render(sent) == (
        Line("notice: p/a failed board task t-1 (fix it): tests fail (told p/lead)", Tone.STATE),
    )
    assert plain_lines(sent, heard) == [
        "[A:p/a] notice: p/a failed board task t-1 (fix it): tests fail (told p/lead)",
        "[A:p/a] notice: p/b is idle: nothing queued",
    ]
    assert panes_lines(sent, heard) == [
        "notice: p/a failed board task t-1 (fix it): tests fail (told p/lead)",
        "notice: p/b is idle: nothing queued",
    ]
