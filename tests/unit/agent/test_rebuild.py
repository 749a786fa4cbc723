"""The context rebuild (SPEC §5.3): system + summaries + newest turns within the window."""

from __future__ import annotations

from typing import Any

from ateam.agent.context import rebuild as ctx
from ateam.agent.state.history import Summary
from ateam.providers.base import Message
from ateam.wire.turns import Turn


def user(text: str) -> Turn:
    return Turn(role="user", content=text)


def assistant(text: str, calls: list[dict[str, Any]] | None = None) -> Turn:
    turn: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        turn["tool_calls"] = calls
    return Turn.model_validate(turn)


def tool(call_id: str, text: str) -> Turn:
    return Turn(role="tool", content=text, tool_call_id=call_id, name="os.exec")


def test_order_is_system_then_history_then_the_new_input() -> None:
    built = ctx.build(
        system="BASE",
        summaries=[Summary(summary="earlier we set up CI")],
        turns=[user("first"), assistant("answer one")],
        new_input="second",
        window=8192,
    )
    roles = [m.role for m in built.messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert built.messages[0].content.startswith("BASE")
    assert "earlier we set up CI" in built.messages[0].content
    assert built.messages[-1].content == "second"
    assert built.turns_used == 2 and built.turns_dropped == 0


def test_a_long_history_never_exceeds_the_budget_and_keeps_the_newest_turns() -> None:
    turns = []
    for i in range(2000):
        turns += [user(f"question {i} " + "x" * 200), assistant(f"answer {i} " + "y" * 300)]
    window = 4096
    built = ctx.build(system="S", summaries=[], turns=turns, new_input="now", window=window)
    budget = window - min(int(window * ctx.REPLY_RESERVE_SHARE), ctx.MAX_REPLY_RESERVE)
    assert built.tokens <= budget
    assert built.turns_dropped > 0
    assert built.messages[-2].content.startswith("answer 1999")
    assert built.messages[-1].content == "now"


def test_summaries_take_at_most_their_share_newest_first() -> None:
    summaries = [Summary(summary=f"summary {i} " + "z" * 400) for i in range(100)]
    built = ctx.build(system="S", summaries=summaries, turns=[], new_input=None, window=4000)
    head = built.messages[0].content
    assert "summary 99" in head and "summary 0 " not in head
    assert ctx.message_tokens(built.messages[0]) <= int(4000 * ctx.SUMMARY_SHARE) + 10


def test_a_cut_never_starts_with_an_orphaned_tool_result() -> None:
    call = {"id": "call_1", "name": "os.exec", "args": {"cmd": "ls"}}
    turns = [user("q"), assistant("running", [call]), tool("call_1", "r" * 4000), assistant("ok")]
    # Room for the tool result and the last answer, not for the call before them.
    built = ctx.build(system="S", summaries=[], turns=turns, new_input=None, window=1700)
    assert built.messages[1].role != "tool"
    assert all(
        m.role != "tool"
        or any(c["id"] == m.tool_call_id for p in built.messages for c in p.tool_calls)
        for m in built.messages
    )


def test_a_call_that_never_ran_gets_a_placeholder_result() -> None:
    calls = [
        {"id": "call_1", "name": "os.exec", "args": {}},
        {"id": "call_2", "name": "os.exec", "args": {}},
    ]
    messages = [
        Message("user", "q"),
        Message("assistant", "", tool_calls=calls),
        Message("tool", "ran", tool_call_id="call_1"),
        Message("user", "next question"),
    ]
    repaired = ctx.repair(messages)
    assert [m.role for m in repaired] == ["user", "assistant", "tool", "tool", "user"]
    assert repaired[3].tool_call_id == "call_2"
    assert "interrupted" in repaired[3].content


def test_history_lines_that_are_not_turns_are_ignored() -> None:
    assert ctx.turn_to_message(Turn(role="note", content="x")) is None
    assert ctx.turn_to_message(Turn(role="tool", content="x")) is None  # no call id
    message = ctx.turn_to_message(assistant("a", [{"id": "c", "name": "fs.read", "args": None}]))
    assert message is not None and message.tool_calls == [
        {"id": "c", "name": "fs.read", "args": {}}
    ]
