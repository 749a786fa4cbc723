"""The ``openai`` provider: any endpoint that speaks OpenAI's Chat Completions (SPEC §7).

OpenAI itself, Ollama, vLLM, LM Studio, llama.cpp's server and OpenRouter all accept
the same streamed ``/chat/completions`` request, so one adapter over the official
``openai`` SDK serves them all; the model entry's ``base_url`` picks the endpoint.

Design:

* **No retries in the SDK** (``max_retries=0``). Every failure becomes one typed
  :class:`~ateam.errors.ProviderError` at once (see
  :func:`~ateam.providers.status.provider_error_from_status`): ateam's router decides whether to
  wait, retry or switch model, knowing what the SDK cannot (fallbacks, cooldowns,
  headroom). Retrying in two layers would only delay a switch.
* **Tool names are mapped.** ateam names tools with dots (``fs.read``) but OpenAI
  function names must match ``^[a-zA-Z0-9_-]{1,64}$``. Every call maps each name it
  sends, offered tools and tool calls in the history alike, to a wire name (``.``
  becomes ``__``, any other character outside the set ``_``, clashes get a suffix) and
  keeps the reverse table, so the :class:`~ateam.providers.ToolCall` values it yields
  carry the ateam name. A name the model invents is un-mapped by the ``__`` → ``.``
  rule, so the tool registry can refuse it by its ateam-style name.
* **Headroom first.** OpenAI (and proxies that mimic it) report rate limits in
  ``x-ratelimit-{remaining,limit}-{requests,tokens}`` headers. When they are present
  the stream starts with a :class:`~ateam.providers.Headroom`, so the router can switch
  models before a 429 rather than after.
* **Lazy client.** The SDK client, and with it the API key lookup, is made at the first
  :meth:`OpenAIProvider.stream` call: a missing key fails that task with
  :class:`~ateam.errors.AuthFailed`, not the agent's start-up.
* **Settings go in the request body as given** (``extra_body``), not as SDK keyword
  arguments: OpenAI-compatible servers take knobs the SDK does not name (vLLM's
  ``top_k``, Ollama's ``num_ctx``, OpenRouter's ``provider``), and an unknown keyword
  would be a ``TypeError`` in the SDK rather than a request the server can judge.
* **A cut-off stream is an error.** The SDK ends iteration quietly when the connection
  closes without ``[DONE]``; a stream that brought neither a finish reason nor usage
  was cut off, and is reported as :class:`~ateam.errors.ProviderUnavailable` instead of
  passing a truncated answer off as complete.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

from ateam.config.schema import ModelEntry
from ateam.errors import (
    AuthFailed,
    ConfigError,
    ProviderError,
)
from ateam.providers._headers import headroom as read_headroom
from ateam.providers._headers import retry_after
from ateam.providers.base import (
    Chunk,
    Message,
    TextDelta,
    ToolCall,
    Usage,
    estimate_tokens,
)
from ateam.providers.status import provider_error_from_status

__all__ = ["PROVIDER_NAME", "OpenAIProvider", "from_entry"]

PROVIDER_NAME = "openai"

_NO_KEY = "unused"
"""The key sent when the entry names no ``api_key_env`` (local servers need none, but
the SDK refuses to send a request without one)."""

_RESERVED_SETTINGS = frozenset({"model", "messages", "stream", "stream_options", "tools"})
"""Request fields the adapter sets itself; a setting must not override them."""

_WIRE_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_WIRE_NAME_MAX = 64

_RATE_LIMITS: dict[str, tuple[str, str]] = {
    name: (f"x-ratelimit-remaining-{name}", f"x-ratelimit-limit-{name}")
    for name in ("requests", "tokens")
}
"""Limit name → its (remaining, limit) response headers."""

# An error event in the middle of a stream arrives after a 200, so it has no status of
# its own; its code says what the status would have been, which picks the right error
# class (a context overflow must not look like an outage). Unknown codes count as an
# outage, like a connection that broke.
_STREAM_ERROR_STATUS: dict[str, int] = {
    "context_length_exceeded": 400,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "invalid_api_key": 401,
    "server_overloaded": 503,
    "overloaded_error": 503,
}

_DETAIL_TEXT_MAX = 300
"""Longest provider message quoted in an error (an HTML error page can be huge)."""


def api_key(env_name: str | None, *, provider: str, model: str) -> str:
    """The key in ``$env_name`` for an OpenAI-compatible endpoint (chat or embeddings).

    Raises:
        AuthFailed: the variable is named but empty or unset (read at each call, so a
            key exported later is picked up).
    """
    if env_name is None:
        return _NO_KEY
    key = os.environ.get(env_name, "").strip()
    if not key:
        raise AuthFailed.missing_key(env_name, provider=provider, model=model)
    return key


class OpenAIProvider:
    """A model behind an OpenAI-compatible Chat Completions endpoint.

    Args:
        model: the model entry id agents route by.
        provider_model: the server's own name for the model (``entry.model``); defaults
            to ``model``.
        base_url: the endpoint, e.g. ``http://localhost:11434/v1``; ``None`` means the
            SDK's default (OpenAI, or ``OPENAI_BASE_URL``).
        api_key_env: the environment variable holding the key, read at the first call;
            ``None`` for servers that need no key.
        context_window: the window reported to the context engine, in tokens.
        settings: inference settings (``temperature``, ``max_tokens``, extras) sent
            with every request.

    Raises:
        ConfigError: a setting would override a field the adapter sets itself.
    """

    def __init__(
        self,
        model: str,
        *,
        provider_model: str | None = None,
        base_url: str | None = None,
        api_key_env: str | None = None,
        context_window: int = 8192,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.provider_model = provider_model or model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.context_window = context_window
        self.settings: dict[str, Any] = dict(settings or {})
        clashes = sorted(_RESERVED_SETTINGS & self.settings.keys())
        if clashes:
            raise ConfigError(
                f"settings {', '.join(clashes)} are set by ateam and cannot be configured",
                field=f"models[{model}].settings",
            )
        self._client: openai.AsyncOpenAI | None = None

    def _get_client(self) -> openai.AsyncOpenAI:
        # A failed key lookup is not cached: the user may export the variable and retry.
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                api_key=self._api_key(), base_url=self.base_url, max_retries=0
            )
        return self._client

    def _api_key(self) -> str:
        return api_key(self.api_key_env, provider=PROVIDER_NAME, model=self.model)

    async def aclose(self) -> None:
        """Close the SDK client's connections; the next call opens new ones."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def stream(
        self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None
    ) -> AsyncIterator[Chunk]:
        """One streamed completion: headroom, text deltas, tool calls, then usage.

        Args:
            messages: the conversation, oldest first.
            tools: tool specs ``{name, description, parameters}`` the model may call.

        Raises:
            AuthFailed: the API key variable is unset, or the server refused the key.
            ProviderError: the call failed; the subclass says how (rate limit, overload,
                outage, context too long).
        """
        client = self._get_client()
        names = _ToolNames()
        wire_tools = [_wire_tool(spec, names) for spec in tools or ()]
        wire_messages = [_wire_message(message, names) for message in messages]
        try:
            response = await client.chat.completions.create(
                model=self.provider_model,
                messages=wire_messages,
                tools=wire_tools or openai.omit,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=self.settings or None,
            )
        except openai.APIError as exc:
            raise self._error(exc) from None

        async with response:
            headroom = read_headroom(response.response.headers, _RATE_LIMITS)
            if headroom is not None:
                yield headroom
            state = _StreamState()
            try:
                async for chunk in response:
                    text = state.add(chunk)
                    if text:
                        yield TextDelta(text)
            except openai.APIError as exc:
                raise self._error(exc) from None
            except json.JSONDecodeError:
                raise self._failure(None, "the server sent a malformed event stream") from None

        if not state.complete:
            raise self._failure(None, "the response stream ended before the model finished")
        calls = state.tool_calls(names)
        for call in calls:
            yield call
        yield state.usage(messages, calls)

    # errors

    def _failure(
        self,
        status: int | None,
        message: str,
        *,
        retry_after_s: float | None = None,
        detail: dict[str, Any] | None = None,
    ) -> ProviderError:
        return provider_error_from_status(
            status,
            message,
            provider=PROVIDER_NAME,
            model=self.model,
            retry_after_s=retry_after_s,
            detail=detail,
        )

    def _error(self, exc: openai.APIError) -> ProviderError:
        """The typed ateam error for an SDK exception, with a one-line message."""
        detail = {k: v for k, v in (("type", exc.type), ("code", exc.code)) if v is not None}
        text = _provider_text(exc)
        if isinstance(exc, openai.APIStatusError):
            if exc.request_id:
                detail["request_id"] = exc.request_id
            return self._failure(
                exc.status_code,
                f"HTTP {exc.status_code}: {text}",
                retry_after_s=retry_after(exc.response.headers),
                detail=detail,
            )
        if isinstance(exc, openai.APIConnectionError):
            return self._failure(None, f"cannot reach {self._endpoint()}: {text}", detail=detail)
        # An error event inside a 200 stream: classify by its code, report no status.
        implied = _STREAM_ERROR_STATUS.get(exc.code or "") or _STREAM_ERROR_STATUS.get(
            exc.type or ""
        )
        message = f"error in the response stream: {text}"
        kind = type(self._failure(implied, message))
        return kind(message, status=None, provider=PROVIDER_NAME, model=self.model, detail=detail)

    def _endpoint(self) -> str:
        return self.base_url or str(self._client.base_url if self._client else "the OpenAI API")


def from_entry(entry: ModelEntry) -> OpenAIProvider:
    """The provider for a ``models.yaml`` entry with ``provider: openai``."""
    return OpenAIProvider(
        entry.id,
        provider_model=entry.model,
        base_url=entry.base_url,
        api_key_env=entry.api_key_env,
        context_window=entry.context_window,
        settings=entry.settings.as_kwargs(),
    )


# --- tool names -----------------------------------------------------------------------


class _ToolNames:
    """The name mapping of one call: ateam name ↔ wire name, both ways."""

    def __init__(self) -> None:
        self._wire: dict[str, str] = {}
        self._ateam: dict[str, str] = {}

    def wire(self, name: str) -> str:
        known = self._wire.get(name)
        if known is not None:
            return known
        base = _WIRE_NAME_CHARS.sub("_", name.replace(".", "__"))[:_WIRE_NAME_MAX] or "tool"
        candidate, n = base, 1
        while candidate in self._ateam:  # two ateam names met on one wire name
            n += 1
            suffix = f"-{n}"
            candidate = base[: _WIRE_NAME_MAX - len(suffix)] + suffix
        self._wire[name] = candidate
        self._ateam[candidate] = name
        return candidate

    def ateam(self, wire: str) -> str:
        return self._ateam.get(wire) or wire.replace("__", ".")


def _wire_tool(spec: Mapping[str, Any], names: _ToolNames) -> ChatCompletionToolUnionParam:
    # Some compatible servers reject a function without a parameters schema.
    parameters = spec.get("parameters") or {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {
            "name": names.wire(str(spec["name"])),
            "description": str(spec.get("description") or ""),
            "parameters": dict(parameters),
        },
    }


# --- messages -------------------------------------------------------------------------


def _system(message: Message, names: _ToolNames) -> ChatCompletionMessageParam:
    return {"role": "system", "content": message.content}


def _user(message: Message, names: _ToolNames) -> ChatCompletionMessageParam:
    return {"role": "user", "content": message.content}


def _assistant(message: Message, names: _ToolNames) -> ChatCompletionMessageParam:
    if not message.tool_calls:
        return {"role": "assistant", "content": message.content}
    calls: list[ChatCompletionMessageFunctionToolCallParam] = [
        {
            "id": str(call.get("id") or ""),
            "type": "function",
            "function": {
                "name": names.wire(str(call.get("name") or "")),
                "arguments": _wire_arguments(call.get("args")),
            },
        }
        for call in message.tool_calls
    ]
    # OpenAI itself answers tool calls with content null; compatible servers accept it.
    return {"role": "assistant", "content": message.content or None, "tool_calls": calls}


def _tool(message: Message, names: _ToolNames) -> ChatCompletionMessageParam:
    return {"role": "tool", "content": message.content, "tool_call_id": message.tool_call_id or ""}


_MESSAGE_BUILDERS: dict[str, Callable[[Message, _ToolNames], ChatCompletionMessageParam]] = {
    "system": _system,
    "user": _user,
    "assistant": _assistant,
    "tool": _tool,
}


def _wire_message(message: Message, names: _ToolNames) -> ChatCompletionMessageParam:
    build = _MESSAGE_BUILDERS.get(message.role)
    if build is None:
        raise ValueError(f"cannot send a message with role {message.role!r}")
    return build(message, names)


def _wire_arguments(args: Any) -> str:
    # Arguments the model once sent as invalid JSON go back exactly as it wrote them.
    if isinstance(args, dict) and set(args) == {"_raw"} and isinstance(args["_raw"], str):
        return args["_raw"]
    if isinstance(args, str):
        return args
    return json.dumps(args if args is not None else {})


def _parse_arguments(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


# --- the stream -----------------------------------------------------------------------


@dataclass
class _PartialCall:
    """A tool call being assembled from its deltas."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _StreamState:
    """What one streamed completion has brought so far (choice 0 only)."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    reported: tuple[int, int] | None = None

    @property
    def complete(self) -> bool:
        return self.finish_reason is not None or self.reported is not None

    def add(self, chunk: ChatCompletionChunk) -> str:
        """Take in a chunk; returns its text (empty if it had none)."""
        if chunk.usage is not None:
            self.reported = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        text = ""
        for choice in chunk.choices:
            if choice.index != 0:  # ateam never asks for n > 1
                continue
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            for delta in choice.delta.tool_calls or ():
                self._add_call(delta)
            if choice.delta.content:
                text += choice.delta.content
        if text:
            self.text.append(text)
        return text

    def _add_call(self, delta: ChoiceDeltaToolCall) -> None:
        # id and name come in the first delta; some servers repeat them in later ones,
        # so they are kept, not concatenated. Arguments arrive as string fragments.
        part = self.calls.setdefault(delta.index, _PartialCall())
        if delta.id and not part.id:
            part.id = delta.id
        if delta.function is not None:
            if delta.function.name and not part.name:
                part.name = delta.function.name
            if delta.function.arguments:
                part.arguments.append(delta.function.arguments)

    def tool_calls(self, names: _ToolNames) -> list[ToolCall]:
        return [
            ToolCall(
                # Some local servers omit ids; the tool result still needs one to refer to.
                id=part.id or f"call_{uuid.uuid4().hex[:24]}",
                name=names.ateam(part.name),
                args=_parse_arguments("".join(part.arguments)),
            )
            for _, part in sorted(self.calls.items())
        ]

    def usage(self, messages: list[Message], calls: list[ToolCall]) -> Usage:
        if self.reported is not None:
            return Usage(tokens_in=self.reported[0], tokens_out=self.reported[1])
        sent = sum(
            estimate_tokens(m.content) + estimate_tokens(json.dumps(m.tool_calls))
            if m.tool_calls
            else estimate_tokens(m.content)
            for m in messages
        )
        produced = "".join(self.text) + "".join(
            json.dumps({"name": c.name, "args": c.args}) for c in calls
        )
        return Usage(tokens_in=sent, tokens_out=estimate_tokens(produced))


# --- headers --------------------------------------------------------------------------


def _provider_text(exc: openai.APIError) -> str:
    """The provider's own words for a failure, on one line and of bounded length."""
    body = exc.body
    text: str | None = None
    if isinstance(body, Mapping):
        message = body.get("message")
        text = message if isinstance(message, str) and message else None
    elif isinstance(body, str) and body.strip():
        text = body
    if text is None:
        # "Connection error." says little; the transport error it wraps says what failed.
        cause = exc.__cause__
        generic = isinstance(exc, openai.APIConnectionError) and not isinstance(
            exc, openai.APITimeoutError
        )
        text = str(cause) if generic and cause is not None and str(cause) else exc.message
    text = " ".join(text.split())
    if len(text) > _DETAIL_TEXT_MAX:
        text = text[: _DETAIL_TEXT_MAX - 1] + "…"
    # The code names what the prose may only imply (context_length_exceeded above all).
    if exc.code and exc.code not in text:
        text += f" ({exc.code})"
    return text
