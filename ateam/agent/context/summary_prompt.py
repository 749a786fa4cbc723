"""The summary request (SPEC §8): fold new turns into the running summary, and read the reply.

The request states its limit in words (models count words better than tokens), quotes
long turns by their head and tail, and asks for no preamble. The reply is read as it
streams and abandoned as soon as it can no longer be a summary: when it repeats the
request's own headings (the offline ``echo`` model does exactly that) or runs past twice
the limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ateam.providers.base import Message, Provider, TextDelta, estimate_tokens
from ateam.wire.turns import Turn

__all__ = [
    "SUMMARY_MAX_TOKENS",
    "WORDS_PER_TOKEN",
    "SummaryReply",
    "read_summary",
    "summary_messages",
]

SUMMARY_MAX_TOKENS = 2000
"""The running summary's hard limit, by :func:`~ateam.providers.base.estimate_tokens`."""
WORDS_PER_TOKEN = 0.75
"""Models count words better than tokens, so the prompt states its limit in words."""

_TURN_MAX_CHARS = 6000
"""Longest turn text quoted whole in a summary prompt; longer ones (tool output, mostly)
keep their head and tail, where commands, errors and exit codes usually are."""
_CALL_ARGS_MAX_CHARS = 300


_CURRENT_HEADING = "Current summary:"
_TURNS_HEADING = "New turns, oldest first:"
_REQUEST_ECHO = re.compile(f"{re.escape(_CURRENT_HEADING)}|{re.escape(_TURNS_HEADING)}")
"""One of the request's own headings in a reply: the request coming back."""


def echoes_request(text: str) -> bool:
    """Whether ``text`` holds the request's own headings: it is the request, not a summary."""
    return _REQUEST_ECHO.search(text) is not None


_CUT_OFF_CHARS = 2 * SUMMARY_MAX_TOKENS * 4
"""Reading stops here (twice the limit at ~4 characters a token): far too long already."""


def summary_messages(
    current: str,
    turns: Iterable[Turn],
    *,
    limit: int = SUMMARY_MAX_TOKENS,
    previous_tokens: int | None = None,
) -> list[Message]:
    """The request that folds ``turns`` into the ``current`` summary.

    Args:
        current: the summary so far (``""`` for none).
        turns: history turns, oldest first.
        limit: the length asked for, in tokens (stated to the model in words).
        previous_tokens: the length of a reply that was too long; makes the request
            stricter.
    """
    words = int(limit * WORDS_PER_TOKEN)
    rules = [
        "You keep the working summary of a software agent: what a colleague taking over",
        "would need to continue the work. Merge the current summary with the new turns",
        "into one updated summary.",
        "",
        "Rules:",
        "- Keep every file name, path, identifier, command, version and number exactly",
        "  as written.",
        "- Add no facts: state only what the current summary or the turns say.",
        "- Prefer what is still true and still matters (state of the work, decisions,",
        "  open problems, next steps) over a narration of what happened.",
        "- Reply with the summary only: no preamble, no closing remarks.",
        f"- Stay under {words} words (about {limit} tokens).",
    ]
    if previous_tokens is not None:
        rules += [
            "",
            f"Your previous summary was about {previous_tokens} tokens, far too long.",
            f"Be terser: at most {words} words. Drop narration and repetition first,",
            "never the names and numbers.",
        ]
    body = [
        _CURRENT_HEADING,
        current.strip() or "(none yet)",
        "",
        _TURNS_HEADING,
        *(_turn_text(turn) for turn in turns),
        "",
        "Write the updated summary now.",
    ]
    return [Message("system", "\n".join(rules)), Message("user", "\n".join(body))]


@dataclass
class SummaryReply:
    """A model's reply to a request for a summary."""

    text: str
    tokens: int
    refused: str | None = None
    """Why the reply cannot be a summary (it repeats the request, it is empty)."""


async def read_summary(provider: Provider, messages: list[Message]) -> SummaryReply:
    """Stream a summary, stopping as soon as it can no longer be one.

    A reply that quotes the request's own headings is the request fed back (the offline
    ``echo`` model does exactly that): storing it would nest each summary inside the
    next, and reading the rest of it would cost a model's whole slow echo. A reply past
    twice the limit is cut off too: the stricter retry is what can still help.
    """
    parts: list[str] = []
    size = 0
    stream = provider.stream(messages, tools=None)
    try:
        async for chunk in stream:
            # Tool calls, usage and headroom are no part of a summary.
            if not isinstance(chunk, TextDelta):
                continue
            parts.append(chunk.text)
            size += len(chunk.text)
            # The heading may straddle two chunks: look at the tail, not just this chunk.
            if _REQUEST_ECHO.search("".join(parts[-8:])):
                return SummaryReply("", 0, "the reply repeats the request, not a summary")
            if size > _CUT_OFF_CHARS:
                break
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    text = "".join(parts).strip()
    if not text:
        return SummaryReply("", 0, "empty reply")
    if _REQUEST_ECHO.search(text):
        return SummaryReply("", 0, "the reply repeats the request, not a summary")
    return SummaryReply(text, estimate_tokens(text))


def _turn_text(turn: Turn) -> str:
    role = turn.role or "?"
    label = f"tool {turn.name}" if role == "tool" and turn.name else role
    lines = [f"[{label}] {_shorten_middle(turn.content, _TURN_MAX_CHARS)}"]
    for call in turn.tool_calls:
        args = json.dumps(call.args, ensure_ascii=False, sort_keys=True)
        args = _shorten_middle(args, _CALL_ARGS_MAX_CHARS)
        lines.append(f"  (called {call.name} {args})")
    return "\n".join(lines)


def _shorten_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n[… {len(text) - head - tail} characters omitted …]\n{text[-tail:]}"
