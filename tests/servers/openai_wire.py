"""A local HTTP server that speaks OpenAI's Chat Completions wire format, for tests.

The ``openai`` provider is tested through the real SDK against this server, and
integration tests point a separate agent process at it (``base_url``), so it is a real
socket server on the stdlib: a :class:`~http.server.ThreadingHTTPServer` in a daemon
thread, no extra dependencies.

What it answers is programmed, thread-safely, from the test:

* a FIFO of responses, one per request (:meth:`OpenAIWireServer.enqueue`, or the
  shortcuts :meth:`~OpenAIWireServer.reply_text`, :meth:`~OpenAIWireServer.reply_tool_calls`
  and :meth:`~OpenAIWireServer.reply_error`);
* a default response for when the FIFO is empty (:attr:`~OpenAIWireServer.default`,
  replaceable at any time);
* a failure mode that wins over both until it is lifted
  (:meth:`~OpenAIWireServer.fail_with` ... :meth:`~OpenAIWireServer.recover`), for
  "the provider is down, then comes back" scenarios.

Streamed replies look like OpenAI's: ``chat.completion.chunk`` events word by word, tool
calls in fragments (the first delta carries id and name, later ones pieces of the
argument JSON), a finish reason, a usage chunk when the request asked for
``stream_options.include_usage``, then ``data: [DONE]``. Non-streamed requests get a
plain ``chat.completion``. Every request is recorded (:attr:`OpenAIWireServer.requests`).

Responses are HTTP/1.0 (one connection per request, the body ends when the connection
closes), which keeps streaming simple and lets a reply be cut off mid-stream cleanly.

``POST …/embeddings`` is served too, for the knowledge base's OpenAI-compatible
embedder: one vector per input from :attr:`OpenAIWireServer.embed` (replaceable; the
default is a deterministic bag of hashed words, and :func:`by_concept` puts a few
paraphrases together as a real model would), listed in *reverse* order with their
``index`` so a client that trusts the order is caught, as floats or as base64 float32
per ``encoding_format``. An embeddings request never takes a queued chat response; the
failure mode answers it like any other request. :attr:`~OpenAIWireServer.embedding_requests`
lists them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from ._wire import RecordedRequest, WireServer

_WORDS = re.compile(r"\S+\s*|\s+")
_ARGUMENT_PIECE = 8
"""Characters of argument JSON per streamed tool-call fragment."""
EMBEDDING_DIM = 16
"""Length of the default embedding vectors."""


def bag_of_words(text: str) -> list[float]:
    """The default embedding: words hashed into :data:`EMBEDDING_DIM` slots, normalised.

    Deterministic across processes (SHA-256, not ``hash()``), so texts sharing words
    point the same way and a store built through one server is searchable through
    another. An empty text gets a fixed unit vector (a zero vector has no cosine).
    """
    vector = [0.0] * EMBEDDING_DIM
    for word in re.findall(r"\w+", text.lower()):
        vector[hashlib.sha256(word.encode()).digest()[0] % EMBEDDING_DIM] += 1.0
    norm = math.hypot(*vector)
    return [value / norm for value in vector] if norm else [1.0] + [0.0] * (EMBEDDING_DIM - 1)


_THESAURUS = (
    ("login", "logon", "signin", "sign", "authenticate", "authentication"),
    ("button", "control", "widget", "toggle"),
    ("blue", "colour", "color", "red", "green"),
    ("database", "db", "postgres", "schema"),
    ("slow", "latency", "lag", "sluggish"),
)
CONCEPTS: dict[str, int] = {word: dim for dim, words in enumerate(_THESAURUS) for word in words}
"""A tiny thesaurus: the words of each row share one dimension of :func:`by_concept`."""
CONCEPT_DIM = 32


def by_concept(text: str) -> list[float]:
    """An embedding that puts paraphrases together, as a real model does for these words.

    Each word of :data:`CONCEPTS` counts on its concept's dimension ("sign-in control" and
    "login button" meet on two); any other word is hashed, lightly, into the dimensions
    after them, so texts with no concept in common stay far apart. Assign it to
    :attr:`OpenAIWireServer.embed`.
    """
    vector = [0.0] * CONCEPT_DIM
    rest = CONCEPT_DIM - len(set(CONCEPTS.values()))
    for word in re.findall(r"\w+", text.lower()):
        if word in CONCEPTS:
            vector[CONCEPTS[word]] += 1.0
        else:
            slot = hashlib.sha256(word.encode()).digest()[0] % rest
            vector[CONCEPT_DIM - rest + slot] += 0.3
    norm = math.hypot(*vector)
    return [value / norm for value in vector] if norm else [1.0] + [0.0] * (CONCEPT_DIM - 1)


# --- what the server can answer -------------------------------------------------------


@dataclass(frozen=True)
class WireToolCall:
    """A tool call the fake model makes."""

    name: str
    """The function name as it goes on the wire (``fs__read``, not ``fs.read``)."""
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    """Serialised to JSON; a string is sent verbatim (to simulate invalid JSON)."""
    id: str | None = None
    """Defaults to a fresh ``call_...`` id."""


@dataclass(frozen=True)
class Reply:
    """A successful answer: text and/or tool calls."""

    text: str = ""
    tool_calls: tuple[WireToolCall, ...] = ()
    usage: tuple[int, int] | None = None
    """``(prompt_tokens, completion_tokens)``; estimated from the request when ``None``."""
    send_usage: bool = True
    """False simulates a server that ignores ``stream_options.include_usage``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. :func:`rate_limit_headers`."""
    chunk_delay_s: float = 0.0
    """Pause before each streamed event, to make a stream slow enough to interrupt."""
    stream_error: Mapping[str, Any] | None = None
    """Sent as an ``{"error": ...}`` event after the text, in place of the finish."""
    truncate: bool = False
    """Close the connection after the text: no finish reason, no usage, no ``[DONE]``."""


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


def rate_limit_headers(
    *,
    remaining_requests: int | None = None,
    limit_requests: int | None = None,
    remaining_tokens: int | None = None,
    limit_tokens: int | None = None,
) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers for the values given."""
    values = {
        "x-ratelimit-remaining-requests": remaining_requests,
        "x-ratelimit-limit-requests": limit_requests,
        "x-ratelimit-remaining-tokens": remaining_tokens,
        "x-ratelimit-limit-tokens": limit_tokens,
    }
    return {name: str(value) for name, value in values.items() if value is not None}


# --- the server -----------------------------------------------------------------------


class OpenAIWireServer(WireServer[Response]):
    """A programmable OpenAI-compatible endpoint on ``127.0.0.1``.

    Args:
        port: the port to listen on; 0 picks a free one at the first :meth:`start`, and
            a restart keeps it (so a client's ``base_url`` stays valid).
        prefix: the path ``base_url`` ends with; any path ending in
            ``/chat/completions`` is served, so a client with another prefix still works
            and the recorded ``path`` shows what it used.
        default: the answer when nothing is queued (``Reply(text="ok")`` if omitted).
    """

    name = "openai-wire"

    def __init__(
        self, *, port: int = 0, prefix: str = "/v1", default: Response | None = None
    ) -> None:
        super().__init__(port=port, default=default if default is not None else Reply(text="ok"))
        self.prefix = prefix.rstrip("/")
        self.embed: Callable[[str], list[float]] = bag_of_words
        """The vector ``/embeddings`` returns for one input text; assign to change it."""

    @property
    def base_url(self) -> str:
        """What a client's ``base_url`` should be, e.g. ``http://127.0.0.1:5000/v1``."""
        return f"http://{self.host}:{self._port}{self.prefix}"

    # programming the answers

    def reply_text(self, text: str, **options: Any) -> None:
        """Queue a text reply; ``options`` are the other :class:`Reply` fields."""
        self.enqueue(Reply(text=text, **options))

    def reply_tool_calls(self, *calls: WireToolCall, text: str = "", **options: Any) -> None:
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
        failure = ErrorReply(
            status=status,
            message=message or f"simulated failure: HTTP {status}",
            type=type or ("rate_limit_exceeded" if status == 429 else "server_error"),
            code=code,
            headers=all_headers,
        )
        self._fail(failure)

    # what was received

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Only the chat-completion requests."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        """Only the embeddings requests."""
        return [r for r in self.requests if r.path.endswith("/embeddings")]

    def _failure_now(self) -> Response | None:
        """The failure mode's answer, if on; unlike a chat request this takes nothing queued."""
        with self._lock:
            return self._failure

    # used by the handler


# --- the HTTP side --------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    wire: OpenAIWireServer  # set on the per-server subclass made in start()
    server_version = "openai-wire/1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean; the recorded requests are the log

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.wire._record(RecordedRequest("GET", path, self._header_dict(), {}))
        if path.endswith("/models"):
            self._send_json(200, {"object": "list", "data": [_model_object("fake-model")]})
        else:
            self._send_error_body(404, "not found", "invalid_request_error", None)

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
        if path.endswith("/embeddings"):
            self._send_embeddings(body)
            return
        if not path.endswith("/chat/completions"):
            self._send_error_body(404, f"unknown path {path}", "invalid_request_error", None)
            return
        response = self.wire._next_response()
        try:
            if isinstance(response, ErrorReply):
                self._send_error_body(
                    response.status,
                    response.message,
                    response.type,
                    response.code,
                    response.headers,
                )
            elif body.get("stream"):
                self._send_stream(response, body)
            else:
                self._send_completion(response, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away mid-answer (interrupted); nothing left to do

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
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error_body(
        self,
        status: int,
        message: str,
        kind: str,
        code: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        error = {"message": message, "type": kind, "param": None, "code": code}
        self._send_json(status, {"error": error}, headers)

    def _send_completion(self, reply: Reply, body: dict[str, Any]) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments},
                }
                for call, call_id, arguments in _resolved_calls(reply)
            ]
        prompt, completion = _usage(reply, body)
        payload = {
            "id": _completion_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model", "")),
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
            "usage": _usage_object(prompt, completion),
        }
        self._send_json(200, payload, reply.headers)

    def _send_embeddings(self, body: dict[str, Any]) -> None:
        failure = self.wire._failure_now()
        if isinstance(failure, ErrorReply):
            self._send_error_body(
                failure.status, failure.message, failure.type, failure.code, failure.headers
            )
            return
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            message = "'input' must be a string or a list of strings"
            self._send_error_body(400, message, "invalid_request_error", None)
            return
        as_base64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": _encoded(self.wire.embed(t), as_base64),
            }
            for i, t in enumerate(texts)
        ]
        tokens = sum(len(text.split()) for text in texts)
        self._send_json(
            200,
            {
                "object": "list",
                "data": data[::-1],
                "model": str(body.get("model", "")),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _send_stream(self, reply: Reply, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        for event in _stream_events(reply, body):
            if reply.chunk_delay_s:
                time.sleep(reply.chunk_delay_s)
            self.wfile.write(f"data: {event}\n\n".encode())
            self.wfile.flush()


# --- building the stream --------------------------------------------------------------


def _stream_events(reply: Reply, body: dict[str, Any]) -> Iterator[str]:
    """The ``data:`` payloads of a streamed reply, in order."""
    options = body.get("stream_options")
    with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    chunk_id, created, model = _completion_id(), int(time.time()), str(body.get("model", ""))

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        payload: dict[str, Any] = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if with_usage:  # OpenAI sends usage: null on every chunk but the last one
            payload["usage"] = None
        return json.dumps(payload)

    yield chunk({"role": "assistant", "content": ""})
    for word in _WORDS.findall(reply.text):
        yield chunk({"content": word})
    if reply.truncate:
        return
    for index, (call, call_id, arguments) in enumerate(_resolved_calls(reply)):
        first = {"index": index, "id": call_id, "type": "function"}
        yield chunk({"tool_calls": [{**first, "function": {"name": call.name, "arguments": ""}}]})
        for start in range(0, len(arguments), _ARGUMENT_PIECE):
            piece = arguments[start : start + _ARGUMENT_PIECE]
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    if reply.stream_error is not None:
        yield json.dumps({"error": dict(reply.stream_error)})
        return
    yield chunk({}, _finish(reply))
    if with_usage and reply.send_usage:
        prompt, completion = _usage(reply, body)
        yield json.dumps(
            {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": _usage_object(prompt, completion),
            }
        )
    yield "[DONE]"


def _resolved_calls(reply: Reply) -> list[tuple[WireToolCall, str, str]]:
    """Each call with its id and its argument text, fixed once per response."""
    return [
        (
            call,
            call.id or f"call_{uuid.uuid4().hex[:24]}",
            call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments),
        )
        for call in reply.tool_calls
    ]


def _encoded(vector: list[float], as_base64: bool) -> list[float] | str:
    """A vector as the API sends it: a JSON list, or little-endian float32 in base64."""
    if not as_base64:
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def _finish(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


def _usage(reply: Reply, body: dict[str, Any]) -> tuple[int, int]:
    if reply.usage is not None:
        return reply.usage
    messages = body.get("messages") or []
    prompt_chars = sum(len(json.dumps(m)) for m in messages)
    produced = reply.text + "".join(json.dumps(c.arguments) for c in reply.tool_calls)
    return max(1, prompt_chars // 4), max(1, len(produced) // 4)


def _usage_object(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def _model_object(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "openai-wire"}


OpenAIWireServer.handler = _Handler  # the wire format (defined after the server)
