"""The Responses wire server, read by the real OpenAI SDK: what Codex gets is what OpenAI sends."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.servers.responses_wire import (
    ResponsesWireServer,
    apply_patch,
    exec_command,
)


@pytest.fixture
def wire() -> Iterator[ResponsesWireServer]:
    with ResponsesWireServer() as server:
        yield server


@pytest.fixture
def sdk(wire: ResponsesWireServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=wire.base_url, api_key="test-key", max_retries=0)


def test_a_streamed_text_reply(wire: ResponsesWireServer, sdk: openai.OpenAI) -> None:
    wire.reply_text("Hello there.", usage=(10, 3))
    with sdk.responses.stream(model="gpt-5.5", input="hi") as stream:
        events = [event.type for event in stream]
        final = stream.get_final_response()
    assert events == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert final.output_text == "Hello there."
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (10, 3)
    [request] = wire.response_requests
    assert request.path == "/v1/responses" and request.body["input"] == "hi"


def test_function_and_freeform_tool_calls(wire: ResponsesWireServer, sdk: openai.OpenAI) -> None:
    patch = "*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch\n"
    wire.reply_tool_calls(exec_command("ls -la"), apply_patch(patch))
    with sdk.responses.stream(model="gpt-5.5", input="go") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    call, custom = final.output
    assert call.type == "function_call" and custom.type == "custom_tool_call"
    assert (call.name, call.arguments) == ("exec_command", '{"cmd": "ls -la"}')
    assert (custom.name, custom.input) == ("apply_patch", patch)
    assert call.call_id.startswith("call_") and call.call_id != custom.call_id


def test_a_plain_request_gets_the_whole_response(
    wire: ResponsesWireServer, sdk: openai.OpenAI
) -> None:
    wire.reply_text("Not streamed.")
    assert sdk.responses.create(model="gpt-5.5", input="x").output_text == "Not streamed."


def test_a_rate_limit_until_recovered(wire: ResponsesWireServer, sdk: openai.OpenAI) -> None:
    wire.fail_with(429, "Rate limit reached", retry_after=3)
    with pytest.raises(openai.RateLimitError) as raised:
        sdk.responses.create(model="gpt-5.5", input="x", stream=True)
    assert raised.value.body == {
        "message": "Rate limit reached",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    assert raised.value.response.headers["retry-after"] == "3"
    wire.recover()
    assert sdk.responses.create(model="gpt-5.5", input="x").output_text == "ok"
