"""The ``scripted`` provider (SPEC §7) and the typed provider errors it raises."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from ateam.config import load_project
from ateam.errors import (
    AteamError,
    AuthFailed,
    Code,
    ConfigError,
    ContextTooLong,
    Overloaded,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
)
from ateam.providers import (
    Chunk,
    Message,
    ScriptedProvider,
    TextDelta,
    ToolCall,
    Usage,
    build_provider,
)
from ateam.providers.base import estimate_tokens
from ateam.providers.scripted import EXHAUSTED
from ateam.providers.status import provider_error_from_status

USER = [Message(role="user", content="please build the project")]


def script(tmp_path: Path, text: str, name: str = "script.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


async def call(provider: ScriptedProvider, messages: list[Message] = USER) -> list[Chunk]:
    return [chunk async for chunk in provider.stream(messages)]


def text_of(chunks: list[Chunk]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


async def raised(provider: ScriptedProvider) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await call(provider)
    return caught.value


async def load_error(tmp_path: Path, text: str) -> ConfigError:
    path = script(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        await call(ScriptedProvider(path))
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)
    return caught.value


# --- turns, text and tool calls -------------------------------------------------------


async def test_the_spec_example_plays_turn_by_turn(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        script(
            tmp_path,
            """
            turns:                      # consumed in order, one per model call
              - text: "Running the build."
                tool_calls:
                  - {name: os.exec, args: {cmd: "echo built"}}
              - text: "The build printed: built."
              - error: {status: 429}    # simulate a provider failure (for switching tests)
            token_delay_ms: 0           # optional pacing of streamed words
            """,
        ),
        "s",
    )

    first = await call(provider)
    assert first == [
        TextDelta("Running "),
        TextDelta("the "),
        TextDelta("build."),
        ToolCall(id="call_1", name="os.exec", args={"cmd": "echo built"}),
        first[-1],
    ]
    assert isinstance(first[-1], Usage)

    second = await call(provider)
    assert [c for c in second if isinstance(c, TextDelta)] == [
        TextDelta("The "),
        TextDelta("build "),
        TextDelta("printed: "),
        TextDelta("built."),
    ]
    assert not any(isinstance(c, ToolCall) for c in second)

    error = await raised(provider)
    assert type(error) is RateLimited
    assert provider.position == 3


async def test_text_keeps_its_whitespace_exactly(tmp_path: Path) -> None:
    provider = ScriptedProvider(script(tmp_path, 'turns: [{text: "  two  spaces\\nand a line "}]'))
    chunks = await call(provider)
    assert text_of(chunks) == "  two  spaces\nand a line "
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == [
        "  ",
        "two  ",
        "spaces\n",
        "and ",
        "a ",
        "line ",
    ]


async def test_tool_call_ids_count_across_turns_and_tools_are_not_filtered(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider(
        script(
            tmp_path,
            """
            turns:
              - tool_calls:
                  - {name: fs.read, args: {path: a.txt}}
                  - {name: plan.read}
              - tool_calls:
                  - {name: not.offered, args: {x: [1, 2]}}
            """,
        )
    )
    offered = [{"name": "fs.read"}]

    first = [c async for c in provider.stream(USER, tools=offered)]
    second = [c async for c in provider.stream(USER, tools=offered)]

    assert [c for c in first if isinstance(c, ToolCall)] == [
        ToolCall(id="call_1", name="fs.read", args={"path": "a.txt"}),
        ToolCall(id="call_2", name="plan.read", args={}),
    ]
    assert [c for c in second if isinstance(c, ToolCall)] == [
        ToolCall(id="call_3", name="not.offered", args={"x": [1, 2]}),
    ]
    assert text_of(first) == ""


async def test_usage_is_estimated_from_messages_and_output(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        script(
            tmp_path,
            """
            turns:
              - text: "Running the build."
                tool_calls: [{name: os.exec, args: {cmd: make}}]
            """,
        )
    )
    messages = [Message("system", "You are a builder."), *USER]

    chunks = await call(provider, messages)

    call_json = json.dumps({"name": "os.exec", "args": {"cmd": "make"}}, sort_keys=True)
    assert chunks[-1] == Usage(
        tokens_in=estimate_tokens("You are a builder.") + estimate_tokens(USER[0].content),
        tokens_out=estimate_tokens("Running the build.") + estimate_tokens(call_json),
    )
    assert sum(isinstance(c, Usage) for c in chunks) == 1


async def test_exhausted_script_answers_a_fixed_text_every_time(tmp_path: Path) -> None:
    provider = ScriptedProvider(script(tmp_path, "turns: [{text: only}]"))
    assert text_of(await call(provider)) == "only"

    for _ in range(2):
        chunks = await call(provider)
        assert text_of(chunks) == EXHAUSTED == "(script exhausted)"
        assert isinstance(chunks[-1], Usage)
    assert provider.position == 1


async def test_empty_script_is_exhausted_from_the_start(tmp_path: Path) -> None:
    provider = ScriptedProvider(script(tmp_path, "turns: []"))
    assert text_of(await call(provider)) == EXHAUSTED


async def test_token_delay_paces_each_word(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        script(tmp_path, "turns: [{text: one two three four}]\ntoken_delay_ms: 40")
    )
    started = time.monotonic()
    await call(provider)
    # Four words, each preceded by a 40 ms pause; sleeps never end early.
    assert time.monotonic() - started >= 4 * 0.040 * 0.95


async def test_no_delay_streams_without_pausing(tmp_path: Path) -> None:
    provider = ScriptedProvider(script(tmp_path, "turns: [{text: " + "w " * 200 + "}]"))
    started = time.monotonic()
    await call(provider)
    assert time.monotonic() - started < 0.5


async def test_an_interrupted_call_still_uses_its_turn(tmp_path: Path) -> None:
    provider = ScriptedProvider(script(tmp_path, "turns: [{text: a b c}, {text: next}]"))
    stream = provider.stream(USER)
    assert isinstance(stream, AsyncGenerator)
    assert await anext(stream) == TextDelta("a ")
    await stream.aclose()

    assert text_of(await call(provider)) == "next"


# --- simulated errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected", "code"),
    [
        ("{status: 429}", RateLimited, "provider.rate_limited"),
        ("{status: 529}", Overloaded, "provider.overloaded"),
        ("{status: 503}", Overloaded, "provider.overloaded"),
        ("{status: 500}", ProviderUnavailable, "provider.unavailable"),
        ("{status: 502}", ProviderUnavailable, "provider.unavailable"),
        ("{status: 401}", AuthFailed, "provider.auth"),
        ("{status: 403}", AuthFailed, "provider.auth"),
        (
            '{status: 400, message: "This model\'s maximum context length is 8192 tokens"}',
            ContextTooLong,
            "provider.context_too_long",
        ),
        ("{type: context_length}", ContextTooLong, "provider.context_too_long"),
        ("{status: 400, message: bad tool schema}", ProviderError, "provider.error"),
    ],
)
async def test_error_turns_raise_the_typed_error_of_their_status(
    tmp_path: Path, error: str, expected: type[ProviderError], code: str
) -> None:
    provider = ScriptedProvider(script(tmp_path, f"turns: [{{error: {error}}}]"), "s")

    caught = await raised(provider)

    assert type(caught) is expected
    assert caught.code == code
    assert caught.provider == "scripted" and caught.model == "s"
    assert caught.detail["provider"] == "scripted" and caught.detail["model"] == "s"
    assert caught.detail["status"] == caught.status


async def test_error_status_message_and_retry_after_are_carried(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        script(tmp_path, "turns: [{error: {status: 429, message: slow down, retry_after_s: 7}}]")
    )
    caught = await raised(provider)
    assert isinstance(caught, RateLimited)
    assert (caught.status, caught.message, caught.retry_after_s) == (429, "slow down", 7)
    assert caught.to_wire() == {
        "code": "provider.rate_limited",
        "message": "slow down",
        "detail": {"status": 429, "provider": "scripted", "model": "scripted", "retry_after_s": 7},
    }


async def test_a_connection_failure_has_no_status(tmp_path: Path) -> None:
    provider = ScriptedProvider(script(tmp_path, "turns: [{error: {type: connection}}]"))
    caught = await raised(provider)
    assert type(caught) is ProviderUnavailable
    assert caught.status is None
    assert "connection" in caught.message


async def test_an_error_yields_nothing_and_uses_its_turn(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        script(tmp_path, "turns: [{error: {status: 529}}, {text: recovered}]")
    )
    seen: list[Chunk] = []
    with pytest.raises(Overloaded) as caught:
        async for chunk in provider.stream(USER):
            seen.append(chunk)
    assert seen == []
    assert "529" in caught.value.message
    assert text_of(await call(provider)) == "recovered"


# --- loading and validation -----------------------------------------------------------


async def test_script_is_loaded_lazily_and_failures_are_not_cached(tmp_path: Path) -> None:
    path = tmp_path / "later.yaml"
    provider = ScriptedProvider(path)  # no file yet: constructing must not fail

    with pytest.raises(ConfigError) as caught:
        await call(provider)
    assert str(path) in str(caught.value)
    assert caught.value.file == str(path)
    assert "cannot read" in str(caught.value)

    script(tmp_path, "turns: [{text: now here}]", "later.yaml")
    assert text_of(await call(provider)) == "now here"


async def test_script_is_read_once(tmp_path: Path) -> None:
    path = script(tmp_path, "turns: [{text: one}, {text: two}]")
    provider = ScriptedProvider(path)
    assert text_of(await call(provider)) == "one"
    path.write_text("turns: [{text: changed}, {text: changed}]", encoding="utf-8")
    assert text_of(await call(provider)) == "two"


async def test_position_is_per_provider_and_restarts_at_the_first_turn(tmp_path: Path) -> None:
    path = script(tmp_path, "turns: [{text: first}, {text: second}]")
    before_restart = ScriptedProvider(path)
    assert text_of(await call(before_restart)) == "first"
    assert before_restart.position == 1

    after_restart = ScriptedProvider(path)
    assert after_restart.position == 0
    assert text_of(await call(after_restart)) == "first"
    assert text_of(await call(before_restart)) == "second"


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        (
            """
            turns:
              - text: a
              - text: b
              - tool_calls:
                  - {args: {cmd: ls}}
            """,
            "turns[2].tool_calls[0].name",
            "required field is missing",
        ),
        ("turns: [{text: a, tool_call: []}]", "turns[0].tool_call", "unknown field"),
        ("turns: [{text: a}]\nspeed: 3", "speed", "unknown field"),
        ("token_delay_ms: 1", "turns", "required field is missing"),
        ("turns: [{}]", "turns[0]", "a turn needs `text`, `chunks`, `tool_calls` or `error`"),
        ("turns: [{text: a, error: {status: 429}}]", "turns[0]", "neither `text` nor"),
        ("turns: [{error: {message: x}}]", "turns[0].error", "needs `status` or `type`"),
        ("turns: [{error: {status: 200}}]", "turns[0].error.status", "greater than or equal"),
        ("turns: [{error: {type: meteor}}]", "turns[0].error.type", "context_length"),
        ("turns: [{tool_calls: [{name: ''}]}]", "turns[0].tool_calls[0].name", "at least 1"),
        ("turns: [{text: [1]}]", "turns[0].text", "valid string"),
        ("turns: [{text: a}]\ntoken_delay_ms: -1", "token_delay_ms", "greater than"),
    ],
)
async def test_invalid_scripts_name_the_file_and_field(
    tmp_path: Path, text: str, field: str, problem: str
) -> None:
    error = await load_error(tmp_path, text)
    assert error.field == field
    assert f": {field}: " in str(error)
    assert problem in str(error)
    assert error.code == Code.CONFIG_INVALID


async def test_several_problems_are_counted(tmp_path: Path) -> None:
    error = await load_error(tmp_path, "turns: [{tool_call: 1}, {text: 2}, {text: 3}]")
    assert str(error).endswith("turns[0].tool_call: unknown field (and 2 more problems)")
    one_more = await load_error(tmp_path, "turns: [{text: 2}, {text: 3}]")
    assert str(one_more).endswith("(and 1 more problem)")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- text: a\n", "top level must be a mapping"),
        ("", "top level must be a mapping"),
        ("turns: [text: a\n", "invalid YAML at line"),
    ],
)
async def test_a_script_that_is_not_a_mapping_is_refused(
    tmp_path: Path, text: str, problem: str
) -> None:
    error = await load_error(tmp_path, text)
    assert problem in str(error)
    assert error.field is None


# --- configuration --------------------------------------------------------------------


async def test_a_scripted_model_from_models_yaml(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    config_dir = project / ".ateam"
    config_dir.mkdir(parents=True)
    (config_dir / "models.yaml").write_text(
        "models:\n  - {id: s, provider: scripted, script: script.yaml, context_window: 4096}\n",
        encoding="utf-8",
    )
    script(config_dir, "turns: [{text: from the config, tool_calls: [{name: agents.list}]}]")
    work = project / "src"
    work.mkdir()

    # Relative to the .ateam/ that defines the model, not to where discovery started.
    provider = build_provider(load_project(work).models["s"])

    assert isinstance(provider, ScriptedProvider)
    assert provider.model == "s"
    assert provider.context_window == 4096
    assert provider.script_path == config_dir / "script.yaml"
    chunks = [c async for c in provider.stream(USER)]
    assert text_of(chunks) == "from the config"
    assert ToolCall(id="call_1", name="agents.list", args={}) in chunks


async def test_a_configured_script_that_is_missing_fails_at_the_first_call(tmp_path: Path) -> None:
    config_dir = tmp_path / ".ateam"
    config_dir.mkdir()
    (config_dir / "models.yaml").write_text(
        "models: [{id: s, provider: scripted, script: nowhere.yaml}]\n", encoding="utf-8"
    )
    provider = build_provider(load_project(tmp_path).models["s"])  # start-up still works

    with pytest.raises(ConfigError) as caught:
        [c async for c in provider.stream(USER)]
    assert str(config_dir / "nowhere.yaml") in str(caught.value)


# --- the provider error tree ----------------------------------------------------------


def test_provider_errors_are_one_subtree_with_stable_codes() -> None:
    for cls in (RateLimited, Overloaded, ProviderUnavailable, ContextTooLong, AuthFailed):
        assert issubclass(cls, ProviderError)
    assert issubclass(ProviderError, AteamError)
    assert {
        Code.PROVIDER_ERROR: "provider.error",
        Code.PROVIDER_RATE_LIMITED: "provider.rate_limited",
        Code.PROVIDER_OVERLOADED: "provider.overloaded",
        Code.PROVIDER_UNAVAILABLE: "provider.unavailable",
        Code.PROVIDER_CONTEXT_TOO_LONG: "provider.context_too_long",
        Code.PROVIDER_AUTH: "provider.auth",
    } == {code: code.value for code in Code if code.value.startswith("provider.")}


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (None, "connection refused", ProviderUnavailable),
        (504, "gateway timeout", ProviderUnavailable),
        (503, "service unavailable", Overloaded),
        (400, "prompt is too long: 208310 tokens > 200000 maximum", ContextTooLong),
        (400, "the request exceeds the available context size", ContextTooLong),
        (413, "context_length_exceeded", ContextTooLong),
        (404, "context length is fine but the model is unknown", ProviderError),
        (422, "invalid request", ProviderError),
    ],
)
def test_statuses_map_to_typed_errors(
    status: int | None, message: str, expected: type[ProviderError]
) -> None:
    error = provider_error_from_status(
        status, message, provider="openai", model="gpt", detail={"type": "x"}
    )
    assert type(error) is expected
    assert error.detail == {"status": status, "provider": "openai", "model": "gpt", "type": "x"}


def test_a_missing_api_key_is_an_auth_error_naming_the_variable() -> None:
    error = AuthFailed.missing_key("OPENAI_API_KEY", provider="openai", model="gpt")
    assert error.code == "provider.auth"
    assert error.status is None
    assert error.detail["api_key_env"] == "OPENAI_API_KEY"
    assert "OPENAI_API_KEY" in error.one_line() and "api_key_env" in error.one_line()
