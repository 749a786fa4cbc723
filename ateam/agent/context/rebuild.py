"""What the model sees at the start of a turn (SPEC §5.3): the context rebuild.

The context is rebuilt from durable state every task — never carried only in memory —
so an agent restarted after a crash sees exactly what it would have seen had it kept
running: the effective system prompt (base + overlay + toolbox), the rolling summaries
of older work, then as many of the newest raw turns as fit the model's window, then the
new input. Tokens are estimated (~4 characters each) because the exact count needs the
provider's tokenizer; the estimate errs on the generous side for code and English.

Two invariants keep every provider happy: a ``tool`` result is never the first turn
after the cut (its ``assistant`` tool call would be missing), and an assistant turn
that asked for tools is always followed by a result for each call (a call interrupted
before it ran is given a placeholder result when the history is read back).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ateam._json import JsonObject
from ateam.agent.state.history import Summary
from ateam.providers.base import Message, estimate_tokens
from ateam.wire.turns import Turn

REPLY_RESERVE_SHARE = 0.25
"""Share of the window kept free for the model's reply."""
MAX_REPLY_RESERVE = 8192
SUMMARY_SHARE = 0.15
"""At most this share of the window goes to rolling summaries."""
MESSAGE_OVERHEAD = 4
"""Tokens each message costs beyond its text (role, separators)."""

_MISSING_RESULT = "(no result: the task was interrupted before this tool ran)"


@dataclass(frozen=True)
class Context:
    """The messages a model call is sent, and what they cost."""

    messages: list[Message]
    tokens: int
    """Estimated tokens of :attr:`messages`."""
    turns_used: int
    """How many history turns made it in."""
    turns_dropped: int
    """How many of the offered history turns did not fit."""


def message_tokens(message: Message) -> int:
    calls = sum(estimate_tokens(str(call)) for call in message.tool_calls)
    return estimate_tokens(message.content) + calls + MESSAGE_OVERHEAD


def turn_to_message(turn: Turn) -> Message | None:
    """A history turn as a provider message; ``None`` for turns a model is not shown."""
    role = turn.role
    if role == "user":
        return Message("user", turn.content)
    if role == "assistant":
        calls: list[JsonObject] = [
            {"id": c.id, "name": c.name, "args": dict(c.args)} for c in turn.tool_calls
        ]
        return Message("assistant", turn.content, tool_calls=calls)
    if role == "tool" and turn.tool_call_id:
        return Message("tool", turn.content, tool_call_id=turn.tool_call_id)
    return None


def repair(messages: Sequence[Message]) -> list[Message]:
    """Drop leading orphans and add placeholder results for calls that never ran."""
    out: list[Message] = []
    start = 0
    while start < len(messages) and messages[start].role == "tool":
        start += 1
    open_calls: list[str] = []
    for message in messages[start:]:
        if message.role == "tool":
            if message.tool_call_id in open_calls:
                open_calls.remove(str(message.tool_call_id))
                out.append(message)
            continue  # a result whose call is not in view
        out.extend(Message("tool", _MISSING_RESULT, tool_call_id=c) for c in open_calls)
        open_calls = [str(call["id"]) for call in message.tool_calls]
        out.append(message)
    out.extend(Message("tool", _MISSING_RESULT, tool_call_id=c) for c in open_calls)
    return out


def summary_block(summaries: Iterable[Summary], budget: int) -> str:
    """The newest summaries that fit ``budget`` tokens, oldest first, as one block."""
    kept: list[str] = []
    used = 0
    for entry in reversed(list(summaries)):
        text = entry.summary.strip()
        cost = estimate_tokens(text) + 2
        if not text or used + cost > budget:
            break
        kept.append(text)
        used += cost
    if not kept:
        return ""
    body = "\n\n".join(reversed(kept))
    return f"## Summary of earlier work\n\n{body}"


def build(
    *,
    system: str,
    summaries: Sequence[Summary],
    turns: Sequence[Turn],
    new_input: str | None,
    window: int,
) -> Context:
    """Assemble the context for one model call within ``window`` tokens.

    Args:
        system: the effective system prompt.
        summaries: rolling summaries, oldest first.
        turns: candidate history turns, oldest first (more than fit is fine).
        new_input: the task's text, appended last (``None`` when it is already in turns).
        window: the model's context window in tokens.
    """
    reserve = min(int(window * REPLY_RESERVE_SHARE), MAX_REPLY_RESERVE)
    budget = max(window - reserve, 0)
    block = summary_block(summaries, int(window * SUMMARY_SHARE))
    head = Message("system", f"{system}\n\n{block}" if block else system)
    tail = [Message("user", new_input)] if new_input is not None else []
    used = message_tokens(head) + sum(message_tokens(m) for m in tail)
    converted = [m for m in (turn_to_message(t) for t in turns) if m is not None]
    chosen: list[Message] = []
    for message in reversed(converted):
        cost = message_tokens(message)
        if used + cost > budget:
            break
        chosen.append(message)
        used += cost
    chosen.reverse()
    body = repair(chosen)
    messages = [head, *body, *tail]
    return Context(
        messages=messages,
        tokens=sum(message_tokens(m) for m in messages),
        turns_used=len(body),
        turns_dropped=len(converted) - len(chosen),
    )
