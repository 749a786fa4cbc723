"""A local HTTP server that speaks OpenAI's Responses wire format, for tests.

Codex (the CLI and ``codex-acp``, the ACP adapter) speaks only the Responses API
(``POST /v1/responses``), so the real runtimes are tested against this server: point a
``[model_providers.…]`` entry of ``~/.codex/config.toml`` at :attr:`ResponsesWireServer.base_url`
with ``wire_api = "responses"`` (:mod:`tests.runtimes` writes that file). Like
:mod:`tests.servers.openai_wire` it is a real socket server on the stdlib, on the shared
:class:`~tests.servers._wire.WireServer` base.

What it answers is programmed, thread-safely, from the test:

* a FIFO of responses, one per ``POST …/responses`` (:meth:`ResponsesWireServer.enqueue`,
  or the shortcuts :meth:`~ResponsesWireServer.reply_text`,
  :meth:`~ResponsesWireServer.reply_tool_calls` and :meth:`~ResponsesWireServer.reply_error`);
* a default response for when the FIFO is empty (:attr:`~ResponsesWireServer.default`,
  replaceable at any time);
* a failure mode that wins over both until it is lifted
  (:meth:`~ResponsesWireServer.fail_with` ... :meth:`~ResponsesWireServer.recover`).

A streamed reply is the server-sent events OpenAI sends, each as ``event: NAME`` and
``data: {...}`` with a ``sequence_number``: ``response.created``,
``response.in_progress``, then per output item ``response.output_item.added``, its
deltas (``response.content_part.added`` / ``response.output_text.delta`` word by word /
``response.output_text.done`` / ``response.content_part.done`` for text;
``response.function_call_arguments.delta`` / ``.done`` for a function call;
``response.custom_tool_call_input.delta`` / ``.done`` for a freeform tool such as
``apply_patch``) and ``response.output_item.done`` with the whole item, and last
``response.completed`` with ``response.id``, the output and ``usage``. Codex needs the
last two: without ``output_item.done`` it loses the text, without ``completed`` it
retries the turn. An in-stream failure is ``response.failed`` (the error object in
``response.error``) after the text. Errors before the stream are HTTP errors with
OpenAI's body ``{"error": {message, type, param, code}}`` and any headers
(``retry-after``). A non-streamed request gets the plain ``response`` object.

``GET …/models`` answers an empty list (a client that asks for a catalogue gets one);
other paths are 404. Every request is recorded (:attr:`ResponsesWireServer.requests`).
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
_ARGUMENT_PIECE = 16
"""Characters of argument (or freeform input) text per streamed delta."""


# --- what the server can answer -------------------------------------------------------


@dataclass(frozen=True)
class FunctionCall:
    """A ``function_call`` output item: Codex's ``exec_command``, ``shell`` and others."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    """Serialised to JSON; a string is sent verbatim (to simulate invalid JSON)."""
    call_id: str | None = None
    """Defaults to a fresh ``call_...`` id; the next request answers it by this id."""


@dataclass(frozen=True)
class CustomToolCall:
    """A ``custom_tool_call`` output item: a freeform tool, e.g. Codex's ``apply_patch``."""

    name: str
    input: str
    """The raw text the tool gets (for ``apply_patch``: ``*** Begin Patch`` ...)."""
    call_id: str | None = None


ToolCall = FunctionCall | CustomToolCall


def exec_command(cmd: str, **more: Any) -> FunctionCall:
    """Codex's shell tool: ``exec_command`` with ``{"cmd": cmd, ...}``."""
    return FunctionCall("exec_command", {"cmd": cmd, **more})


def apply_patch(patch: str) -> CustomToolCall:
    """Codex's freeform ``apply_patch`` tool with the patch text as its input."""
    return CustomToolCall("apply_patch", patch)


@dataclass(frozen=True)
class Reply:
    """A successful answer: text and/or tool calls, streamed when the request asks."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: tuple[int, int] | None = None
    """``(input_tokens, output_tokens)``; estimated from the request when ``None``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    chunk_delay_s: float = 0.0
    """Pause before each streamed event, to make a stream slow enough to interrupt."""
    stream_error: Mapping[str, Any] | None = None
    """``{"code", "message"}``: sent as ``response.failed`` after the text, in place of
    the rest of the stream."""
    truncate: bool = False
    """Close the connection after the text: no ``output_item.done``, no ``completed``."""


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with OpenAI's error body ``{"error": {message, type, param, code}}``."""

    status: int
    message: str = "simulated error"
    type: str = "server_error"
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. ``{"retry-after": "7"}``."""


Response = Reply | ErrorReply


# --- the server -----------------------------------------------------------------------


class ResponsesWireServer(WireServer[Response]):
    """A programmable Responses-API endpoint on ``127.0.0.1``.

    Args:
        port: the port to listen on; 0 picks a free one at the first :meth:`start`, and
            a restart keeps it (so a client's ``base_url`` stays valid).
        prefix: the path ``base_url`` ends with; any path ending in ``/responses`` is
            served, and the recorded ``path`` shows what the client used.
        default: the answer when nothing is queued (``Reply(text="ok")`` if omitted).
    """

    name = "responses-wire"

    def __init__(
        self, *, port: int = 0, prefix: str = "/v1", default: Response | None = None
    ) -> None:
        super().__init__(port=port, default=default if default is not None else Reply(text="ok"))
        self.prefix = prefix.rstrip("/")

    @property
    def base_url(self) -> str:
        """What a client's ``base_url`` should be, e.g. ``http://127.0.0.1:5000/v1``."""
        return f"http://{self.host}:{self._port}{self.prefix}"

    # programming the answers

    def reply_text(self, text: str, **options: Any) -> None:
        """Queue a text reply; ``options`` are the other :class:`Reply` fields."""
        self.enqueue(Reply(text=text, **options))

    def reply_tool_calls(self, *calls: ToolCall, text: str = "", **options: Any) -> None:
        """Queue a reply that makes these tool calls (after ``text``, if any)."""
        self.enqueue(Reply(text=text, tool_calls=calls, **options))

    def reply_error(self, status: int, message: str = "simulated error", **options: Any) -> None:
        """Queue an HTTP error; ``options`` are ``type``, ``code`` and ``headers``."""
        self.enqueue(ErrorReply(status=status, message=message, **options))

    def fail_with(
        self,
        status: int = 503,
        message: str | None = None,
        *,
        type: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Answer every request with this error, ahead of the FIFO, until :meth:`recover`."""
        all_headers = dict(headers or {})
        if retry_after is not None:
            all_headers["retry-after"] = f"{retry_after:g}"
        rate_limit = status == 429
        failure = ErrorReply(
            status=status,
            message=message or f"simulated failure: HTTP {status}",
            type=type or ("requests" if rate_limit else "server_error"),
            code=code or ("rate_limit_exceeded" if rate_limit else None),
            headers=all_headers,
        )
        self._fail(failure)

    # what was received

    @property
    def response_requests(self) -> list[RecordedRequest]:
        """Only the ``POST …/responses`` requests."""
        return [r for r in self.requests if r.method == "POST" and r.path.endswith("/responses")]


# --- the HTTP side --------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    wire: ResponsesWireServer  # set on the per-server subclass made in start()
    server_version = "responses-wire/1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean; the recorded requests are the log

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.wire._record(RecordedRequest("GET", path, self._header_dict(), {}))
        if path.endswith("/models"):
            self._send_json(200, {"object": "list", "data": [], "models": []})
        else:
            self._send_error(ErrorReply(404, f"unknown path {path}", "invalid_request_error"))

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
        self.wire._record(RecordedRequest("POST", path, self._header_dict(), body))
        if not path.endswith("/responses"):
            self._send_error(ErrorReply(404, f"unknown path {path}", "invalid_request_error"))
            return
        response = self.wire._next_response()
        try:
            if isinstance(response, ErrorReply):
                self._send_error(response)
            elif body.get("stream"):
                self._send_stream(response, body)
            else:
                resolved = _resolve(response)
                payload = _response_object(resolved, body, "completed", _items(resolved))
                self._send_json(200, payload, response.headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away mid-answer (cancelled); nothing left to do

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
        self.send_header("x-request-id", _new_id("req"))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: ErrorReply) -> None:
        body = {"message": error.message, "type": error.type, "param": None, "code": error.code}
        self._send_json(error.status, {"error": body}, error.headers)

    def _send_stream(self, reply: Reply, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("x-request-id", _new_id("req"))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        for number, (name, data) in enumerate(_stream_events(_resolve(reply), body)):
            if reply.chunk_delay_s:
                time.sleep(reply.chunk_delay_s)
            event = {"type": name, "sequence_number": number, **data}
            self.wfile.write(f"event: {name}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()


# --- building the answers -------------------------------------------------------------


@dataclass(frozen=True)
class _Resolved:
    """A reply with its ids fixed once, so the stream and the final object agree."""

    reply: Reply
    response_id: str
    message_id: str
    calls: tuple[tuple[ToolCall, str, str, str], ...]
    """``(call, item id, call id, argument or input text)`` per tool call."""


def _resolve(reply: Reply) -> _Resolved:
    calls = []
    for call in reply.tool_calls:
        if isinstance(call, FunctionCall):
            text = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            item_id = _new_id("fc")
        else:
            text, item_id = call.input, _new_id("ctc")
        calls.append((call, item_id, call.call_id or _new_id("call"), text))
    return _Resolved(reply, _new_id("resp"), _new_id("msg"), tuple(calls))


def _message_item(resolved: _Resolved, text: str, status: str) -> dict[str, Any]:
    content = (
        [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    )
    return {
        "id": resolved.message_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _call_item(
    call: ToolCall, item_id: str, call_id: str, text: str, status: str
) -> dict[str, Any]:
    done = status == "completed"
    if isinstance(call, FunctionCall):
        return {
            "id": item_id,
            "type": "function_call",
            "status": status,
            "call_id": call_id,
            "name": call.name,
            "arguments": text if done else "",
        }
    return {
        "id": item_id,
        "type": "custom_tool_call",
        "status": status,
        "call_id": call_id,
        "name": call.name,
        "input": text if done else "",
    }


def _items(resolved: _Resolved) -> list[dict[str, Any]]:
    """The finished output items, in order: the text message (if any), then the calls."""
    reply = resolved.reply
    items = [_message_item(resolved, reply.text, "completed")] if reply.text else []
    items += [_call_item(*call, "completed") for call in resolved.calls]
    return items


def _stream_events(
    resolved: _Resolved, body: dict[str, Any]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs of a streamed reply, in order."""
    reply = resolved.reply
    shell = _response_object(resolved, body, "in_progress", [])
    yield "response.created", {"response": shell}
    yield "response.in_progress", {"response": shell}
    index = 0
    cut = reply.truncate or reply.stream_error is not None  # the tool calls never come
    if reply.text or not reply.tool_calls or cut:
        yield from _text_events(resolved, index)
        if reply.truncate:
            return
        if reply.stream_error is not None:
            failed = _response_object(resolved, body, "failed", [])
            failed["error"] = dict(reply.stream_error)
            yield "response.failed", {"response": failed}
            return
        item = _message_item(resolved, reply.text, "completed")
        yield "response.output_item.done", {"output_index": index, "item": item}
        index += 1
    for call, item_id, call_id, text in resolved.calls:
        yield from _call_events(call, item_id, call_id, text, index)
        index += 1
    yield (
        "response.completed",
        {"response": _response_object(resolved, body, "completed", _items(resolved))},
    )


def _text_events(resolved: _Resolved, index: int) -> Iterator[tuple[str, dict[str, Any]]]:
    text, item_id = resolved.reply.text, resolved.message_id
    where = {"item_id": item_id, "output_index": index, "content_index": 0}
    yield (
        "response.output_item.added",
        {
            "output_index": index,
            "item": _message_item(resolved, "", "in_progress"),
        },
    )
    part = {"type": "output_text", "text": "", "annotations": []}
    yield "response.content_part.added", {**where, "part": part}
    for word in _WORDS.findall(text):
        yield "response.output_text.delta", {**where, "delta": word, "logprobs": []}
    if resolved.reply.truncate or resolved.reply.stream_error is not None:
        return
    yield "response.output_text.done", {**where, "text": text, "logprobs": []}
    yield "response.content_part.done", {**where, "part": {**part, "text": text}}


def _call_events(
    call: ToolCall, item_id: str, call_id: str, text: str, index: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    added = _call_item(call, item_id, call_id, text, "in_progress")
    yield "response.output_item.added", {"output_index": index, "item": added}
    kind = "function_call_arguments" if isinstance(call, FunctionCall) else "custom_tool_call_input"
    where = {"item_id": item_id, "output_index": index}
    for start in range(0, len(text), _ARGUMENT_PIECE):
        yield f"response.{kind}.delta", {**where, "delta": text[start : start + _ARGUMENT_PIECE]}
    final = "arguments" if isinstance(call, FunctionCall) else "input"
    yield f"response.{kind}.done", {**where, final: text}
    done = _call_item(call, item_id, call_id, text, "completed")
    yield "response.output_item.done", {"output_index": index, "item": done}


def _response_object(
    resolved: _Resolved, body: dict[str, Any], status: str, output: list[dict[str, Any]]
) -> dict[str, Any]:
    """The ``response`` object; ``usage`` only once it is complete, as OpenAI sends it."""
    tokens_in, tokens_out = _usage(resolved, body)
    usage = {
        "input_tokens": tokens_in,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": tokens_out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens_in + tokens_out,
    }
    return {
        "id": resolved.response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "model": str(body.get("model", "")),
        "output": output,
        "usage": usage if status == "completed" else None,
    }


def _usage(resolved: _Resolved, body: dict[str, Any]) -> tuple[int, int]:
    if resolved.reply.usage is not None:
        return resolved.reply.usage
    parts = [body.get("instructions") or "", body.get("input") or [], body.get("tools") or []]
    produced = resolved.reply.text + "".join(text for *_, text in resolved.calls)
    return max(1, sum(len(json.dumps(p)) for p in parts) // 4), max(1, len(produced) // 4)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


ResponsesWireServer.handler = _Handler  # the wire format (defined after the server)
