"""A local HTTP server that speaks Anthropic's Messages wire format, for tests.

The ``anthropic`` provider is tested through the real SDK against this server, and
integration tests point a separate agent process at it (``base_url`` in
``models.yaml``), so it is a real socket server on the stdlib: a
:class:`~http.server.ThreadingHTTPServer` in a daemon thread, no extra dependencies.
The SDK appends ``/v1/messages`` to its ``base_url`` itself, so :attr:`base_url` is just
``http://127.0.0.1:PORT``.

What it answers is programmed, thread-safely, from the test:

* a FIFO of responses, one per ``POST /v1/messages`` (:meth:`AnthropicWireServer.enqueue`,
  or the shortcuts :meth:`~AnthropicWireServer.reply_text`,
  :meth:`~AnthropicWireServer.reply_tool_use`, :meth:`~AnthropicWireServer.reply_error`
  and :meth:`~AnthropicWireServer.reply_stream_error`);
* a default response for when the FIFO is empty (:attr:`~AnthropicWireServer.default`,
  replaceable at any time);
* a failure mode that wins over both until it is lifted
  (:meth:`~AnthropicWireServer.fail_with` ... :meth:`~AnthropicWireServer.recover`), for
  "the provider is down, then comes back" scenarios; queued responses wait meanwhile.

Streamed replies are the events Anthropic sends, each as ``event: NAME`` and
``data: {...}``: ``message_start`` (input tokens), per content block
``content_block_start`` / ``content_block_delta`` / ``content_block_stop`` (text word by
word as ``text_delta``; tool input as ``input_json_delta`` fragments, the first one
empty), a ``ping``, ``message_delta`` (stop reason, output tokens) and
``message_stop``. An in-stream failure is an ``event: error`` after the text. Errors
before the stream are HTTP errors with Anthropic's body
``{"type": "error", "error": {"type", "message"}}`` and any headers (``retry-after``).
A non-streamed request gets a plain ``message`` object.

Like the real API the server refuses (HTTP 400 ``invalid_request_error``) requests
with a missing ``model``/``max_tokens``/``messages``, tool names outside
``^[a-zA-Z0-9_-]{1,64}$``, a tool without an object ``input_schema``, an empty text
block, or a ``tool_result`` that does not answer a ``tool_use`` of the assistant turn
just before it; with ``api_key`` set, it refuses other keys with a 401. Every request is
recorded (:attr:`AnthropicWireServer.requests`), refused ones included.

Responses are HTTP/1.0 (one connection per request, the body ends when the connection
closes), which keeps streaming simple and lets a reply be cut off mid-stream cleanly.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from ._wire import RecordedRequest, WireServer

_WORDS = re.compile(r"\S+\s*|\s+")
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_INPUT_PIECE = 8
"""Characters of tool-input JSON per ``input_json_delta`` fragment."""

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""The error type Anthropic sends with each status."""


# --- what the server can answer -------------------------------------------------------


@dataclass(frozen=True)
class WireToolUse:
    """A tool call the fake model makes."""

    name: str
    """The tool name as it goes on the wire (``os__exec``, not ``os.exec``)."""
    input: Mapping[str, Any] | str = field(default_factory=dict)
    """Serialised to JSON; a string is sent verbatim (to simulate invalid JSON)."""
    id: str | None = None
    """Defaults to a fresh ``toolu_...`` id."""


@dataclass(frozen=True)
class StreamError:
    """An ``event: error`` sent mid-stream, after the reply's text."""

    type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass(frozen=True)
class Reply:
    """A successful answer: text and/or tool uses, streamed when the request asks."""

    text: str = ""
    tool_uses: tuple[WireToolUse, ...] = ()
    usage: tuple[int, int] | None = None
    """``(input_tokens, output_tokens)``; estimated from the request when ``None``.
    Input goes in ``message_start``, output in ``message_delta`` (``message_start``
    carries 1 output token, as the real API's does)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. :func:`rate_limit_headers`."""
    chunk_delay_s: float = 0.0
    """Pause before each streamed event, to make a stream slow enough to interrupt."""
    stream_error: StreamError | None = None
    """Sent after the text in place of the rest of the stream."""
    truncate: bool = False
    """Close the connection after the text: no block stop, no usage, no ``message_stop``."""
    stop_reason: str | None = None
    """Defaults to ``tool_use`` when there are tool uses, else ``end_turn``."""


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with Anthropic's body ``{"type": "error", "error": {type, message}}``."""

    status: int
    message: str = "simulated error"
    type: str | None = None
    """Defaults to the type Anthropic uses for ``status`` (:data:`ERROR_TYPES`)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. ``{"retry-after": "7"}``."""


Response = Reply | ErrorReply


def rate_limit_headers(**values: int) -> dict[str, str]:
    """Anthropic's rate-limit headers, e.g. ``requests_remaining=5, requests_limit=50``.

    Keys are ``{requests,tokens,input_tokens,output_tokens}_{remaining,limit}``; they
    become ``anthropic-ratelimit-input-tokens-remaining`` and so on.
    """
    headers: dict[str, str] = {}
    for key, value in values.items():
        limit, _, which = key.rpartition("_")
        if which not in ("remaining", "limit") or not limit:
            raise ValueError(f"unknown rate-limit key {key!r}")
        headers[f"anthropic-ratelimit-{limit.replace('_', '-')}-{which}"] = str(value)
    return headers


# --- the server -----------------------------------------------------------------------


class AnthropicWireServer(WireServer[Response]):
    """A programmable Anthropic Messages endpoint on ``127.0.0.1``.

    Args:
        port: the port to listen on; 0 picks a free one at the first :meth:`start`, and
            a restart keeps it (so a client's ``base_url`` stays valid).
        default: the answer when nothing is queued (``Reply(text="ok")`` if omitted).
        api_key: when set, requests must carry it (``x-api-key`` or a bearer token).
        validate: refuse malformed requests as the real API would (see the module docs).
    """

    name = "anthropic-wire"

    def __init__(
        self,
        *,
        port: int = 0,
        default: Response | None = None,
        api_key: str | None = None,
        validate: bool = True,
    ) -> None:
        super().__init__(port=port, default=default if default is not None else Reply(text="ok"))
        self.api_key = api_key
        self.validate = validate

    @property
    def base_url(self) -> str:
        """What a client's ``base_url`` should be: ``http://127.0.0.1:PORT`` (no ``/v1``)."""
        return f"http://{self.host}:{self._port}"

    # programming the answers

    def reply_text(self, text: str, **options: Any) -> None:
        """Queue a text reply; ``options`` are the other :class:`Reply` fields."""
        self.enqueue(Reply(text=text, **options))

    def reply_tool_use(self, *uses: WireToolUse, text: str = "", **options: Any) -> None:
        """Queue a reply that calls these tools (after ``text``, if any)."""
        self.enqueue(Reply(text=text, tool_uses=uses, **options))

    def reply_error(
        self,
        status: int,
        message: str = "simulated error",
        *,
        type: str | None = None,
        headers: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Queue an HTTP error (``type`` defaults to the one Anthropic uses for ``status``)."""
        self.enqueue(_error_reply(status, message, type, headers, retry_after))

    def reply_stream_error(
        self,
        type: str = "overloaded_error",
        message: str = "Overloaded",
        *,
        text: str = "",
        **options: Any,
    ) -> None:
        """Queue a stream that sends ``text`` and then an ``event: error``."""
        self.enqueue(Reply(text=text, stream_error=StreamError(type, message), **options))

    def fail_with(
        self,
        status: int = 529,
        message: str | None = None,
        *,
        type: str | None = None,
        headers: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Answer every request with this error, ahead of the FIFO, until :meth:`recover`."""
        failure = _error_reply(
            status, message or f"simulated failure: HTTP {status}", type, headers, retry_after
        )
        self._fail(failure)

    # what was received

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """Only the ``POST /v1/messages`` requests."""
        return [r for r in self.requests if r.path == "/v1/messages"]

    # used by the handler


def _error_reply(
    status: int,
    message: str,
    type: str | None,
    headers: Mapping[str, str] | None,
    retry_after: float | None,
) -> ErrorReply:
    all_headers = dict(headers or {})
    if retry_after is not None:
        all_headers["retry-after"] = f"{retry_after:g}"
    return ErrorReply(status=status, message=message, type=type, headers=all_headers)


# --- request checks -------------------------------------------------------------------


def _refusal(body: dict[str, Any]) -> str | None:
    """Why the real API would refuse this ``/v1/messages`` body, or ``None``."""
    for required, kind in (("model", str), ("max_tokens", int), ("messages", list)):
        if not isinstance(body.get(required), kind) or not body[required]:
            return f"{required}: Field required"
    for i, tool in enumerate(body.get("tools") or []):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            return f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{i}.custom.input_schema: Input should be an object schema"
    return _message_refusal(body["messages"])


def _message_refusal(messages: list[Any]) -> str | None:
    asked: set[str] = set()  # tool_use ids of the assistant turn just before
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{i}: all messages must have non-empty content"
        for j, block in enumerate(blocks):
            if block.get("type") == "text" and not block.get("text"):
                return f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in asked:
                return (
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                    "`tool_result` blocks; each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message"
                )
        if message["role"] == "assistant":
            asked = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
        else:
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            if asked - answered:
                return (
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(sorted(asked - answered))}"
                )
            asked = set()
    return None


def _key_accepted(headers: Mapping[str, str], key: str) -> bool:
    return headers.get("x-api-key") == key or headers.get("authorization") == f"Bearer {key}"


# --- the HTTP side --------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    wire: AnthropicWireServer  # set on the per-server subclass made in start()
    server_version = "anthropic-wire/1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean; the recorded requests are the log

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.wire._record(RecordedRequest("GET", path, self._header_dict(), {}))
        self._send_error(ErrorReply(404, f"unknown path {path}"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        if not isinstance(body, dict):
            body = {"_unparsed": body}
        headers = self._header_dict()
        self.wire._record(RecordedRequest("POST", path, headers, body))
        try:
            self._answer(path, headers, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away mid-answer (interrupted); nothing left to do

    def _answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        wire = self.wire
        if wire.api_key is not None and not _key_accepted(headers, wire.api_key):
            self._send_error(ErrorReply(401, "invalid x-api-key"))
            return
        if path == "/v1/messages/count_tokens":
            self._send_json(200, {"input_tokens": _estimate_input(body)})
            return
        if path != "/v1/messages":
            self._send_error(ErrorReply(404, f"unknown path {path}"))
            return
        refusal = _refusal(body) if wire.validate else None
        if refusal is not None:
            self._send_error(ErrorReply(400, refusal))
            return
        response = wire._next_response()
        if isinstance(response, ErrorReply):
            self._send_error(response)
        elif body.get("stream"):
            self._send_stream(response, body)
        else:
            self._send_json(200, _message_object(response, body), response.headers)

    # responses

    def _header_dict(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", _new_id("req"))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: ErrorReply) -> None:
        kind = error.type or ERROR_TYPES.get(error.status, "api_error")
        payload = {"type": "error", "error": {"type": kind, "message": error.message}}
        self._send_json(error.status, payload, error.headers)

    def _send_stream(self, reply: Reply, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", _new_id("req"))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        for name, data in _stream_events(reply, body):
            if reply.chunk_delay_s:
                time.sleep(reply.chunk_delay_s)
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()


# --- building the answers -------------------------------------------------------------


def _stream_events(reply: Reply, body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs of a streamed reply, in order."""
    tokens_in, tokens_out = _usage(reply, body)
    start = _message_object(Reply(), body)
    start["usage"] = {"input_tokens": tokens_in, "output_tokens": 1}
    start["stop_reason"] = None
    yield "message_start", {"type": "message_start", "message": start}
    index = 0
    if reply.text or not reply.tool_uses:
        yield "content_block_start", _block_start(index, {"type": "text", "text": ""})
        yield "ping", {"type": "ping"}
        for word in _WORDS.findall(reply.text):
            yield "content_block_delta", _block_delta(index, {"type": "text_delta", "text": word})
        if reply.truncate:
            return
        if reply.stream_error is not None:
            error = {"type": reply.stream_error.type, "message": reply.stream_error.message}
            yield "error", {"type": "error", "error": error}
            return
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    for use, use_id, text in _resolved_uses(reply):
        block = {"type": "tool_use", "id": use_id, "name": use.name, "input": {}}
        yield "content_block_start", _block_start(index, block)
        # The real API opens every tool input with an empty fragment.
        pieces = ["", *(text[i : i + _INPUT_PIECE] for i in range(0, len(text), _INPUT_PIECE))]
        for piece in pieces:
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield "content_block_delta", _block_delta(index, delta)
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    stop = {"stop_reason": _stop_reason(reply), "stop_sequence": None}
    usage = {"output_tokens": tokens_out}
    yield "message_delta", {"type": "message_delta", "delta": stop, "usage": usage}
    yield "message_stop", {"type": "message_stop"}


def _block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _block_delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _message_object(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    """A whole ``message`` (the non-streamed answer, and the shell of ``message_start``)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    for use, use_id, text in _resolved_uses(reply):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = {}
        content.append({"type": "tool_use", "id": use_id, "name": use.name, "input": parsed})
    tokens_in, tokens_out = _usage(reply, body)
    return {
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": str(body.get("model", "")),
        "content": content,
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
    }


def _resolved_uses(reply: Reply) -> list[tuple[WireToolUse, str, str]]:
    """Each tool use with its id and its input text."""
    return [
        (
            use,
            use.id or _new_id("toolu"),
            use.input if isinstance(use.input, str) else json.dumps(use.input),
        )
        for use in reply.tool_uses
    ]


def _stop_reason(reply: Reply) -> str:
    return reply.stop_reason or ("tool_use" if reply.tool_uses else "end_turn")


def _estimate_input(body: dict[str, Any]) -> int:
    parts = [body.get("system") or "", body.get("messages") or [], body.get("tools") or []]
    return max(1, sum(len(json.dumps(p)) for p in parts) // 4)


def _usage(reply: Reply, body: dict[str, Any]) -> tuple[int, int]:
    if reply.usage is not None:
        return reply.usage
    produced = reply.text + "".join(text for _, _, text in _resolved_uses(reply))
    return _estimate_input(body), max(1, len(produced) // 4)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


AnthropicWireServer.handler = _Handler  # the wire format (defined after the server)
