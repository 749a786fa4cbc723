"""The ``anthropic`` provider, through the real SDK against a local Messages-API server."""

from __future__ import annotations

import itertools
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

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
from ateam.providers.anthropic import (
    DEFAULT_MAX_TOKENS,
    AnthropicProvider,
    from_entry,
    tool_wire_name,
)
from ateam.providers.base import Chunk, Headroom, Message, TextDelta, ToolCall, Usage
from tests.servers.anthropic_wire import (
    AnthropicWireServer,
    Reply,
    WireToolUse,
    rate_limit_headers,
)

KEY = "sk-ant-test-key"
KEY_ENV = "ATEAM_TEST_ANTHROPIC_KEY"
USER = [Message(role="user", content="list the files")]
EXEC_SCHEMA = {
    "type": "object",
    "properties": {"cmd": {"type": "string"}, "cwd": {"type": "string"}},
    "required": ["cmd"],
}
TOOLS = [
    {"name": "os.exec", "description": "Run a shell command.", "parameters": EXEC_SCHEMA},
    {"name": "fs.read", "description": "Read a file.", "parameters": {"type": "object"}},
]

MakeProvider = Callable[..., AnthropicProvider]


@pytest.fixture
def wire() -> Iterator[AnthropicWireServer]:
    # The server checks the key, so every test also proves the key reaches the wire.
    with AnthropicWireServer(api_key=KEY) as server:
        yield server


@pytest.fixture
async def make_provider(
    wire: AnthropicWireServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[MakeProvider]:
    monkeypatch.setenv(KEY_ENV, KEY)
    made: list[AnthropicProvider] = []

    def make(**options: Any) -> AnthropicProvider:
        options.setdefault("base_url", wire.base_url)
        options.setdefault("api_key_env", KEY_ENV)
        provider = AnthropicProvider("claude-entry", provider_model="claude-test-1", **options)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


async def collect(
    provider: AnthropicProvider,
    messages: list[Message] = USER,
    tools: list[dict[str, Any]] | None = None,
) -> list[Chunk]:
    return [chunk async for chunk in provider.stream(messages, tools=tools)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- replies --------------------------------------------------------------------------


async def test_text_streams_as_several_deltas(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    wire.reply_text("The build passed without warnings.")
    chunks = await collect(make_provider())

    deltas = [c for c in chunks if isinstance(c, TextDelta)]
    assert len(deltas) == 5
    assert "".join(d.text for d in deltas) == "The build passed without warnings."
    assert isinstance(chunks[-1], Usage)
    (request,) = wire.message_requests
    assert request.body["model"] == "claude-test-1"
    assert request.body["stream"] is True
    assert request.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "list the files"}]}
    ]
    assert "system" not in request.body
    assert "tools" not in request.body


async def test_tool_use_round_trips_dotted_names(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    args = {"cmd": "ls -la /tmp/project", "cwd": "/work"}
    wire.reply_tool_use(WireToolUse("os__exec", args, id="toolu_01"))
    chunks = await collect(make_provider(), tools=TOOLS)

    assert [c for c in chunks if isinstance(c, ToolCall)] == [
        ToolCall(id="toolu_01", name="os.exec", args=args)
    ]
    assert not any(isinstance(c, TextDelta) for c in chunks)
    sent = wire.message_requests[0].body["tools"]
    assert sent == [
        {"name": "os__exec", "description": "Run a shell command.", "input_schema": EXEC_SCHEMA},
        {"name": "fs__read", "description": "Read a file.", "input_schema": {"type": "object"}},
    ]


async def test_text_and_two_tool_uses_in_one_reply(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    wire.reply_tool_use(
        WireToolUse("fs__read", {"path": "README.md"}, id="toolu_a"),
        WireToolUse("os__exec", {"cmd": "make test"}, id="toolu_b"),
        text="Reading first, then testing.",
    )
    chunks = await collect(make_provider(), tools=TOOLS)

    kinds = [type(c).__name__ for c in chunks]
    assert kinds == ["TextDelta"] * 4 + ["ToolCall", "ToolCall", "Usage"]
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == (
        "Reading first, then testing."
    )
    assert chunks[4] == ToolCall(id="toolu_a", name="fs.read", args={"path": "README.md"})
    assert chunks[5] == ToolCall(id="toolu_b", name="os.exec", args={"cmd": "make test"})


async def test_invalid_tool_input_json_is_kept_raw(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    wire.reply_tool_use(WireToolUse("os__exec", '{"cmd": "ls', id="toolu_x"))
    chunks = await collect(make_provider(), tools=TOOLS)

    assert ToolCall(id="toolu_x", name="os.exec", args={"_raw": '{"cmd": "ls'}) in chunks


async def test_tool_use_without_input_has_empty_args(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    wire.reply_tool_use(WireToolUse("fs__read", "", id="toolu_e"))
    chunks = await collect(make_provider(), tools=TOOLS)

    assert ToolCall(id="toolu_e", name="fs.read", args={}) in chunks


async def test_usage_comes_from_message_start_and_message_delta(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    # message_start says 1 output token; only message_delta has the final count.
    wire.reply_text("done", usage=(1234, 56))
    chunks = await collect(make_provider())

    assert chunks[-1] == Usage(tokens_in=1234, tokens_out=56)


async def test_system_is_a_parameter_and_turns_are_merged_to_alternate(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    history = [
        Message(role="system", content="You are the builder."),
        Message(role="user", content="Build it."),
        Message(role="user", content="Then test it."),
        Message(
            role="assistant",
            content="Running both.",
            tool_calls=[
                {"id": "toolu_1", "name": "os.exec", "args": {"cmd": "make"}},
                {"id": "toolu_2", "name": "fs.read", "args": {"path": "log.txt"}},
            ],
        ),
        Message(role="tool", content="built", tool_call_id="toolu_1"),
        Message(role="tool", content="no errors", tool_call_id="toolu_2"),
        Message(role="system", content="Be brief."),
        Message(role="user", content="Summarise."),
        Message(
            role="assistant",
            content="",
            tool_calls=[{"id": "toolu_3", "name": "os.exec", "args": {"cmd": "ls"}}],
        ),
        Message(role="tool", content="a b c", tool_call_id="toolu_3"),
    ]
    wire.reply_text("All good.")
    chunks = await collect(make_provider(), history, tools=TOOLS)

    # The server refuses unanswered tool_use and misplaced tool_result, as the API does.
    assert any(isinstance(c, TextDelta) for c in chunks)
    body = wire.message_requests[0].body
    assert body["system"] == "You are the builder.\n\nBe brief."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Build it."},
                {"type": "text", "text": "Then test it."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running both."},
                {"type": "tool_use", "id": "toolu_1", "name": "os__exec", "input": {"cmd": "make"}},
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "fs__read",
                    "input": {"path": "log.txt"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "built"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no errors"},
                {"type": "text", "text": "Summarise."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_3", "name": "os__exec", "input": {"cmd": "ls"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_3", "content": "a b c"}],
        },
    ]
    roles = [m["role"] for m in body["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))


def test_awkward_tool_names_get_valid_distinct_wire_names() -> None:
    names = ["os.exec", "a__b", "a.b", "kb.search docs", "x" * 80, "x" * 81]
    wire_names = [tool_wire_name(n) for n in names]

    assert wire_names[0] == "os__exec"
    assert len(set(wire_names)) == len(names)
    for wire_name in wire_names:
        assert 1 <= len(wire_name) <= 64
        assert wire_name.replace("_", "").replace("-", "").isalnum()


async def test_awkward_tool_name_maps_back(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    tools = [{"name": "team.a__b", "description": "", "parameters": {"type": "object"}}]
    wire_name = tool_wire_name("team.a__b")
    wire.reply_tool_use(WireToolUse(wire_name, {"k": 1}, id="toolu_w"))
    chunks = await collect(make_provider(), tools=tools)

    assert wire.message_requests[0].body["tools"][0]["name"] == wire_name
    assert ToolCall(id="toolu_w", name="team.a__b", args={"k": 1}) in chunks


# --- headroom -------------------------------------------------------------------------


async def test_headroom_comes_first_from_rate_limit_headers(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    headers = rate_limit_headers(
        requests_remaining=40,
        requests_limit=50,
        tokens_remaining=30_000,
        tokens_limit=100_000,
        input_tokens_remaining=1_000,
        input_tokens_limit=80_000,
        output_tokens_remaining=19_000,
        output_tokens_limit=20_000,
    )
    wire.reply_text("hi", headers=headers)
    chunks = await collect(make_provider())

    assert isinstance(chunks[0], Headroom)
    assert sum(isinstance(c, Headroom) for c in chunks) == 1
    assert chunks[0].fraction == pytest.approx(1_000 / 80_000)
    assert chunks[0].remaining == {
        "requests": 40,
        "tokens": 30_000,
        "input_tokens": 1_000,
        "output_tokens": 19_000,
    }
    assert chunks[0].limits["input_tokens"] == 80_000


async def test_headroom_uses_only_complete_pairs(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    headers = rate_limit_headers(requests_remaining=3, requests_limit=4, tokens_remaining=1)
    wire.reply_text("hi", headers=headers)
    chunks = await collect(make_provider())

    assert chunks[0] == Headroom(fraction=0.75, remaining={"requests": 3}, limits={"requests": 4})


async def test_no_headroom_without_rate_limit_headers(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    wire.reply_text("hi")
    chunks = await collect(make_provider())

    assert not any(isinstance(c, Headroom) for c in chunks)


# --- errors ---------------------------------------------------------------------------


async def test_429_is_rate_limited_with_retry_after_and_no_sdk_retry(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    wire.reply_error(429, "Number of requests has exceeded your rate limit", retry_after=7)
    with pytest.raises(RateLimited) as caught:
        await collect(make_provider())

    error = caught.value
    assert error.status == 429
    assert error.retry_after_s == 7
    assert error.provider == "anthropic"
    assert error.model == "claude-entry"
    assert error.detail["error_type"] == "rate_limit_error"
    assert "exceeded your rate limit" in error.message
    assert "\n" not in error.message
    # The router decides about retries: the SDK must not have asked again.
    assert len(wire.message_requests) == 1


async def test_529_is_overloaded(wire: AnthropicWireServer, make_provider: MakeProvider) -> None:
    wire.reply_error(529, "Overloaded")
    with pytest.raises(Overloaded) as caught:
        await collect(make_provider())

    assert caught.value.status == 529
    assert len(wire.message_requests) == 1


async def test_500_is_unavailable(wire: AnthropicWireServer, make_provider: MakeProvider) -> None:
    wire.reply_error(500, "Internal server error")
    with pytest.raises(ProviderUnavailable) as caught:
        await collect(make_provider())

    assert caught.value.status == 500


async def test_prompt_too_long_is_context_too_long(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    wire.reply_error(400, "prompt is too long: 210000 tokens > 200000 maximum")
    with pytest.raises(ContextTooLong) as caught:
        await collect(make_provider())

    assert caught.value.status == 400
    assert "210000 tokens" in caught.value.message


async def test_other_400_is_a_plain_provider_error(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    wire.reply_error(400, "messages.0.content: Field required")
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider())

    assert type(caught.value) is ProviderError
    assert caught.value.detail["error_type"] == "invalid_request_error"


async def test_refused_key_is_auth_failed(
    wire: AnthropicWireServer, make_provider: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-ant-wrong")
    with pytest.raises(AuthFailed) as caught:
        await collect(make_provider())

    assert caught.value.status == 401
    headers = wire.message_requests[0].headers
    sent = {headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer ")}
    assert "sk-ant-wrong" in sent


async def test_error_event_mid_stream_is_overloaded(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    wire.reply_stream_error("overloaded_error", "Overloaded", text="Half of the")
    seen: list[Chunk] = []
    with pytest.raises(Overloaded) as caught:
        async for chunk in make_provider().stream(USER):
            seen.append(chunk)

    assert "".join(c.text for c in seen if isinstance(c, TextDelta)) == "Half of the"
    assert not any(isinstance(c, Usage) for c in seen)
    assert caught.value.status == 529
    assert caught.value.detail["in_stream"] is True
    assert "Overloaded" in caught.value.message


async def test_truncated_stream_is_unavailable(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    wire.reply_text("cut off here", truncate=True)
    with pytest.raises(ProviderUnavailable, match="message_stop"):
        await collect(make_provider())


async def test_connection_refused_is_unavailable(make_provider: MakeProvider) -> None:
    provider = make_provider(base_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ProviderUnavailable) as caught:
        await collect(provider)

    assert caught.value.status is None
    assert "\n" not in caught.value.message
    assert "127.0.0.1" in caught.value.message


async def test_missing_key_fails_at_first_stream_not_at_construction(
    wire: AnthropicWireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    provider = AnthropicProvider("claude-entry", base_url=wire.base_url)  # must not raise
    try:
        with pytest.raises(AuthFailed) as caught:
            await collect(provider)
    finally:
        await provider.aclose()

    assert caught.value.detail["api_key_env"] == "ANTHROPIC_API_KEY"
    assert caught.value.model == "claude-entry"
    assert wire.requests == []


async def test_empty_key_is_missing(
    wire: AnthropicWireServer, make_provider: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = make_provider()
    monkeypatch.setenv(KEY_ENV, "")
    with pytest.raises(AuthFailed) as caught:
        await collect(provider)

    assert caught.value.detail["api_key_env"] == KEY_ENV
    assert wire.requests == []


async def test_server_fails_until_recovered(
    wire: AnthropicWireServer, make_provider: MakeProvider
) -> None:
    provider = make_provider()
    wire.reply_text("queued answer")
    wire.fail_with(status=529)
    for _ in range(2):
        with pytest.raises(Overloaded):
            await collect(provider)
    assert wire.pending == 1  # queued answers wait out the failure

    wire.recover()
    chunks = await collect(provider)
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "queued answer"
    wire.default = Reply(text="fallback")
    chunks = await collect(provider)
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "fallback"


# --- configuration --------------------------------------------------------------------


async def test_entry_settings_pass_through(
    wire: AnthropicWireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    entry = ModelEntry.model_validate(
        {
            "id": "claude-fast",
            "provider": "anthropic",
            "model": "claude-haiku-test",
            "base_url": wire.base_url,
            "api_key_env": KEY_ENV,
            "context_window": 200_000,
            "settings": {"max_tokens": 256, "temperature": 0.3, "top_k": 5},
        }
    )
    provider = from_entry(entry)
    try:
        assert provider.model == "claude-fast"
        assert provider.context_window == 200_000
        await collect(provider)
    finally:
        await provider.aclose()

    body = wire.message_requests[0].body
    assert body["model"] == "claude-haiku-test"
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.3
    assert body["top_k"] == 5


async def test_max_tokens_defaults(
    wire: AnthropicWireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    entry = ModelEntry.model_validate(
        {"id": "claude-x", "provider": "anthropic", "base_url": wire.base_url}
    )
    provider = from_entry(entry)
    try:
        await collect(provider)
    finally:
        await provider.aclose()

    body = wire.message_requests[0].body
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert "temperature" not in body


def test_a_setting_cannot_replace_the_request_it_belongs_to() -> None:
    with pytest.raises(ConfigError, match="messages"):
        AnthropicProvider("claude-entry", settings={"messages": []})
