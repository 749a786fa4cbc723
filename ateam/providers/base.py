"""The interface every model provider implements (SPEC §7).

A provider turns a list of messages into a stream of :class:`Chunk` values: text as it
arrives, tool calls once complete, and usage at the end. Providers know nothing about
Redis, events or queues; the task runner does the rest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Message:
    """One message of the conversation a provider is sent."""

    role: str
    """``system``, ``user``, ``assistant`` or ``tool``."""
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_call_id: str | None = None


@dataclass(frozen=True)
class TextDelta:
    """A piece of the model's reply text, as it streams."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for, its arguments parsed."""

    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Usage:
    """Tokens a model call took in and gave out."""

    tokens_in: int
    tokens_out: int


@dataclass(frozen=True)
class Headroom:
    """What is left of the provider's rate limits, from its response headers.

    ``fraction`` is the smallest remaining/limit ratio among the limits the headers
    gave (requests, tokens, input/output tokens), so ``0.05`` means "5 % left of the
    scarcest limit". The router switches models when it falls under its threshold.
    """

    fraction: float
    remaining: dict[str, int] = field(default_factory=dict)
    """Limit name (``requests``, ``tokens``, ...) → what is left of it."""
    limits: dict[str, int] = field(default_factory=dict)
    """Limit name → its size."""


Chunk = TextDelta | ToolCall | Usage | Headroom


class Provider(Protocol):
    """A model endpoint. ``model`` is the entry id the agent routes by."""

    model: str
    context_window: int

    def stream(
        self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None
    ) -> AsyncIterator[Chunk]: ...


def estimate_tokens(text: str) -> int:
    """A provider-independent estimate (~4 characters a token) for when usage is absent."""
    return max(1, (len(text) + 3) // 4) if text else 0
