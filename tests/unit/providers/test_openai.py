"""The ``openai`` provider, through the real SDK against a local OpenAI wire server."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import pytest

from ateam.config.schema import ModelEntry
from ateam.errors import (
    AuthFailed,
    ConfigError,
    ContextTooLong,
    Overloaded,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
)
from ateam.providers.base import (
    Chunk,
    Headroom,
    Message,
    TextDelta,
    ToolCall,
    Usage,
    estimate_tokens,
)
from ateam.providers.openai import OpenAIProvider, from_entry
from tests.servers.openai_wire import (
    ErrorReply,
    OpenAIWireServer,
    Reply,
    WireToolCall,
    rate_limit_headers,
)

USER = [Message(role="user", content="please build the project")]

READ_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}
EXEC_SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}
TOOLS = [
    {"name": "fs.read", "description": "Read a file.", "parameters": READ_SCHEMA},
    {"name": "os.exec", "description": "Run a command.", "parameters": EXEC_SCHEMA},
]

MakeProvider = Callable[..., OpenAIProvider]
C = TypeVar("C", TextDelta, ToolCall, Usage, Headroom)


@pytest.fixture
def server() -> Iterator[OpenAIWireServer]:
    with OpenAIWireServer() as wire:
        yield wire


@pytest.fixture
async def make_provider(server: OpenAIWireServer) -> AsyncIterator[MakeProvider]:
    """Providers pointed at ``server`` (unless told otherwise), closed after the test."""
    made: list[OpenAIProvider] = []

    def make(model: str = "test-model", **options: Any) -> OpenAIProvider:
        options.setdefault("base_url", server.base_url)
        provider = OpenAIProvider(model, **options)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


async def collect(
    provider: OpenAIProvider,
    messages: list[Message] = USER,
    tools: list[dict[str, Any]] | None = None,
) -> list[Chunk]:
    return [chunk async for chunk in provider.stream(messages, tools=tools)]


def of_type(chunks: list[Chunk], kind: type[C]) -> list[C]:
    return [chunk for chunk in chunks if isinstance(chunk, kind)]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- text, tools, usage ---------------------------------------------------------------


async def test_streamed_text_arrives_as_several_deltas(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    server.reply_text("The build printed: built.")
    chunks = await collect(make_provider(provider_model="gpt-test"))

    deltas = of_type(chunks, TextDelta)
    assert len(deltas) >= 4
    assert "".join(d.text for d in deltas) == "The build printed: built."
    assert not of_type(chunks, Headroom)  # no rate-limit headers, no headroom
    assert isinstance(chunks[-1], Usage)

    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "gpt-test"
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.body["messages"] == [{"role": "user", "content": "please build the project"}]
    assert "tools" not in request.body


async def test_dotted_tool_names_round_trip(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    server.reply_tool_calls(
        WireToolCall("fs__read", {"path": "src/main file.py"}, id="call_abc"),
        text="Reading it.",
    )
    chunks = await collect(make_provider(), tools=TOOLS)

    assert "".join(d.text for d in of_type(chunks, TextDelta)) == "Reading it."
    assert of_type(chunks, ToolCall) == [
        ToolCall(id="call_abc", name="fs.read", args={"path": "src/main file.py"})
    ]
    # Tool calls come after the text, usage last.
    assert isinstance(chunks[-2], ToolCall)
    assert isinstance(chunks[-1], Usage)

    assert server.requests[0].body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "fs__read",
                "description": "Read a file.",
                "parameters": READ_SCHEMA,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "os__exec",
                "description": "Run a command.",
                "parameters": EXEC_SCHEMA,
            },
        },
    ]


async def test_two_parallel_tool_calls_are_assembled_separately(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    long_cmd = "grep -rn 'def main' src/ | sort | head -20"
    server.reply_tool_calls(
        WireToolCall("fs__read", {"path": "README.md"}, id="call_1"),
        WireToolCall("os__exec", {"cmd": long_cmd, "timeout_s": 30}, id="call_2"),
    )
    chunks = await collect(make_provider(), tools=TOOLS)

    assert of_type(chunks, ToolCall) == [
        ToolCall(id="call_1", name="fs.read", args={"path": "README.md"}),
        ToolCall(id="call_2", name="os.exec", args={"cmd": long_cmd, "timeout_s": 30}),
    ]
    assert not of_type(chunks, TextDelta)


async def test_clashing_and_unoffered_tool_names(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    tools = [
        {"name": "a.b", "description": "", "parameters": {"type": "object"}},
        {"name": "a__b", "description": "", "parameters": {"type": "object"}},
    ]
    server.reply_tool_calls(WireToolCall("a__b-2", {}, id="c1"), WireToolCall("os__kill", {}))
    chunks = await collect(make_provider(), tools=tools)

    sent = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert sent == ["a__b", "a__b-2"]  # two ateam names never share a wire name
    names = [call.name for call in of_type(chunks, ToolCall)]
    # The second offered tool comes back by its own name; an invented one by the rule.
    assert names == ["a__b", "os.kill"]


async def test_invalid_argument_json_is_kept_raw(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    server.reply_tool_calls(WireToolCall("os__exec", '{"cmd": "ls', id="call_bad"))
    chunks = await collect(make_provider(), tools=TOOLS)

    assert of_type(chunks, ToolCall) == [
        ToolCall(id="call_bad", name="os.exec", args={"_raw": '{"cmd": "ls'})
    ]


async def test_usage_comes_from_the_servers_usage_chunk(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    server.reply_text("done", usage=(1234, 56))
    chunks = await collect(make_provider())

    assert of_type(chunks, Usage) == [Usage(tokens_in=1234, tokens_out=56)]


async def test_usage_is_estimated_when_the_server_sends_none(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    reply = "a reply long enough to estimate"
    server.reply_text(reply, send_usage=False)
    chunks = await collect(make_provider())

    assert of_type(chunks, Usage) == [
        Usage(tokens_in=estimate_tokens(USER[0].content), tokens_out=estimate_tokens(reply))
    ]


async def test_history_with_tool_call_and_result_is_serialised(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    history = [
        Message(role="system", content="You are a builder."),
        Message(role="user", content="build it"),
        Message(
            role="assistant",
            content="",
            tool_calls=[
                {"id": "call_1", "name": "os.exec", "args": {"cmd": "make"}},
                {"id": "call_2", "name": "fs.read", "args": {"_raw": '{"path": '}},
            ],
        ),
        Message(role="tool", content="built\n", tool_call_id="call_1"),
        Message(role="tool", content="bad arguments", tool_call_id="call_2"),
        Message(role="assistant", content="It built."),
        Message(role="user", content="thanks"),
    ]
    server.reply_text("You're welcome.")
    await collect(make_provider(), history, tools=TOOLS)

    assert server.requests[0].body["messages"] == [
        {"role": "system", "content": "You are a builder."},
        {"role": "user", "content": "build it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "os__exec", "arguments": '{"cmd": "make"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    # Invalid arguments go back exactly as the model wrote them.
                    "function": {"name": "fs__read", "arguments": '{"path": '},
                },
            ],
        },
        {"role": "tool", "content": "built\n", "tool_call_id": "call_1"},
        {"role": "tool", "content": "bad arguments", "tool_call_id": "call_2"},
        {"role": "assistant", "content": "It built."},
        {"role": "user", "content": "thanks"},
    ]


# --- headroom -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "fraction", "remaining", "limits"),
    [
        (
            rate_limit_headers(
                remaining_requests=20, limit_requests=100, remaining_tokens=9000, limit_tokens=10000
            ),
            0.2,
            {"requests": 20, "tokens": 9000},
            {"requests": 100, "tokens": 10000},
        ),
        (
            rate_limit_headers(remaining_tokens=500, limit_tokens=10000),
            0.05,
            {"tokens": 500},
            {"tokens": 10000},
        ),
    ],
)
async def test_headroom_from_rate_limit_headers(
    server: OpenAIWireServer,
    make_provider: MakeProvider,
    headers: dict[str, str],
    fraction: float,
    remaining: dict[str, int],
    limits: dict[str, int],
) -> None:
    server.reply_text("hello there", headers=headers)
    chunks = await collect(make_provider())

    (headroom,) = of_type(chunks, Headroom)
    assert headroom.fraction == pytest.approx(fraction)
    assert headroom.remaining == remaining
    assert headroom.limits == limits
    assert chunks[0] is headroom  # first, before any text


# --- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "error_type"),
    [
        (
            ErrorReply(
                429,
                "Rate limit reached for requests",
                type="requests",
                code="rate_limit_exceeded",
                headers={"retry-after": "7"},
            ),
            RateLimited,
        ),
        (
            # The message alone does not say "context"; the code must.
            ErrorReply(
                400,
                "Request too large for this model.",
                type="invalid_request_error",
                code="context_length_exceeded",
            ),
            ContextTooLong,
        ),
        (
            ErrorReply(401, "Incorrect API key provided.", type="invalid_request_error"),
            AuthFailed,
        ),
        (ErrorReply(500, "The server had an error."), ProviderUnavailable),
        (ErrorReply(503, "The engine is currently overloaded."), Overloaded),
        (ErrorReply(529, "Overloaded.", type="overloaded_error"), Overloaded),
    ],
    ids=["429", "400-context", "401", "500", "503", "529"],
)
async def test_http_errors_map_to_typed_errors(
    server: OpenAIWireServer,
    make_provider: MakeProvider,
    reply: ErrorReply,
    error_type: type[ProviderError],
) -> None:
    server.enqueue(reply)
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider("entry-id"))

    error = caught.value
    assert type(error) is error_type
    assert error.status == reply.status
    assert error.provider == "openai"
    assert error.model == "entry-id"
    assert reply.message in error.message
    assert "\n" not in error.one_line()
    assert error.__cause__ is None and error.__suppress_context__  # no SDK chain leaks
    # The SDK must not retry: switching and retrying are the router's job.
    assert len(server.requests) == 1


async def test_rate_limit_carries_retry_after(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    server.reply_error(429, "slow down", code="rate_limit_exceeded", headers={"retry-after": "7"})
    with pytest.raises(RateLimited) as caught:
        await collect(make_provider())

    assert caught.value.retry_after_s == 7.0
    assert caught.value.detail["retry_after_s"] == 7.0
    assert caught.value.detail["code"] == "rate_limit_exceeded"


async def test_other_bad_request_is_a_plain_provider_error(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    server.reply_error(400, "Invalid value for 'temperature'.", type="invalid_request_error")
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider())

    assert type(caught.value) is ProviderError
    assert caught.value.status == 400


async def test_connection_refused_is_provider_unavailable(make_provider: MakeProvider) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(ProviderUnavailable) as caught:
        await collect(make_provider(base_url=url))

    assert caught.value.status is None
    assert url in caught.value.message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize(
    ("error", "error_type"),
    [
        ({"message": "The server had an error.", "type": "server_error"}, ProviderUnavailable),
        (
            {
                "message": "Too long.",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            },
            ContextTooLong,
        ),
    ],
    ids=["server_error", "context_length"],
)
async def test_error_event_mid_stream_maps(
    server: OpenAIWireServer,
    make_provider: MakeProvider,
    error: dict[str, Any],
    error_type: type[ProviderError],
) -> None:
    server.reply_text("partial answer", stream_error=error)
    received: list[Chunk] = []
    with pytest.raises(ProviderError) as caught:
        async for chunk in make_provider().stream(USER):
            received.append(chunk)

    assert type(caught.value) is error_type
    assert caught.value.status is None  # the HTTP status was 200; nothing to report
    assert error["message"] in caught.value.message
    assert "".join(d.text for d in of_type(received, TextDelta)) == "partial answer"


async def test_cut_off_stream_is_provider_unavailable(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    server.reply_text("half of the", truncate=True)
    with pytest.raises(ProviderUnavailable, match="ended before"):
        await collect(make_provider())


# --- keys, settings, endpoint ---------------------------------------------------------


async def test_missing_key_fails_the_first_call_not_construction(
    server: OpenAIWireServer, make_provider: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ATEAM_TEST_OPENAI_KEY", raising=False)
    provider = make_provider("keyed", api_key_env="ATEAM_TEST_OPENAI_KEY")  # no error yet

    with pytest.raises(AuthFailed) as caught:
        await collect(provider)
    assert caught.value.detail["api_key_env"] == "ATEAM_TEST_OPENAI_KEY"
    assert caught.value.model == "keyed"
    assert server.requests == []  # refused before anything was sent

    # Once the variable is set the same provider works, and sends that key.
    monkeypatch.setenv("ATEAM_TEST_OPENAI_KEY", "sk-test-123")
    server.reply_text("hi")
    await collect(provider)
    assert server.requests[0].headers["authorization"] == "Bearer sk-test-123"


async def test_no_key_variable_sends_a_placeholder(
    server: OpenAIWireServer, make_provider: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    await collect(make_provider())

    auth = server.requests[0].headers["authorization"]
    assert auth.startswith("Bearer ")
    assert "sk-must-not-leak" not in auth


async def test_entry_settings_and_names_are_passed_through(server: OpenAIWireServer) -> None:
    entry = ModelEntry.model_validate(
        {
            "id": "fast",
            "provider": "openai",
            "model": "gpt-test-mini",
            "base_url": server.base_url,
            "context_window": 32000,
            "settings": {"temperature": 0.2, "max_tokens": 256, "top_k": 5},
        }
    )
    provider = from_entry(entry)
    try:
        assert provider.model == "fast"
        assert provider.context_window == 32000
        await collect(provider)
    finally:
        await provider.aclose()

    body = server.requests[0].body
    assert body["model"] == "gpt-test-mini"
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 256
    assert body["top_k"] == 5  # a knob the SDK does not name still reaches the server


def test_settings_may_not_override_the_request() -> None:
    with pytest.raises(ConfigError, match="stream"):
        OpenAIProvider("m", settings={"stream": False})


async def test_base_url_is_honoured(server: OpenAIWireServer, make_provider: MakeProvider) -> None:
    provider = make_provider(base_url=f"http://127.0.0.1:{server.port}/custom/prefix")
    server.reply_text("routed")
    chunks = await collect(provider)

    assert "".join(d.text for d in of_type(chunks, TextDelta)) == "routed"
    assert [r.path for r in server.requests] == ["/custom/prefix/chat/completions"]


# --- the wire server's own modes (used by later integration tests) --------------------


async def test_server_fails_until_recovered(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    provider = make_provider()
    server.reply_text("queued answer")
    server.fail_with(status=429, retry_after=3)

    for _ in range(2):
        with pytest.raises(RateLimited) as caught:
            await collect(provider)
        assert caught.value.retry_after_s == 3.0

    server.recover()
    chunks = await collect(provider)
    assert "".join(d.text for d in of_type(chunks, TextDelta)) == "queued answer"
    chunks = await collect(provider)  # queue empty: the default answer
    assert "".join(d.text for d in of_type(chunks, TextDelta)) == "ok"

    server.default = Reply(text="new default")
    chunks = await collect(provider)
    assert "".join(d.text for d in of_type(chunks, TextDelta)) == "new default"
    assert len(server.requests) == 5


def test_server_answers_non_streamed_requests(server: OpenAIWireServer) -> None:
    import urllib.request

    server.reply_tool_calls(WireToolCall("fs__read", {"path": "x"}, id="c9"), usage=(3, 4))
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps({"model": "m", "messages": []}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        body = json.load(response)

    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message["tool_calls"][0]["id"] == "c9"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"path": "x"}
    assert body["usage"]["prompt_tokens"] == 3


async def test_a_stream_closed_early_leaves_the_provider_usable(
    server: OpenAIWireServer, make_provider: MakeProvider
) -> None:
    provider = make_provider()
    server.reply_text("one two three four five six seven eight", chunk_delay_s=0.05)
    server.reply_text("next answer")

    stream = provider.stream(USER)
    assert isinstance(stream, AsyncGenerator)
    first = await anext(stream)
    await stream.aclose()  # what an interrupted task does
    assert first == TextDelta("one ")

    chunks = await collect(provider)
    assert "".join(d.text for d in of_type(chunks, TextDelta)) == "next answer"
