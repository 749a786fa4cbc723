"""The ``anthropic`` provider: Claude through the official SDK's Messages API (SPEC §7).

How ateam's model-neutral conversation becomes an Anthropic request, and back:

* **No SDK retries.** The client is built with ``max_retries=0``. Retrying, waiting out a
  ``Retry-After`` and switching to a fallback model are the router's decisions; an SDK
  retrying on its own would hide a 429 or 529 from it and stall the agent for seconds.
* **The client is made at the first call**, not at construction, and so is the check of
  the API key: a model that is configured but never used must not stop an agent from
  starting, and a missing key is an error of the task that needed it
  (:meth:`AuthFailed.missing_key <ateam.errors.AuthFailed.missing_key>`).
* **Tool names.** ateam names tools like ``os.exec``; Anthropic accepts only
  ``^[a-zA-Z0-9_-]{1,64}$``. :func:`tool_wire_name` writes each ``.`` as ``__``
  (``os.exec`` → ``os__exec``), and names that rule cannot carry back unambiguously
  (ones already holding ``__``, other characters, too long) get a digest suffix. Each
  request keeps a map from the names it sent back to ateam's, so a :class:`ToolCall`
  always carries the dotted name.
* **Messages.** ``system`` messages, wherever they are, are joined into the top-level
  ``system`` parameter. An assistant message with tool calls becomes text plus
  ``tool_use`` blocks; a ``tool`` message becomes a ``tool_result`` block of a ``user``
  message. Consecutive messages of one role are merged into one message, so a run of
  tool results answers the assistant turn that asked for them in a single user turn,
  with the tool results first as the API requires.
* **Settings.** ``max_tokens`` (required by the API; 4096 when unset) is an argument;
  every other ``models.yaml`` setting goes into the request body unchanged via
  ``extra_body``, because this SDK no longer has arguments for sampling settings such
  as ``temperature``. Note that the API version this SDK sends (``2026-10-21``) rejects
  ``temperature``, ``top_p`` and ``top_k``; set them only for endpoints that accept them.
* **Headroom.** The ``anthropic-ratelimit-*-remaining``/``-limit`` headers of a
  successful response become one :class:`Headroom`, yielded before anything else; its
  fraction is the smallest remaining/limit ratio among the limits present.
* **Errors.** SDK exceptions become ateam's typed :class:`~ateam.errors.ProviderError`
  subclasses through :func:`~ateam.providers.status.provider_error_from_status`, with one-line
  messages. An ``error`` event in the middle of a stream (say ``overloaded_error``)
  arrives with HTTP status 200, so its error type decides the status it is classified as.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
from anthropic.types import (
    MessageParam,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)

from ateam.config.schema import ModelEntry
from ateam.errors import AuthFailed, ConfigError, ProviderError
from ateam.providers._headers import headroom as read_headroom
from ateam.providers._headers import retry_after
from ateam.providers.base import Chunk, Message, TextDelta, ToolCall, Usage
from ateam.providers.status import provider_error_from_status

PROVIDER_NAME = "anthropic"
DEFAULT_API_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_MAX_TOKENS = 4096
"""The API requires ``max_tokens``; this is what a model entry without one gets."""

_RESERVED_SETTINGS = frozenset({"model", "messages", "system", "tools", "stream"})
"""Request fields the provider builds itself; a setting of that name would overwrite them."""

_WIRE_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NOT_WIRE_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_DIGEST_LEN = 10

_RATE_LIMITS: dict[str, tuple[str, str]] = {
    name: (f"anthropic-ratelimit-{header}-remaining", f"anthropic-ratelimit-{header}-limit")
    for name, header in (
        ("requests", "requests"),
        ("tokens", "tokens"),
        ("input_tokens", "input-tokens"),
        ("output_tokens", "output-tokens"),
    )
}
"""Limit name → its (remaining, limit) response headers."""

_ERROR_TYPE_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""Anthropic error type → the HTTP status it comes with, to classify in-stream errors."""

_Block = TextBlockParam | ToolUseBlockParam | ToolResultBlockParam


# --- tool names -----------------------------------------------------------------------


def tool_wire_name(name: str) -> str:
    """The name ateam tool ``name`` is sent under: ``os.exec`` → ``os__exec``.

    A name the plain rule cannot carry back unambiguously (it already contains ``__``
    or characters Anthropic refuses, or is too long) becomes a sanitised stem plus a
    digest of the full name, which keeps distinct tools distinct.
    """
    wire = name.replace(".", "__")
    if _WIRE_NAME.fullmatch(wire) and _dotted_name(wire) == name:
        return wire
    digest = hashlib.sha256(name.encode()).hexdigest()[:_DIGEST_LEN]
    stem = _NOT_WIRE_CHAR.sub("_", wire)[: 64 - _DIGEST_LEN - 1]
    return f"{stem}-{digest}"


def _dotted_name(wire: str) -> str:
    return wire.replace("__", ".")


def _name_map(messages: list[Message], tools: list[dict[str, Any]] | None) -> dict[str, str]:
    """Wire name → ateam name for every tool this request mentions."""
    names = {str(spec["name"]) for spec in tools or ()}
    names.update(str(call["name"]) for m in messages for call in m.tool_calls)
    return {tool_wire_name(name): name for name in names}


# --- request building -----------------------------------------------------------------


def _tool_param(spec: dict[str, Any]) -> ToolParam:
    schema = spec.get("parameters") or {"type": "object", "properties": {}}
    param: ToolParam = {"name": tool_wire_name(str(spec["name"])), "input_schema": schema}
    if spec.get("description"):
        param["description"] = str(spec["description"])
    return param


def _blocks(message: Message) -> list[_Block]:
    """The content blocks of one ateam message (``system`` ones are handled apart)."""
    if message.role == "tool":
        if message.tool_call_id is None:
            # A result without its call id cannot be a tool_result; keep its text anyway.
            return [{"type": "text", "text": f"(tool result) {message.content}"}]
        return [
            {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}
        ]
    # The API refuses empty text blocks, e.g. an assistant turn that only called tools.
    blocks: list[_Block] = [{"type": "text", "text": message.content}] if message.content else []
    if message.role == "assistant":
        blocks.extend(
            {
                "type": "tool_use",
                "id": str(call["id"]),
                "name": tool_wire_name(str(call["name"])),
                "input": dict(call.get("args") or {}),
            }
            for call in message.tool_calls
        )
    return blocks


def _add_blocks(target: list[_Block], blocks: list[_Block]) -> None:
    """Append to a merged turn, keeping tool results ahead of text as the API requires."""
    for block in blocks:
        if block["type"] == "tool_result":
            at = sum(1 for b in target if b["type"] == "tool_result")
            target.insert(at, block)
        else:
            target.append(block)


def convert_messages(messages: list[Message]) -> tuple[str | None, list[MessageParam]]:
    """ateam messages → (the ``system`` parameter, strictly alternating API messages)."""
    system = [m.content for m in messages if m.role == "system" and m.content]
    turns: list[tuple[str, list[_Block]]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            _add_blocks(turns[-1][1], blocks)
        else:
            turns.append((role, []))
            _add_blocks(turns[-1][1], blocks)
    params: list[MessageParam] = [
        {"role": "assistant", "content": blocks}
        if role == "assistant"
        else {"role": "user", "content": blocks}
        for role, blocks in turns
    ]
    return ("\n\n".join(system) if system else None), params


# --- response headers -----------------------------------------------------------------


# --- the stream -----------------------------------------------------------------------


@dataclass
class _ToolBlock:
    id: str
    name: str
    start_input: dict[str, Any]
    parts: list[str] = field(default_factory=list)

    def call(self) -> ToolCall:
        text = "".join(self.parts)
        if not text.strip():
            return ToolCall(id=self.id, name=self.name, args=dict(self.start_input))
        try:
            args = json.loads(text)
        except json.JSONDecodeError:
            args = None
        # Malformed arguments are handed on rather than raised: the runner reports them to
        # the model as a failed tool call, which lets the model correct itself.
        return ToolCall(
            id=self.id, name=self.name, args=args if isinstance(args, dict) else {"_raw": text}
        )


@dataclass
class _Turn:
    """What one streamed reply has produced so far."""

    names: Mapping[str, str]
    tokens_in: int = 0
    tokens_out: int = 0
    tools: dict[int, _ToolBlock] = field(default_factory=dict)
    finished: bool = False

    def message_start(self, event: RawMessageStartEvent) -> Iterator[Chunk]:
        usage = event.message.usage
        # Cached prompt tokens fill the context window as much as fresh ones.
        self.tokens_in = _prompt_tokens(usage.input_tokens, usage)
        self.tokens_out = usage.output_tokens
        return iter(())

    def content_block_start(self, event: RawContentBlockStartEvent) -> Iterator[Chunk]:
        block = event.content_block
        if block.type == "tool_use":
            name = self.names.get(block.name) or _dotted_name(block.name)
            self.tools[event.index] = _ToolBlock(block.id, name, dict(block.input or {}))
        elif block.type == "text" and block.text:
            yield TextDelta(block.text)

    def content_block_delta(self, event: RawContentBlockDeltaEvent) -> Iterator[Chunk]:
        delta = event.delta
        if delta.type == "text_delta":
            if delta.text:
                yield TextDelta(delta.text)
        elif delta.type == "input_json_delta":
            tool = self.tools.get(event.index)
            if tool is not None:
                tool.parts.append(delta.partial_json)
        # Thinking, signature and citation deltas have no ateam counterpart yet.

    def content_block_stop(self, event: RawContentBlockStopEvent) -> Iterator[Chunk]:
        tool = self.tools.pop(event.index, None)
        if tool is not None:
            yield tool.call()

    def message_delta(self, event: RawMessageDeltaEvent) -> Iterator[Chunk]:
        usage = event.usage
        # Counts here are running totals; an input count, when sent, supersedes message_start's.
        if usage.input_tokens is not None:
            self.tokens_in = _prompt_tokens(usage.input_tokens, usage)
        self.tokens_out = usage.output_tokens
        return iter(())

    def message_stop(self, event: object) -> Iterator[Chunk]:
        self.finished = True
        return iter(())


_HANDLERS: dict[str, Callable[[_Turn, Any], Iterator[Chunk]]] = {
    "message_start": _Turn.message_start,
    "content_block_start": _Turn.content_block_start,
    "content_block_delta": _Turn.content_block_delta,
    "content_block_stop": _Turn.content_block_stop,
    "message_delta": _Turn.message_delta,
    "message_stop": _Turn.message_stop,
}
"""Stream event type → handler; event types added to the API later are skipped."""


# --- the provider ---------------------------------------------------------------------


class AnthropicProvider:
    """Claude models over the Anthropic Messages API, streamed.

    Args:
        model: the model entry id agents route by.
        provider_model: Anthropic's model name (``claude-...``); defaults to ``model``.
        base_url: the API endpoint, without ``/v1``; ``None`` means the SDK's default.
        api_key_env: the environment variable holding the key (``ANTHROPIC_API_KEY``).
        context_window: the window reported to the context engine, in tokens.
        max_tokens: the reply limit sent with every request.
        settings: further request fields (``models.yaml`` settings), sent unchanged.

    Raises:
        ConfigError: a setting would overwrite a field the provider builds itself.
    """

    def __init__(
        self,
        model: str,
        *,
        provider_model: str | None = None,
        base_url: str | None = None,
        api_key_env: str | None = None,
        context_window: int = 8192,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        clash = sorted(_RESERVED_SETTINGS.intersection(settings or {}))
        if clash:
            raise ConfigError(
                f"setting {clash[0]!r} cannot be set for an anthropic model",
                field=f"models[{model}].settings.{clash[0]}",
            )
        self.model = model
        self.context_window = context_window
        self.provider_model = provider_model or model
        self.base_url = base_url
        self.api_key_env = api_key_env or DEFAULT_API_KEY_ENV
        self.max_tokens = max_tokens
        self.settings: dict[str, Any] = dict(settings or {})
        self._client: anthropic.AsyncAnthropic | None = None

    def _get_client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise AuthFailed.missing_key(
                    self.api_key_env, provider=PROVIDER_NAME, model=self.model
                )
            self._client = anthropic.AsyncAnthropic(
                api_key=key, base_url=self.base_url, max_retries=0
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections, if a call opened any."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def stream(
        self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None
    ) -> AsyncIterator[Chunk]:
        """Stream one reply: maybe a :class:`Headroom`, text, tool calls, then :class:`Usage`.

        Raises:
            AuthFailed: the API key variable is unset, or the key was refused.
            RateLimited, Overloaded, ProviderUnavailable, ContextTooLong, ProviderError:
                the call failed, before or during the stream.
        """
        client = self._get_client()
        system, params = convert_messages(messages)
        turn = _Turn(names=_name_map(messages, tools))
        try:
            events = await client.messages.create(
                model=self.provider_model,
                max_tokens=self.max_tokens,
                messages=params,
                system=system if system is not None else anthropic.omit,
                tools=[_tool_param(spec) for spec in tools] if tools else anthropic.omit,
                stream=True,
                extra_body=self.settings or None,
            )
            async with events:
                headroom = read_headroom(events.response.headers, _RATE_LIMITS)
                if headroom is not None:
                    yield headroom
                async for event in events:
                    handler = _HANDLERS.get(event.type)
                    if handler is not None:
                        for chunk in handler(turn, event):
                            yield chunk
        except anthropic.APIStatusError as exc:
            raise self._status_error(exc) from None
        except anthropic.APIConnectionError as exc:
            raise self._unavailable("cannot reach the API", exc) from None
        except httpx2.TransportError as exc:
            # Raised by the body read itself, which the SDK does not wrap.
            raise self._unavailable("connection lost while streaming", exc) from None
        except (anthropic.APIError, json.JSONDecodeError) as exc:
            raise ProviderError(
                f"unexpected response: {_one_line(str(exc))}",
                provider=PROVIDER_NAME,
                model=self.model,
            ) from None
        if not turn.finished:
            raise provider_error_from_status(
                None,
                "the stream ended before message_stop",
                provider=PROVIDER_NAME,
                model=self.model,
            )
        yield Usage(tokens_in=turn.tokens_in, tokens_out=turn.tokens_out)

    def _status_error(self, exc: anthropic.APIStatusError) -> ProviderError:
        error_type = exc.type
        in_stream = exc.status_code < 400
        status = exc.status_code
        if in_stream:
            status = _ERROR_TYPE_STATUS.get(error_type or "", 500)
        text = exc.api_message if isinstance(exc.api_message, str) else None
        if in_stream:
            label = f"{error_type or 'error'} during the stream"
        else:
            label = f"HTTP {exc.status_code} {error_type}" if error_type else f"HTTP {status}"
        detail: dict[str, Any] = {"error_type": error_type, "request_id": exc.request_id}
        if in_stream:
            detail["in_stream"] = True
        return provider_error_from_status(
            status,
            f"{label}: {_one_line(text)}" if text else label,
            provider=PROVIDER_NAME,
            model=self.model,
            retry_after_s=retry_after(exc.response.headers),
            detail={k: v for k, v in detail.items() if v is not None},
        )

    def _unavailable(self, what: str, exc: Exception) -> ProviderError:
        # The SDK's own message ("Connection error.") hides the reason in the cause.
        reason = str(exc.__cause__ or exc) or type(exc).__name__
        where = self.base_url or "the default endpoint"
        return provider_error_from_status(
            None,
            f"{what} at {where}: {_one_line(reason)}",
            provider=PROVIDER_NAME,
            model=self.model,
        )


def _prompt_tokens(fresh: int, usage: Any) -> int:
    """Input tokens including the cached ones: they fill the window as much as fresh ones."""
    cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    return int(fresh + cached)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def from_entry(entry: ModelEntry) -> AnthropicProvider:
    """The provider for a ``models.yaml`` entry of provider ``anthropic``."""
    settings = entry.settings.as_kwargs()
    max_tokens = settings.pop("max_tokens", None) or DEFAULT_MAX_TOKENS
    return AnthropicProvider(
        entry.id,
        provider_model=entry.model,
        base_url=entry.base_url,
        api_key_env=entry.api_key_env,
        context_window=entry.context_window,
        max_tokens=int(max_tokens),
        settings=settings,
    )
