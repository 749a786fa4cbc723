"""The real coding-agent runtimes, driven over ACP by the bare SDK client, fully offline.

Claude Code (``@zed-industries/claude-code-acp`` on the pinned ``claude``) answers from
:mod:`tests.servers.anthropic_wire`, Codex (``@zed-industries/codex-acp``'s native
binary) from :mod:`tests.servers.responses_wire`; :mod:`tests.runtimes` configures both
(``.ci/run`` installs them, and a missing install fails, never skips) and
:mod:`tests.acp_client` starts them under a recording client, then checks that nothing
they started outlives them. Each test pins what ateam's ACP client relies on: the
shapes of ``initialize``, ``session/new``, the permission request, ``terminal/create``
and ``fs/*``, tool-call updates, and how a cancel, a restart (``session/load``) and a
rate limit come out, as the runtime sent them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import acp
import pytest

from ateam.config.schema import ModelEntry
from tests._wait import async_wait_for
from tests.acp_client import Recorder, capabilities, prompt, running, start_session
from tests.runtimes import (
    PACKAGES,
    RuntimeNotInstalled,
    claude_code_runtime,
    codex_runtime,
    missing_packages,
    npm_prefix,
)
from tests.servers.anthropic_wire import AnthropicWireServer, WireToolUse
from tests.servers.anthropic_wire import Reply as AnthropicReply
from tests.servers.responses_wire import Reply as ResponsesReply
from tests.servers.responses_wire import ResponsesWireServer, apply_patch, exec_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(40)]

CODEX_SETTLE_S = 0.5
"""The pause after a failed Codex prompt before the next one. codex-acp 0.16.0 drops a
prompt sent right after a prompt that failed (-32603): about 1 in 100 under load, it is
never answered, no request reaches the model, ``session/cancel`` does not end it, and
the prompt after it works. Nothing marks the end of the failed turn, so this waits
(0 in 300 with 0.3 s)."""


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The session's working directory."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def anthropic() -> Iterator[AnthropicWireServer]:
    with AnthropicWireServer() as server:
        yield server


@pytest.fixture
def responses() -> Iterator[ResponsesWireServer]:
    with ResponsesWireServer() as server:
        yield server


# --- set-up -------------------------------------------------------------------------------


def test_the_runtimes_are_installed_at_their_pins() -> None:
    """CI installs them (``.ci/run``); a missing one fails here first, never skips."""
    assert missing_packages() == []


def test_a_missing_install_is_named_with_its_install_command(tmp_path: Path) -> None:
    assert missing_packages(tmp_path) == [f"{n}@{v}" for n, v in PACKAGES.items()]
    with pytest.raises(RuntimeNotInstalled) as missing:
        npm_prefix("@openai/codex", prefix=tmp_path)
    assert str(missing.value) == (
        f"@openai/codex@0.169.0 not installed under {tmp_path} (.ci/run installs them); "
        f"run: npm install --prefix {tmp_path} --save-exact --no-audit --no-fund "
        "@openai/codex@0.169.0"
    )


def test_the_setups_are_valid_models_yaml_entries(tmp_path: Path) -> None:
    claude = claude_code_runtime(tmp_path, "http://127.0.0.1:9")
    codex = codex_runtime(tmp_path, "http://127.0.0.1:9/v1", mode="full-access")
    for setup, name in ((claude, "claude-code"), (codex, "codex")):
        entry = ModelEntry.model_validate(setup.models_yaml_entry(name))
        assert entry.command is not None and Path(entry.command[-1]).is_absolute()
        assert entry.env["HOME"] == str(setup.home)
    assert codex.command[0].endswith("/codex-acp-linux-x64/bin/codex-acp")  # never the wrapper
    assert ModelEntry.model_validate(codex.models_yaml_entry("codex")).mode == "full-access"


# --- Claude Code --------------------------------------------------------------------------


async def test_claude_code_answers_a_prompt(
    tmp_path: Path, work: Path, anthropic: AnthropicWireServer
) -> None:
    setup = claude_code_runtime(tmp_path, anthropic.base_url)
    client = Recorder(work)
    async with running(setup, client, work) as runtime:
        session_id = await start_session(runtime, work)
        anthropic.reply_text("Hello from the wire.")
        assert await prompt(runtime, session_id, "hi") == "end_turn"

    init = runtime.result(0)
    assert init["agentInfo"] == {
        "name": "@zed-industries/claude-code-acp",
        "title": "Claude Code",
        "version": "0.16.2",
    }
    assert init["agentCapabilities"] == {
        "promptCapabilities": {"image": True, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": True},
        "loadSession": True,
        "sessionCapabilities": {"fork": {}, "list": {}, "resume": {}},
    }
    assert init["authMethods"] == [
        {
            "description": "Run `claude /login` in the terminal",
            "name": "Log in with Claude Code",
            "id": "claude-login",
        }
    ]
    new = runtime.result(1)
    assert set(new) == {"sessionId", "models", "modes"}  # no configOptions
    assert new["modes"]["currentModeId"] == "default"
    # bypassPermissions is offered as root only with IS_SANDBOX=1 (tests.runtimes sets it)
    assert [m["id"] for m in new["modes"]["availableModes"]] == [
        "default",
        "acceptEdits",
        "plan",
        "dontAsk",
        "bypassPermissions",
    ]
    assert new["models"]["currentModelId"] == "default"
    assert client.text() == "Hello from the wire."
    assert runtime.updates("usage_update") == []  # this adapter sends no usage
    # 2.1.328 first sends a mid-conversation "system" message; refused (400, the wire
    # server validates), it drops those betas and asks again, once per process.
    asked = anthropic.message_requests
    assert [[m["role"] for m in r.body["messages"]] for r in asked] == [
        ["user", "system"],
        ["user"],
    ]
    assert {r.path for r in anthropic.requests} == {"/v1/messages"}  # nothing else is called


async def test_claude_code_bash_asks_permission_then_creates_a_terminal(
    tmp_path: Path, work: Path, anthropic: AnthropicWireServer
) -> None:
    setup = claude_code_runtime(tmp_path, anthropic.base_url)
    client = Recorder(work)
    command = "echo hi > out.txt && echo done"
    anthropic.reply_tool_use(
        WireToolUse("mcp__acp__Bash", {"command": command, "timeout": 10000}, id="toolu_bash")
    )
    anthropic.reply_text("Ran it.")
    async with running(setup, client, work) as runtime:
        session_id = await start_session(runtime, work)
        assert await prompt(runtime, session_id, "run it") == "end_turn"

    assert (work / "out.txt").read_text() == "hi\n"  # run through a shell in the session cwd
    [permission] = runtime.requests("session/request_permission")
    assert permission == {
        "options": [
            {"kind": "allow_always", "name": "Always Allow", "optionId": "allow_always"},
            {"kind": "allow_once", "name": "Allow", "optionId": "allow"},
            {"kind": "reject_once", "name": "Reject", "optionId": "reject"},
        ],
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": "toolu_bash",
            "rawInput": {"command": command, "timeout": 10000},
            "title": f"`{command}`",
        },
    }
    [terminal] = runtime.requests("terminal/create")
    assert terminal == {  # the whole shell line, no args, no cwd
        "command": command,
        "env": [{"name": "CLAUDECODE", "value": "1"}],
        "sessionId": session_id,
        "outputByteLimit": 32000,
    }
    assert client.methods() == [
        "session/request_permission",
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
    ]
    done = runtime.updates("tool_call_update")[-1]
    assert done["status"] == "completed"
    assert done["rawOutput"] == [
        {"type": "text", "text": "Exited with code 0.Final output:\n\ndone\n"}
    ]
    assert done["_meta"] == {"claudeCode": {"toolName": "mcp__acp__Bash"}}
    result = anthropic.message_requests[-1].body["messages"][-1]["content"][0]
    assert result["tool_use_id"] == "toolu_bash" and result["type"] == "tool_result"


async def test_claude_code_bypass_mode_runs_without_asking(
    tmp_path: Path, work: Path, anthropic: AnthropicWireServer
) -> None:
    setup = claude_code_runtime(tmp_path, anthropic.base_url)
    client = Recorder(work)
    anthropic.reply_tool_use(
        WireToolUse("mcp__acp__Bash", {"command": "echo bypassed > out.txt", "timeout": 5000})
    )
    anthropic.reply_text("Done.")
    async with running(setup, client, work) as runtime:
        session_id = await start_session(runtime, work)
        await runtime.conn.set_session_mode(session_id=session_id, mode_id="bypassPermissions")
        assert await prompt(runtime, session_id, "run it") == "end_turn"
    assert (work / "out.txt").read_text() == "bypassed\n"
    assert "session/request_permission" not in client.methods()
    assert "terminal/create" in client.methods()  # still the client's terminal


async def test_claude_code_write_and_edit_go_through_the_client(
    tmp_path: Path, work: Path, anthropic: AnthropicWireServer
) -> None:
    setup = claude_code_runtime(tmp_path, anthropic.base_url)
    client = Recorder(work)
    new_file, old_file = work / "new.txt", work / "existing.txt"
    old_file.write_text("old line\n")
    anthropic.reply_tool_use(
        WireToolUse("mcp__acp__Write", {"file_path": str(new_file), "content": "hello\n"})
    )
    edit = {"file_path": str(old_file), "old_string": "old line", "new_string": "new line"}
    anthropic.reply_tool_use(WireToolUse("mcp__acp__Edit", edit))
    anthropic.reply_text("Edited.")
    async with running(setup, client, work) as runtime:
        session_id = await start_session(runtime, work)
        assert await prompt(runtime, session_id, "edit") == "end_turn"

    assert new_file.read_text() == "hello\n" and old_file.read_text() == "new line\n"
    assert client.methods() == [
        "session/request_permission",
        "fs/write_text_file",
        "session/request_permission",
        "fs/read_text_file",  # Edit reads through the client too
        "fs/write_text_file",
    ]
    writes = runtime.requests("fs/write_text_file")
    assert writes == [
        {"sessionId": session_id, "path": str(new_file), "content": "hello\n"},
        {"sessionId": session_id, "path": str(old_file), "content": "new line\n"},
    ]
    assert runtime.requests("fs/read_text_file") == [
        {"sessionId": session_id, "path": str(old_file)}
    ]
    titles = [p["toolCall"]["title"] for p in runtime.requests("session/request_permission")]
    assert titles == [f"Write {new_file}", f"Edit `{old_file}`"]
    diffs = [
        c
        for u in runtime.updates("tool_call")
        for c in u.get("content") or []
        if c["type"] == "diff"
    ]
    assert diffs == [
        {"type": "diff", "path": str(new_file), "oldText": None, "newText": "hello\n"},
        {"type": "diff", "path": str(old_file), "oldText": "old line", "newText": "new line"},
    ]


async def test_claude_code_cancel_and_rate_limit(
    tmp_path: Path, work: Path, anthropic: AnthropicWireServer
) -> None:
    setup = claude_code_runtime(tmp_path, anthropic.base_url)
    client = Recorder(work)
    async with running(setup, client, work) as runtime:
        session_id = await start_session(runtime, work)
        anthropic.enqueue(AnthropicReply(text="word " * 200, chunk_delay_s=0.05))
        turn = asyncio.create_task(prompt(runtime, session_id, "talk"))
        await client.wait_until(lambda: "word" in client.text())
        await runtime.conn.cancel(session_id=session_id)
        assert await turn == "cancelled"

        anthropic.fail_with(429, "Number of request tokens has exceeded your per-minute rate limit")
        before = len(anthropic.message_requests)
        with pytest.raises(acp.RequestError) as raised:
            await prompt(runtime, session_id, "again")
        # CLAUDE_CODE_MAX_RETRIES=0 (tests.runtimes); by default it retries silently
        # with backoff for minutes, no update over ACP meanwhile.
        assert len(anthropic.message_requests) == before + 1
        assert raised.value.code == -32603
        assert str(raised.value) == (
            "Internal error: API Error: Request rejected (429) · "
            "Number of request tokens has exceeded your per-minute rate limit"
        )
        assert raised.value.data is None
        anthropic.recover()
        anthropic.reply_text("Back.")
        assert await prompt(runtime, session_id, "and now") == "end_turn"
    [error] = [m["error"] for m in runtime.received if "error" in m]
    assert error == {
        "code": -32603,
        "message": "Internal error: API Error: Request rejected (429) · "
        "Number of request tokens has exceeded your per-minute rate limit",
    }


async def test_claude_code_load_session_after_a_restart(
    tmp_path: Path, work: Path, anthropic: AnthropicWireServer
) -> None:
    setup = claude_code_runtime(tmp_path, anthropic.base_url)
    async with running(setup, Recorder(work), work) as runtime:
        session_id = await start_session(runtime, work)
        anthropic.reply_text("first answer")
        assert await prompt(runtime, session_id, "first question") == "end_turn"

    client = Recorder(work)
    async with running(setup, client, work) as runtime:
        await runtime.conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities()
        )
        await runtime.conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
        replayed = [
            (u["sessionUpdate"], u["content"]["text"])
            for u in runtime.updates("user_message_chunk") + runtime.updates("agent_message_chunk")
        ]
        assert sorted(replayed) == [
            ("agent_message_chunk", "first answer"),
            ("user_message_chunk", "first question"),
        ]
        assert set(runtime.result(1)) == {"modes", "models"}
        anthropic.reply_text("second answer")
        assert await prompt(runtime, session_id, "second question") == "end_turn"
    history = anthropic.message_requests[-1].body["messages"]
    assert history[-2] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "first answer"}],
    }


async def test_claude_code_without_client_tools_runs_its_own_bash_and_leaves_nothing(
    tmp_path: Path, work: Path, anthropic: AnthropicWireServer
) -> None:
    setup = claude_code_runtime(tmp_path, anthropic.base_url)
    client = Recorder(work)
    command = f"{sys.executable} -c 'import time; time.sleep(60)'"
    anthropic.reply_tool_use(WireToolUse("Bash", {"command": command, "timeout": 90000}))
    async with running(setup, client, work) as runtime:
        session_id = await start_session(runtime, work, capabilities(fs=False, terminal=False))
        turn = asyncio.create_task(prompt(runtime, session_id, "wait"))
        await async_wait_for(lambda: any("time.sleep(60)" in p for p in runtime.processes()))
        assert client.methods() == ["session/request_permission"]  # its own Bash still asks
        [asked] = runtime.requests("session/request_permission")
        assert asked["toolCall"]["rawInput"] == {"command": command, "timeout": 90000}
        [started, described] = runtime.updates("tool_call")
        assert started["_meta"] == {"claudeCode": {"toolName": "Bash"}}
        assert described["title"] == f"`{command}`"
    # running() saw the sleeper (in a session of Claude's own) gone with the runtime
    turn.cancel()
    with contextlib.suppress(asyncio.CancelledError, ConnectionError):
        await turn


# --- Codex --------------------------------------------------------------------------------


async def test_codex_answers_a_prompt(
    tmp_path: Path, work: Path, responses: ResponsesWireServer
) -> None:
    setup = codex_runtime(tmp_path, responses.base_url, approval="untrusted")
    client = Recorder(work)
    async with running(setup, client, work) as runtime:
        session_id = await start_session(runtime, work)
        responses.reply_text("Hello from the wire.", usage=(1200, 34))
        assert await prompt(runtime, session_id, "hi") == "end_turn"

    init = runtime.result(0)
    assert init["agentInfo"] == {"name": "codex-acp", "title": "Codex", "version": "0.16.0"}
    assert init["agentCapabilities"] == {
        "loadSession": True,
        "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": False, "acp": False},
        "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
        "auth": {"logout": {}},
    }
    assert [m["id"] for m in init["authMethods"]] == ["chatgpt", "codex-api-key", "openai-api-key"]
    new = runtime.result(1)
    # untrusted + danger-full-access is none of the presets: no `modes`, no `mode` option
    assert set(new) == {"sessionId", "configOptions"}
    assert [(o["id"], o["category"], o["currentValue"]) for o in new["configOptions"]] == [
        ("model", "model", "gpt-5.5"),
        ("reasoning_effort", "thought_level", "medium"),
    ]
    assert client.text() == "Hello from the wire."
    [usage] = runtime.updates("usage_update")
    assert set(usage) == {"sessionUpdate", "used", "size"} and usage["size"] == 258400
    [request] = responses.response_requests
    assert request.body["model"] == "gpt-5.5" and request.body["stream"] is True
    assert request.headers["authorization"] == "Bearer test-key"


async def test_codex_full_access_is_a_mode_from_the_config(
    tmp_path: Path, work: Path, responses: ResponsesWireServer
) -> None:
    setup = codex_runtime(tmp_path, responses.base_url, approval="never")
    async with running(setup, Recorder(work), work) as runtime:
        await start_session(runtime, work)
    new = runtime.result(1)
    assert new["modes"]["currentModeId"] == "full-access"
    assert [m["id"] for m in new["modes"]["availableModes"]] == ["read-only", "auto", "full-access"]
    [mode] = [o for o in new["configOptions"] if o["id"] == "mode"]
    assert (mode["category"], mode["currentValue"]) == ("mode", "full-access")


async def test_codex_asks_permission_before_a_command_when_untrusted(
    tmp_path: Path, work: Path, responses: ResponsesWireServer
) -> None:
    setup = codex_runtime(tmp_path, responses.base_url, approval="untrusted")
    client = Recorder(work)
    command = "echo hi > out.txt && echo done"
    async with running(setup, client, work) as runtime:
        session_id = await start_session(runtime, work)
        responses.reply_tool_calls(exec_command(command))
        responses.reply_text("Ran it.")
        assert await prompt(runtime, session_id, "run it") == "end_turn"
        assert (work / "out.txt").read_text() == "hi\n"

        client.choose = "reject_once"  # abort
        responses.reply_tool_calls(exec_command("echo no > refused.txt"))
        assert await prompt(runtime, session_id, "run another") == "cancelled"
        assert not (work / "refused.txt").exists()

    asked = runtime.requests("session/request_permission")
    first = asked[0]
    assert [(o["optionId"], o["kind"]) for o in first["options"]] == [
        ("approved", "allow_once"),
        ("approved-execpolicy-amendment", "allow_always"),
        ("abort", "reject_once"),
    ]
    assert first["options"][0]["name"] == "Yes, proceed"
    assert first["options"][2]["name"] == "No, and tell Codex what to do differently"
    call = first["toolCall"]
    assert (call["kind"], call["status"], call["title"]) == ("execute", "pending", command)
    assert call["rawInput"]["command"][-2:] == ["-lc", command]
    assert call["rawInput"]["cwd"] == str(work)
    assert client.methods() == ["session/request_permission"] * 2  # no terminal, no fs
    # the command runs in Codex itself, reported as tool_call → tool_call_update
    assert runtime.sequence().count("tool_call") == 1
    [done] = runtime.updates("tool_call_update")
    assert (done["status"], done["rawOutput"]["exit_code"]) == ("completed", 0)
    output = responses.response_requests[1].body["input"][-1]
    assert output["type"] == "function_call_output" and "done" in output["output"]


@pytest.mark.parametrize(
    ("approval", "mode"),
    [("never", None), ("untrusted", "full-access")],
    ids=["configured", "set-mode"],
)
async def test_codex_full_access_runs_commands_and_patches_itself(
    tmp_path: Path, work: Path, responses: ResponsesWireServer, approval: Any, mode: str | None
) -> None:
    setup = codex_runtime(tmp_path, responses.base_url, approval=approval, mode=mode)
    client = Recorder(work)
    (work / "existing.txt").write_text("old line\n")
    command = "echo hi > out.txt && echo done"
    patch = (
        "*** Begin Patch\n*** Add File: hello.txt\n+hello\n"
        "*** Update File: existing.txt\n@@\n-old line\n+new line\n*** End Patch\n"
    )
    responses.reply_tool_calls(exec_command(command))
    responses.reply_tool_calls(apply_patch(patch))
    responses.reply_text("All done.")
    async with running(setup, client, work) as runtime:
        session_id = await start_session(runtime, work, capabilities())
        if setup.mode is not None:
            await runtime.conn.set_session_mode(session_id=session_id, mode_id=setup.mode)
            await client.wait_until(lambda: bool(runtime.updates("config_option_update")))
            [update] = runtime.updates("config_option_update")
            [option] = [o for o in update["configOptions"] if o["id"] == "mode"]
            assert option["currentValue"] == "full-access"
        assert await prompt(runtime, session_id, "do it") == "end_turn"

    assert (work / "out.txt").read_text() == "hi\n"
    assert (work / "hello.txt").read_text() == "hello\n"
    assert (work / "existing.txt").read_text() == "new line\n"
    assert client.calls == []  # fs and terminal advertised, yet neither used; no permission
    run, edit = runtime.updates("tool_call")
    assert (run["kind"], run["status"], run["title"]) == ("execute", "in_progress", command)
    assert run["rawInput"]["command"][-1] == command
    assert run["rawInput"]["cwd"] == str(work)
    assert (edit["kind"], edit["status"]) == ("edit", "in_progress")
    assert sorted(edit["content"], key=lambda c: c["path"]) == [
        {
            "type": "diff",
            "path": str(work / "existing.txt"),
            "oldText": "old line\n",
            "newText": "new line\n",
        },
        {"type": "diff", "path": str(work / "hello.txt"), "newText": "hello\n"},
    ]
    assert edit["rawInput"]["changes"][str(work / "hello.txt")] == {
        "type": "add",
        "content": "hello\n",
    }
    ran, edited = runtime.updates("tool_call_update")
    assert ran["toolCallId"] == run["toolCallId"] and ran["status"] == "completed"
    assert {k: ran["rawOutput"][k] for k in ("stdout", "stderr", "exit_code", "status")} == {
        "stdout": "done\n",
        "stderr": "",
        "exit_code": 0,
        "status": "completed",
    }
    assert edited["toolCallId"] == edit["toolCallId"] and edited["status"] == "completed"
    assert edited["rawOutput"]["success"] is True
    assert edited["rawOutput"]["stdout"] == (
        "Success. Updated the following files:\nA hello.txt\nM existing.txt\n"
    )
    assert len(runtime.updates("usage_update")) == 3  # one per model response
    patched = responses.response_requests[2].body["input"][-1]
    assert patched["type"] == "custom_tool_call_output"


async def test_codex_cancel_ends_the_prompt_cancelled(
    tmp_path: Path, work: Path, responses: ResponsesWireServer
) -> None:
    setup = codex_runtime(tmp_path, responses.base_url, approval="never")
    client = Recorder(work)
    async with running(setup, client, work) as runtime:
        session_id = await start_session(runtime, work)
        responses.enqueue(ResponsesReply(text="word " * 200, chunk_delay_s=0.05))
        turn = asyncio.create_task(prompt(runtime, session_id, "talk"))
        await client.wait_until(lambda: "word" in client.text())
        started = time.monotonic()
        await runtime.conn.cancel(session_id=session_id)
        assert await turn == "cancelled"
        assert time.monotonic() - started < 2
        responses.reply_text("Back.")
        assert await prompt(runtime, session_id, "again") == "end_turn"
    note = responses.response_requests[-1].body["input"][-2]["content"][0]["text"]
    assert note.startswith("<turn_aborted>")  # what the model is told next turn


async def test_codex_load_session_after_a_restart(
    tmp_path: Path, work: Path, responses: ResponsesWireServer
) -> None:
    setup = codex_runtime(tmp_path, responses.base_url, approval="never")
    async with running(setup, Recorder(work), work) as runtime:
        session_id = await start_session(runtime, work)
        responses.reply_text("first answer")
        assert await prompt(runtime, session_id, "first question") == "end_turn"

    async with running(setup, Recorder(work), work) as runtime:
        await runtime.conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities()
        )
        await runtime.conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
        assert runtime.sequence()[:2] == ["user_message_chunk", "agent_message_chunk"]
        replayed = [
            u["content"]["text"]
            for u in runtime.updates("user_message_chunk") + runtime.updates("agent_message_chunk")
        ]
        assert replayed == ["first question", "first answer"]
        loaded = runtime.result(1)
        assert set(loaded) == {"modes", "configOptions"}  # no sessionId
        responses.reply_text("second answer")
        assert await prompt(runtime, session_id, "second question") == "end_turn"
    texts = [
        item["content"][0]["text"]
        for item in responses.response_requests[-1].body["input"]
        if item.get("type") == "message" and item["role"] in ("user", "assistant")
    ]
    assert texts[-3:] == ["first question", "first answer", "second question"]


async def test_codex_background_commands_end_with_the_runtime(
    tmp_path: Path, work: Path, responses: ResponsesWireServer
) -> None:
    setup = codex_runtime(tmp_path, responses.base_url, approval="never")
    command = f"{sys.executable} -c 'import time; time.sleep(60)'"
    responses.reply_tool_calls(exec_command(command, yield_time_ms=250))
    responses.reply_text("Left it running.")
    async with running(setup, Recorder(work), work) as runtime:
        session_id = await start_session(runtime, work)
        assert await prompt(runtime, session_id, "start it") == "end_turn"
        # the turn is over and the command still runs, in a session (a PTY) of its own
        assert any("time.sleep(60)" in p for p in runtime.processes())
        [started] = runtime.updates("tool_call")
        assert started["status"] == "in_progress"
        assert runtime.updates("tool_call_update") == []  # never completed
    told = responses.response_requests[1].body["input"][-1]["output"]
    assert "Process running with session ID" in told


async def test_codex_rate_limit_surfaces_as_an_internal_error(
    tmp_path: Path, work: Path, responses: ResponsesWireServer
) -> None:
    setup = codex_runtime(tmp_path, responses.base_url, approval="never")
    async with running(setup, Recorder(work), work) as runtime:
        session_id = await start_session(runtime, work)
        responses.fail_with(429, "Rate limit reached for gpt-5.5", retry_after=2)
        with pytest.raises(acp.RequestError) as http_429:
            await prompt(runtime, session_id, "one")
        assert len(responses.response_requests) == 1  # request_max_retries = 0
        responses.recover()
        await asyncio.sleep(CODEX_SETTLE_S)

        failed = {
            "code": "rate_limit_exceeded",
            "message": "Rate limit reached. Try again in 1.5s.",
        }
        responses.enqueue(ResponsesReply(text="partial", stream_error=failed))
        with pytest.raises(acp.RequestError) as in_stream:
            await prompt(runtime, session_id, "two")
        await asyncio.sleep(CODEX_SETTLE_S)

        responses.reply_text("Back.")
        assert await prompt(runtime, session_id, "three") == "end_turn"

    assert http_429.value.code == -32603 and str(http_429.value) == "Internal error"
    data = http_429.value.data
    assert isinstance(data, dict)
    assert re.fullmatch(
        r"exceeded retry limit, last status: 429 Too Many Requests, request id: req_\w+",
        data["message"],
    )
    assert data["codex_error_info"] == {
        "response_too_many_failed_attempts": {"http_status_code": 429}
    }
    assert in_stream.value.code == -32603
    assert in_stream.value.data == {
        "message": "stream disconnected before completion: Rate limit reached. Try again in 1.5s.",
        "codex_error_info": "other",
    }
