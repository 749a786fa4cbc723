"""tests/acp_agent.py, the scriptable ACP agent, as a real subprocess driven by the SDK's client.

Each agent process costs about a second (the SDK's schema module is large), so a test
plays several steps in one process, and tests that need several processes start them
side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import string
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast, get_args

import acp
import pytest
import yaml
from acp import RequestError
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    ContentToolCallContent,
    CreateTerminalResponse,
    DeniedOutcome,
    EnvVariable,
    FileEditToolCallContent,
    FileSystemCapabilities,
    Implementation,
    KillTerminalResponse,
    McpServerStdio,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    TerminalToolCallContent,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from tests._wait import async_wait_for

AGENT = Path(__file__).resolve().parents[1] / "acp_agent.py"
FILLER = string.ascii_letters + string.digits

pytestmark = pytest.mark.timeout(30)


# --- a client, as small as the protocol allows --------------------------------------------


@dataclass
class Terminal:
    process: asyncio.subprocess.Process
    reader: asyncio.Task[None]
    output: bytearray = field(default_factory=bytearray)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


class Recorder:
    """An ACP client that records what the agent sent and runs its requests for real."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.permission_requests: list[tuple[ToolCallUpdate, list[PermissionOption]]] = []
        self.answers: list[str | None] = []  # option ids in turn; None answers "cancelled"
        self.permission_asked = asyncio.Event()
        self.permission_gate: asyncio.Event | None = None  # held until set, if given
        self.writes: list[tuple[str, str]] = []
        self.terminal_calls: list[str] = []
        self.terminal_created = asyncio.Event()
        self._terminals: dict[str, Terminal] = {}

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **_: Any
    ) -> RequestPermissionResponse:
        self.permission_requests.append((tool_call, options))
        self.permission_asked.set()
        if self.permission_gate is not None:
            await self.permission_gate.wait()
        answer = self.answers.pop(0)
        if answer is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=answer)
        )

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **_: Any,
    ) -> ReadTextFileResponse:
        try:
            text = await asyncio.to_thread(Path(path).read_text, encoding="utf-8")
        except FileNotFoundError:
            raise RequestError.resource_not_found(path) from None
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **_: Any
    ) -> WriteTextFileResponse:
        try:
            await asyncio.to_thread(Path(path).write_text, content, encoding="utf-8")
        except OSError as exc:
            raise RequestError.internal_error({"details": exc.strerror}) from None
        self.writes.append((path, content))
        return WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **_: Any,
    ) -> CreateTerminalResponse:
        self.terminal_calls.append("create")
        # Its own process group, so a kill reaches what the shell started (`sleep` holds
        # the output pipe open after its shell is gone).
        process = await asyncio.create_subprocess_shell(
            command,
            cwd=cwd,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        terminal_id = f"term-{len(self._terminals) + 1}"
        output = bytearray()
        reader = asyncio.create_task(self._collect(process, output))
        self._terminals[terminal_id] = Terminal(process, reader, output)
        self.terminal_created.set()
        return CreateTerminalResponse(terminal_id=terminal_id)

    @staticmethod
    async def _collect(process: asyncio.subprocess.Process, output: bytearray) -> None:
        assert process.stdout is not None
        while chunk := await process.stdout.read(65536):
            output += chunk

    async def terminal_output(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> TerminalOutputResponse:
        self.terminal_calls.append("output")
        terminal = self._terminals[terminal_id]
        code = terminal.process.returncode
        status = None if code is None else TerminalExitStatus(exit_code=code if code >= 0 else None)
        return TerminalOutputResponse(
            output=terminal.output.decode(), truncated=False, exit_status=status
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> WaitForTerminalExitResponse:
        self.terminal_calls.append("wait_for_exit")
        terminal = self._terminals[terminal_id]
        code = await terminal.process.wait()
        await terminal.reader
        return WaitForTerminalExitResponse(exit_code=code if code >= 0 else None)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> KillTerminalResponse:
        self.terminal_calls.append("kill")
        _kill_group(self._terminals[terminal_id].process)
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **_: Any
    ) -> ReleaseTerminalResponse:
        self.terminal_calls.append("release")
        terminal = self._terminals.pop(terminal_id)
        _kill_group(terminal.process)
        await terminal.process.wait()
        await terminal.reader
        return ReleaseTerminalResponse()

    async def aclose(self) -> None:
        """Kill what a failed test left running."""
        for terminal in self._terminals.values():
            _kill_group(terminal.process)
            await terminal.process.wait()
            await terminal.reader
        self._terminals.clear()

    # --- what the tests read ---

    def text(self) -> str:
        return "".join(u.content.text for u in self.updates if isinstance(u, AgentMessageChunk))

    def chunks(self) -> list[str]:
        return [u.content.text for u in self.updates if isinstance(u, AgentMessageChunk)]

    def tool_updates(self, tool_id: str) -> list[ToolCallStart | ToolCallProgress]:
        kinds = (ToolCallStart, ToolCallProgress)
        return [u for u in self.updates if isinstance(u, kinds) and u.tool_call_id == tool_id]

    def last(self, tool_id: str) -> ToolCallStart | ToolCallProgress:
        return self.tool_updates(tool_id)[-1]

    def raw_output(self, tool_id: str) -> dict[str, Any]:
        raw = self.last(tool_id).raw_output
        assert isinstance(raw, dict)
        return raw

    def texts(self, tool_id: str) -> list[str]:
        """The text contents of the tool call's last update."""
        contents = self.last(tool_id).content or []
        return [c.content.text for c in contents if isinstance(c, ContentToolCallContent)]


@dataclass
class Run:
    conn: ClientSideConnection
    process: asyncio.subprocess.Process
    client: Recorder
    log_path: Path

    def log(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.log() if e.get("event") == kind]

    async def start(self, cwd: Path) -> str:
        await self.conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        return (await self.conn.new_session(cwd=str(cwd))).session_id

    async def ask(self, session_id: str, text: str) -> str:
        response = await self.conn.prompt(session_id=session_id, prompt=[acp.text_block(text)])
        return str(response.stop_reason)


def write_script(directory: Path, script: dict[str, Any], name: str = "script.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(script), encoding="utf-8")
    return path


@asynccontextmanager
async def agent(
    tmp_path: Path, script: dict[str, Any], client: Recorder | None = None
) -> AsyncIterator[Run]:
    """The agent on ``script``, with a state file and a log in ``tmp_path``."""
    path = write_script(tmp_path, script)
    client = client or Recorder()
    log = tmp_path / "log.jsonl"
    args = [str(AGENT), str(path), "--state", str(tmp_path / "state.json"), "--log", str(log)]
    # The Client protocol also names elicitation and extension methods; the SDK's router
    # answers method_not_found for those a client leaves out, as this one does.
    to_client = cast(acp.Client, client)
    try:
        async with acp.spawn_agent_process(to_client, sys.executable, *args, cwd=tmp_path) as (
            conn,
            process,
        ):
            yield Run(conn, process, client, log)
    finally:
        await client.aclose()


# --- initialize, sessions, modes, auth -----------------------------------------------------


async def test_initialize_auth_session_and_modes_answer_as_scripted(tmp_path: Path) -> None:
    script = {
        "agent": {"name": "test-acp", "version": "1.2.3"},
        "protocol_version": 99,
        "auth_methods": [{"id": "login", "name": "Log in", "description": "run test-acp login"}],
        "auth_required": True,
        "modes": {"current": "ask", "available": ["ask", "auto", "full-access"]},
    }
    async with agent(tmp_path, script) as run:
        init = await run.conn.initialize(
            protocol_version=1,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
            ),
            client_info=Implementation(name="ateam", version="9"),
        )
        assert init.protocol_version == 99  # refusing a newer version is the client's part
        assert init.agent_info is not None
        assert (init.agent_info.name, init.agent_info.version) == ("test-acp", "1.2.3")
        assert init.agent_capabilities is not None and init.agent_capabilities.load_session
        assert [m.id for m in init.auth_methods or []] == ["login"]

        with pytest.raises(RequestError) as refused:
            await run.conn.new_session(cwd=str(tmp_path))
        assert (refused.value.code, str(refused.value)) == (-32000, "Authentication required")
        with pytest.raises(RequestError) as unknown:
            await run.conn.authenticate(method_id="sso")
        assert unknown.value.code == -32602
        await run.conn.authenticate(method_id="login")

        kb = McpServerStdio(name="kb", command="/bin/kb", args=["serve"], env=[])
        session = await run.conn.new_session(cwd=str(tmp_path), mcp_servers=[kb])
        assert session.session_id == "sess-1"
        assert session.modes is not None and session.modes.current_mode_id == "ask"
        assert [m.id for m in session.modes.available_modes] == ["ask", "auto", "full-access"]

        await run.conn.set_session_mode(session_id="sess-1", mode_id="auto")
        with pytest.raises(RequestError) as bad_mode:
            await run.conn.set_session_mode(session_id="sess-1", mode_id="yolo")
        assert bad_mode.value.code == -32602

        # No `prompts` key: every prompt is echoed, in one chunk.
        assert await run.ask("sess-1", "hi there") == "end_turn"
        assert run.client.chunks() == ["echo: hi there"]

    log = run.log()
    assert [e.get("method") or e.get("event") for e in log] == [
        "initialize",
        "session/new",
        "authenticate",
        "authenticate",
        "session/new",
        "session/set_mode",
        "mode",
        "session/set_mode",
        "session/prompt",
        "prompt_end",
    ]
    assert log[0]["params"]["clientInfo"] == {"name": "ateam", "version": "9"}
    assert log[0]["params"]["clientCapabilities"]["terminal"] is True
    assert [log[2]["params"], log[3]["params"]] == [{"methodId": "sso"}, {"methodId": "login"}]
    assert log[4]["params"]["mcpServers"][0]["command"] == "/bin/kb"
    assert log[5]["params"] == {"sessionId": "sess-1", "modeId": "auto"}
    assert log[8]["text"] == "hi there"
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["authenticated"] is True
    assert state["sessions"]["sess-1"]["mode"] == "auto"


# --- the steps --------------------------------------------------------------------------------


async def test_message_steps_then_the_script_runs_out(tmp_path: Path) -> None:
    script = {
        "usage_total": {"input_tokens": 1, "output_tokens": 2},
        "prompts": [
            {
                "stop_reason": "max_tokens",
                "usage_total": {"input_tokens": 10, "output_tokens": 20},
                "steps": [
                    {"text": "Hello there friend"},
                    {"thought": "Let me think"},
                    {"plan": [{"content": "Read code"}, {"content": "Fix", "status": "completed"}]},
                    {"echo_prompt": True},
                    {"sleep": 0.01},
                    {
                        "usage": {
                            "used": 1200,
                            "size": 200000,
                            "cost": {"amount": 0.012, "currency": "USD"},
                        }
                    },
                ],
            }
        ],
    }
    async with agent(tmp_path, script) as run:
        session_id = await run.start(tmp_path)
        response = await run.conn.prompt(
            session_id=session_id, prompt=[acp.text_block("line one"), acp.text_block("line two")]
        )
        assert response.stop_reason == "max_tokens"
        assert response.usage is not None
        assert (response.usage.input_tokens, response.usage.total_tokens) == (10, 30)
        assert run.client.chunks() == ["Hello ", "there ", "friend", "line one\nline two"]
        kinds = [AgentMessageChunk] * 3 + [AgentThoughtChunk, AgentPlanUpdate]
        kinds += [AgentMessageChunk, UsageUpdate]
        assert [type(u) for u in run.client.updates] == kinds
        thought, plan, usage = run.client.updates[3], run.client.updates[4], run.client.updates[6]
        assert thought.content.text == "Let me think"
        assert [(e.content, e.status, e.priority) for e in plan.entries] == [
            ("Read code", "pending", "medium"),
            ("Fix", "completed", "medium"),
        ]
        assert (usage.used, usage.size, usage.cost.amount, usage.cost.currency) == (
            1200,
            200000,
            0.012,
            "USD",
        )

        run.client.updates.clear()
        response = await run.conn.prompt(session_id=session_id, prompt=[acp.text_block("more")])
        assert response.stop_reason == "end_turn"
        assert response.usage is not None and response.usage.total_tokens == 3
        assert run.client.chunks() == ["(script exhausted)"]


async def test_tools_run_through_the_client(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("old text\n")
    steps = [
        {
            "tool": {
                "id": "t1",
                "title": "Run",
                "kind": "execute",
                "terminal": {"command": "pwd; echo made > made.txt", "timeout_s": 10},
            }
        },
        {
            "tool": {
                "id": "t2",
                "title": "Fail",
                "kind": "execute",
                "terminal": {"command": "exit 3"},
            }
        },
        {
            "tool": {
                "id": "t3",
                "title": "Slow",
                "kind": "execute",
                "terminal": {"command": "sleep 30", "timeout_s": 0.2},
            }
        },
        {
            "tool": {
                "id": "w1",
                "title": "Write",
                "kind": "edit",
                "write": {"path": "a.txt", "content": "new text\n"},
            }
        },
        {
            "tool": {
                "id": "w2",
                "title": "Write new",
                "kind": "edit",
                "write": {"path": "b.txt", "content": "b\n"},
            }
        },
        {
            "tool": {
                "id": "w3",
                "title": "Write nowhere",
                "kind": "edit",
                "write": {"path": "no/such/dir/c.txt", "content": "c\n"},
            }
        },
        {"tool": {"id": "r1", "title": "Read", "kind": "read", "read": {"path": "a.txt"}}},
        {
            "tool": {
                "id": "x1",
                "title": "Ran it myself",
                "kind": "execute",
                "reported": {"command": "make", "output": "ok\n", "exit_code": 2},
            }
        },
    ]
    async with agent(tmp_path, {"prompts": [{"steps": steps}]}) as run:
        await run.conn.initialize(protocol_version=1)
        session_id = (await run.conn.new_session(cwd=str(work))).session_id
        assert await run.ask(session_id, "go") == "end_turn"
        client = run.client

        # A terminal: really run, in the session's cwd, and shown by reference and text.
        assert (work / "made.txt").read_text() == "made\n"
        t1 = client.tool_updates("t1")
        assert [(type(u), u.status) for u in t1] == [
            (ToolCallStart, "pending"),
            (ToolCallProgress, "in_progress"),
            (ToolCallProgress, "completed"),
        ]
        ref, text = t1[-1].content or []
        assert isinstance(ref, TerminalToolCallContent) and isinstance(text, ContentToolCallContent)
        assert isinstance(text.content, TextContentBlock) and text.content.text == f"{work}\n"
        assert client.last("t2").status == "failed"
        assert client.raw_output("t2")["exit_code"] == 3
        assert client.last("t3").status == "failed"
        assert client.raw_output("t3")["timed_out"] is True
        assert client.terminal_calls[:4] == ["create", "wait_for_exit", "output", "release"]
        assert "kill" in client.terminal_calls

        # Writes: the old text read first when there is one, a client error is a failure.
        assert (work / "a.txt").read_text() == "new text\n"
        assert client.writes[:2] == [(f"{work}/a.txt", "new text\n"), (f"{work}/b.txt", "b\n")]
        diff = (client.last("w1").content or [])[0]
        assert isinstance(diff, FileEditToolCallContent)
        assert (diff.path, diff.old_text, diff.new_text) == (
            f"{work}/a.txt",
            "old text\n",
            "new text\n",
        )
        new_diff = (client.last("w2").content or [])[0]
        assert isinstance(new_diff, FileEditToolCallContent) and new_diff.old_text is None
        w3 = client.last("w3")
        assert w3.status == "failed"
        assert client.texts("w3")[0].startswith("Internal error")

        read = (client.last("r1").content or [])[0]
        assert isinstance(read, ContentToolCallContent)
        assert isinstance(read.content, TextContentBlock) and read.content.text == "new text\n"

        x1 = client.tool_updates("x1")
        assert [u.status for u in x1] == ["in_progress", "failed"]
        assert x1[0].raw_input == {"command": "make"}
        assert x1[1].raw_output == {"output": "ok\n", "exit_code": 2}

    replies = [e["reply_to"] for e in run.log() if "reply_to" in e]
    assert replies[:4] == [
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
    ]
    assert "fs/write_text_file" in replies and "fs/read_text_file" in replies


async def test_permission_branches(tmp_path: Path) -> None:
    step = {
        "permission": {
            "id": "p1",
            "title": "Edit a.txt",
            "kind": "edit",
            "options": ["allow_once", "allow_always", "reject_once"],
        },
        "then": [{"text": "allowed"}],
        "otherwise": [{"text": "refused"}],
    }
    client = Recorder()
    client.answers = ["allow_always", "reject_once", None]
    async with agent(tmp_path, {"prompts": [{"steps": [step]}] * 3}, client) as run:
        session_id = await run.start(tmp_path)
        for _ in range(3):
            assert await run.ask(session_id, "edit it") == "end_turn"
        assert client.text() == "allowedrefusedrefused"
        tool_call, options = client.permission_requests[0]
        assert (tool_call.tool_call_id, tool_call.title, tool_call.kind) == (
            "p1",
            "Edit a.txt",
            "edit",
        )
        assert [(o.option_id, o.kind) for o in options] == [
            ("allow_once", "allow_once"),
            ("allow_always", "allow_always"),
            ("reject_once", "reject_once"),
        ]
    outcomes = [(e["outcome"], e["allowed"]) for e in run.events("permission")]
    assert outcomes == [("allow_always", True), ("reject_once", False), ("cancelled", False)]


async def test_cancel_ends_a_turn_unless_ignored(tmp_path: Path) -> None:
    prompts = [
        {"steps": [{"text": "working"}, {"hang": True}]},
        {
            "steps": [
                {
                    "permission": {"title": "Run it"},
                    "then": [{"text": "ran"}],
                    "otherwise": [{"text": "did not"}],
                }
            ]
        },
        {"steps": [{"tool": {"id": "t1", "title": "Sleep", "terminal": {"command": "sleep 30"}}}]},
        {"ignore_cancel": True, "steps": [{"hang": True}]},
    ]
    client = Recorder()
    client.answers = [None]
    client.permission_gate = asyncio.Event()
    async with agent(tmp_path, {"prompts": prompts}, client) as run:
        session_id = await run.start(tmp_path)

        # A hang: the cancel ends it at once, after what came before.
        turn = asyncio.create_task(run.ask(session_id, "one"))
        await async_wait_for(lambda: client.text() == "working")
        await run.conn.cancel(session_id=session_id)
        assert await turn == "cancelled"

        # Waiting for permission: the turn ends when the client answers "cancelled".
        turn = asyncio.create_task(run.ask(session_id, "two"))
        await client.permission_asked.wait()
        await run.conn.cancel(session_id=session_id)
        client.permission_gate.set()
        assert await turn == "cancelled"
        assert client.text() == "working"  # neither branch ran

        # A running terminal is killed and released, and the tool call fails.
        turn = asyncio.create_task(run.ask(session_id, "three"))
        await client.terminal_created.wait()
        await async_wait_for(lambda: "wait_for_exit" in client.terminal_calls)
        await run.conn.cancel(session_id=session_id)
        assert await turn == "cancelled"
        assert client.terminal_calls == ["create", "wait_for_exit", "kill", "release"]
        assert client.last("t1").status == "failed"

        # ignore_cancel: the cancel is logged, the turn goes on until the process is killed.
        turn = asyncio.create_task(run.ask(session_id, "four"))
        await async_wait_for(lambda: len(run.events("prompt_end")) == 3)
        await async_wait_for(lambda: any(e.get("text") == "four" for e in run.log()))
        await run.conn.cancel(session_id=session_id)
        await async_wait_for(lambda: run.events("cancel")[-1]["action"] == "ignored")
        done, _ = await asyncio.wait({turn}, timeout=0.3)
        assert not done
        run.process.kill()
        with pytest.raises(ConnectionError):
            await turn
    assert [e["outcome"] for e in run.events("permission")] == ["cancelled"]
    assert [e["action"] for e in run.events("cancel")] == [
        "cancelled",
        "cancelled",
        "cancelled",
        "ignored",
    ]


async def test_crash_then_a_restart_continues_the_script(tmp_path: Path) -> None:
    prompts = [
        {"steps": [{"text": "one"}]},
        {"steps": [{"text": "about to crash"}, {"crash": 7}]},
        {"steps": [{"text": "three"}]},
    ]
    async with agent(tmp_path, {"prompts": prompts}) as run:
        session_id = await run.start(tmp_path)
        assert await run.ask(session_id, "a") == "end_turn"
        with pytest.raises(ConnectionError):
            await run.ask(session_id, "b")
        assert await run.process.wait() == 7
        assert run.client.text() == "oneabout to crash"

    async with agent(tmp_path, {"prompts": prompts}) as run:
        await run.conn.initialize(protocol_version=1)
        with pytest.raises(RequestError) as not_loaded:
            await run.ask(session_id, "c")  # a new process knows it only once loaded
        assert not_loaded.value.code == -32602
        with pytest.raises(RequestError) as unknown:
            await run.conn.load_session(cwd=str(tmp_path), session_id="sess-99")
        assert unknown.value.code == -32602
        await run.conn.load_session(cwd=str(tmp_path), session_id=session_id)
        assert await run.ask(session_id, "c") == "end_turn"
        assert run.client.text() == "three"
        second = (await run.conn.new_session(cwd=str(tmp_path))).session_id
        assert second == "sess-2"
        assert await run.ask(second, "d") == "end_turn"
        assert run.client.text() == "three(script exhausted)"


async def test_big_message_flood_error_and_lines_the_sdk_client_skips(tmp_path: Path) -> None:
    big = 10 * 1024 * 1024
    mystery = {"sessionId": "sess-1", "update": {"sessionUpdate": "mystery"}}
    rate_limited = {"code": -32000, "message": "rate limit exceeded", "data": {"status": 429}}
    prompts = [
        {"steps": [{"big": big}]},
        {"steps": [{"flood": {"bytes": 1_000_000, "chunk": 65536}}]},
        {
            "steps": [
                # The SDK's client logs each of these three at ERROR and goes on.
                {"garbage": "this is not json"},
                {"raw": {"jsonrpc": "2.0", "method": "session/update", "params": mystery}},
                {"raw": {"jsonrpc": "2.0", "id": 999, "result": {}}},
                {"text": "partial"},
                {"error": rate_limited},
            ]
        },
    ]
    async with agent(tmp_path, {"prompts": prompts}) as run:
        session_id = await run.start(tmp_path)
        # A 10 MB line, read with the SDK's default stream limit (64 KiB): it is read in pieces.
        assert await run.ask(session_id, "big") == "end_turn"
        (text,) = run.client.chunks()
        assert len(text) == big and text.startswith(FILLER) and set(text) <= set(FILLER)

        run.client.updates.clear()
        assert await run.ask(session_id, "flood") == "end_turn"
        flood = run.client.tool_updates("flood")
        pieces = [c.content.text for u in flood[1:-1] for c in u.content or []]
        assert sum(map(len, pieces)) == 1_000_000 and len(pieces) == 16
        assert (flood[0].status, flood[-1].status) == ("in_progress", "completed")

        run.client.updates.clear()
        with pytest.raises(RequestError) as failed:
            await run.ask(session_id, "error")
        assert (failed.value.code, str(failed.value), failed.value.data) == (
            -32000,
            "rate limit exceeded",
            {"status": 429},
        )
        assert run.client.text() == "partial"


# --- what the SDK cannot send: raw lines, and the process's own fate -----------------------


class RawDriver:
    """JSON-RPC by hand, to see every line the agent writes, parsable or not."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._next = 0

    @classmethod
    async def start(cls, script: Path, *args: str) -> RawDriver:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(AGENT),
            str(script),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def send(self, method: str, params: dict[str, Any]) -> int:
        assert self.process.stdin is not None
        request_id, self._next = self._next, self._next + 1
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()
        return request_id

    async def reply(self, request_id: int) -> dict[str, Any]:
        """Collect lines until the reply to ``request_id``, which is returned."""
        assert self.process.stdout is not None
        while line := (await self.process.stdout.readline()).decode():
            self.lines.append(line.rstrip("\n"))
            with contextlib.suppress(ValueError):
                reply = json.loads(line)
                if isinstance(reply, dict) and reply.get("id") == request_id:
                    return reply
        raise AssertionError(f"the agent ended before answering request {request_id}")

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return await self.reply(await self.send(method, params))

    async def close(self) -> int:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.communicate()
        return self.process.returncode or 0


async def _garbage_and_raw_lines_are_written_verbatim(tmp_path: Path) -> None:
    unknown = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "sess-1", "update": {"sessionUpdate": "mystery"}},
    }
    steps = [{"garbage": "not json"}, {"raw": unknown}, {"raw": [1, 2]}, {"text": "done"}]
    script = {"initialize": "garbage", "prompts": [{"steps": steps}]}
    driver = await RawDriver.start(write_script(tmp_path, script))
    try:
        init = await driver.call("initialize", {"protocolVersion": 1})
        assert driver.lines == ["this is not json", json.dumps(init, separators=(",", ":"))]
        await driver.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        driver.lines.clear()
        reply = await driver.call(
            "session/prompt", {"sessionId": "sess-1", "prompt": [{"type": "text", "text": "x"}]}
        )
    finally:
        await driver.close()
    assert reply["result"] == {"stopReason": "end_turn"}
    assert driver.lines[0] == "not json"
    assert json.loads(driver.lines[1]) == unknown
    assert driver.lines[2] == "[1,2]"
    update = json.loads(driver.lines[3])["params"]["update"]
    assert update["sessionUpdate"] == "agent_message_chunk"
    assert update["content"] == {"type": "text", "text": "done"}


async def _initialize_exits(tmp_path: Path) -> None:
    async with agent(tmp_path, {"initialize": "exit"}) as run:
        with pytest.raises(ConnectionError):
            await run.conn.initialize(protocol_version=1)
        assert await run.process.wait() == 3
    assert [e["method"] for e in run.log()] == ["initialize"]


async def _initialize_hangs_and_only_sigkill_ends_it(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    script = write_script(tmp_path, {"initialize": "hang", "ignore_shutdown": True})
    driver = await RawDriver.start(script, "--log", str(log))
    try:
        request_id = await driver.send("initialize", {"protocolVersion": 1})
        await async_wait_for(log.exists, message="the agent to receive initialize")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(driver.reply(request_id), 0.2)
        assert driver.process.stdin is not None
        driver.process.stdin.close()
        driver.process.send_signal(signal.SIGTERM)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(driver.process.wait()), 0.2)
    finally:
        assert await driver.close() == -signal.SIGKILL


async def test_initialize_behaviours_raw_lines_and_ignore_shutdown(tmp_path: Path) -> None:
    cases = (
        _garbage_and_raw_lines_are_written_verbatim,
        _initialize_exits,
        _initialize_hangs_and_only_sigkill_ends_it,
    )
    directories = [tmp_path / case.__name__ for case in cases]
    for directory in directories:
        directory.mkdir()
    await asyncio.gather(*(case(d) for case, d in zip(cases, directories, strict=True)))


async def test_a_bad_script_is_one_line_and_status_2(tmp_path: Path) -> None:
    scripts = {
        "yaml.yaml": "prompts: [\n",
        "model.yaml": "prompts: [{steps: [{text: a, thought: b}, {sleep: -1}]}]\nhello: 1\n",
    }
    expected = {
        "yaml.yaml": ": not YAML: ",
        "model.yaml": "prompts[0].steps[0]: a step is a mapping with exactly one of: text,",
    }

    async def run(name: str) -> tuple[int, str]:
        path = tmp_path / name
        path.write_text(scripts[name])
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(AGENT), str(path), stderr=asyncio.subprocess.PIPE
        )
        _, err = await process.communicate()
        return process.returncode or 0, err.decode()

    results = await asyncio.gather(*(run(name) for name in scripts))
    for name, (code, err) in zip(scripts, results, strict=True):
        assert code == 2, err
        assert err.count("\n") == 1 and err.startswith(f"acp_agent: {tmp_path / name}"), err
        assert expected[name] in err
    assert "prompts[0].steps[1].sleep: Input should be greater than or equal to 0;" in err
    assert err.endswith("; hello: Extra inputs are not permitted\n")


def test_every_step_kind_is_parsed_and_played() -> None:
    # A new step is named in three places: its model, the Step union, the agent's table.
    from tests import acp_agent

    union = get_args(get_args(acp_agent.Step)[0])
    parsed = {get_args(member)[0] for member in union}
    agent = acp_agent.ScriptedAgent(
        acp_agent.Script(), acp_agent.StateFile(None), acp_agent.Log(None), cast(Any, None)
    )
    played = set(agent._steps)
    assert parsed == set(acp_agent._STEP_TYPES) == played - {acp_agent._SayStep}


def test_the_agent_needs_nothing_of_ateam() -> None:
    # It is started as a plain file by an agent process in another working directory.
    source = AGENT.read_text()
    assert "import ateam" not in source and "from ateam" not in source
    assert "from tests" not in source and "import tests" not in source
    assert os.access(AGENT, os.R_OK)
