"""A recording ACP client and a runtime process under it, for tests that drive a real
coding agent (Claude Code, Codex) with the bare ACP SDK.

:class:`Recorder` is the client side: it answers permission requests with the option
kind it is told to choose, reads and writes real files, runs ``terminal/create``
commands through a shell in the session's directory, and keeps every call and update.
:func:`running` starts a runtime (a :class:`~tests.runtimes.RuntimeSetup`) and yields a
:class:`Runtime`: the SDK's connection plus every JSON-RPC message the runtime sent, as
it sent it, so tests assert the wire's shapes rather than the SDK's parse of them.

Why not ``acp.spawn_agent_process``: its transport takes no ``start_new_session`` (only
``stderr``, ``limit`` and ``shutdown_timeout``), so a runtime's children cannot be
signalled as a group; its shutdown closes stdin and waits 2 s, and neither adapter
exits on EOF; and its default ``stderr=PIPE`` is never read, so an adapter that logs
(Claude's writes a line most turns) blocks once the pipe is full. :func:`running` starts
the process in a session of its own with stderr in a file, and at exit SIGTERMs the
group and checks that no process carrying the run's marker variable (:data:`MARK`) is
left: both runtimes start commands in sessions of their own, outside the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import acp
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    EnvVariable,
    FileSystemCapabilities,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)
from acp.transports import default_environment

from tests._wait import async_wait_for
from tests.runtimes import RuntimeSetup

__all__ = [
    "MARK",
    "Recorder",
    "Runtime",
    "capabilities",
    "prompt",
    "running",
    "start_session",
]

MARK = "ATEAM_TEST_RUNTIME_MARK"
"""Set (to a fresh value) in each runtime's environment: every process it starts
inherits it, which is how the teardown finds them wherever they moved."""
WAIT_S = 15.0
"""Deadline for one exchange with a runtime (each takes well under a second)."""
GONE_S = 10.0
"""How long the runtime's processes get to exit after SIGTERM: ``claude`` cleans up
its running commands first (~3 s)."""


# --- the client ---------------------------------------------------------------------------


@dataclass
class _Terminal:
    process: asyncio.subprocess.Process
    limit: int | None
    output: bytearray = field(default_factory=bytearray)
    reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        assert self.process.stdout is not None
        while chunk := await self.process.stdout.read(4096):
            self.output += chunk

    def text(self) -> tuple[str, bool]:
        data = bytes(self.output)
        if self.limit is not None and len(data) > self.limit:
            return data[-self.limit :].decode("utf-8", "replace"), True
        return data.decode("utf-8", "replace"), False

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


@dataclass
class Recorder:
    """An ACP client for tests: real files and shell commands in ``cwd``, every call kept.

    Args:
        cwd: the session's working directory: terminals run there (``terminal/create``
            from Claude Code has no ``cwd``: the command runs through a shell in the
            session's).
        choose: the ``kind`` of permission option to select, or ``"cancelled"``.
    """

    cwd: Path
    choose: str = "allow_once"
    updates: list[Any] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """``(method, params)`` of each agent-to-client request, in order."""
    terminals: dict[str, _Terminal] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    # session updates

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        self.changed.set()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = WAIT_S) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

    def text(self) -> str:
        """The agent's message chunks so far, joined."""
        return "".join(
            u.content.text
            for u in self.updates
            if u.session_update == "agent_message_chunk" and u.content.type == "text"
        )

    # requests

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self._called("session/request_permission", tool_call=tool_call, options=options)
        if self.choose == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        [option] = [o for o in options if o.kind == self.choose]
        outcome = AllowedOutcome(outcome="selected", option_id=option.option_id)
        return RequestPermissionResponse(outcome=outcome)

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        self._called("fs/read_text_file", path=path, line=line, limit=limit)
        text = await asyncio.to_thread(Path(path).read_text, encoding="utf-8")
        lines = text.splitlines(keepends=True)
        start = (line or 1) - 1
        end = None if limit is None else start + limit
        return ReadTextFileResponse(content="".join(lines[start:end]))

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        self._called("fs/write_text_file", path=path, content=content)
        await asyncio.to_thread(Path(path).write_text, content, encoding="utf-8")
        return WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        self._called("terminal/create", command=command, args=args, env=env, cwd=cwd)
        line = " ".join([command, *(args or [])])
        process = await asyncio.create_subprocess_shell(
            line,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=cwd or self.cwd,
            env={**os.environ, **{v.name: v.value for v in env or []}},
            start_new_session=True,
        )
        terminal = _Terminal(process, output_byte_limit)
        terminal.reader = asyncio.create_task(terminal.read())
        terminal_id = f"term-{len(self.terminals) + 1}"
        self.terminals[terminal_id] = terminal
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        self._called("terminal/output", terminal_id=terminal_id)
        terminal = self.terminals[terminal_id]
        output, truncated = terminal.text()
        code = terminal.process.returncode
        status = None if code is None else TerminalExitStatus(exit_code=code)
        return TerminalOutputResponse(output=output, truncated=truncated, exit_status=status)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        self._called("terminal/wait_for_exit", terminal_id=terminal_id)
        terminal = self.terminals[terminal_id]
        code = await terminal.process.wait()
        if terminal.reader is not None:
            await terminal.reader
        return WaitForTerminalExitResponse(exit_code=code)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse:
        self._called("terminal/kill", terminal_id=terminal_id)
        self.terminals[terminal_id].kill()
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse:
        self._called("terminal/release", terminal_id=terminal_id)
        self.terminals[terminal_id].kill()
        return ReleaseTerminalResponse()

    async def aclose(self) -> None:
        """Kill what the terminals still run and wait for their readers."""
        for terminal in self.terminals.values():
            terminal.kill()
            if terminal.reader is not None:
                terminal.reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await terminal.reader
            await terminal.process.wait()

    def _called(self, method: str, **params: Any) -> None:
        self.calls.append((method, params))

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]


# --- the runtime process ------------------------------------------------------------------


@dataclass
class Runtime:
    """A started runtime: the SDK's connection to it and what it sent."""

    conn: ClientSideConnection
    process: asyncio.subprocess.Process
    received: list[dict[str, Any]]
    """Every JSON-RPC message from the runtime, as sent (before the SDK parses it)."""
    mark: str
    """The value of :data:`MARK` in its environment."""

    def processes(self) -> list[str]:
        """The command lines of the runtime and everything it started that still runs."""
        return [command for _, command in _marked(self.mark)]

    def result(self, request_id: int) -> dict[str, Any]:
        """The raw ``result`` of the client's request ``request_id`` (0 = initialize)."""
        [message] = [m for m in self.received if m.get("id") == request_id and "method" not in m]
        result: dict[str, Any] = message["result"]
        return result

    def requests(self, method: str) -> list[dict[str, Any]]:
        """The raw params of the runtime's requests to the client with this method."""
        return [m["params"] for m in self.received if m.get("method") == method and "id" in m]

    def updates(self, kind: str) -> list[dict[str, Any]]:
        """The raw ``update`` objects of ``session/update`` of this ``sessionUpdate`` kind."""
        return [
            m["params"]["update"]
            for m in self.received
            if m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == kind
        ]

    def sequence(self) -> list[str]:
        """Methods and update kinds in arrival order (responses left out)."""
        return [
            m["params"]["update"]["sessionUpdate"]
            if m.get("method") == "session/update"
            else m["method"]
            for m in self.received
            if "method" in m
        ]


@contextlib.asynccontextmanager
async def running(setup: RuntimeSetup, client: Recorder, cwd: Path) -> AsyncIterator[Runtime]:
    """Start the runtime in a session of its own; at exit, see that nothing of it is left."""
    mark = uuid.uuid4().hex
    env = {**default_environment(), **setup.env, MARK: mark}
    with setup.log.open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            *setup.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env=env,
            cwd=cwd,
            start_new_session=True,
            limit=2**24,  # a session/load replay or a big diff is one line
        )
    assert process.stdin is not None and process.stdout is not None
    received: list[dict[str, Any]] = []
    reader = asyncio.StreamReader(limit=2**24)
    tee = asyncio.create_task(_tee(process.stdout, reader, received))
    # The SDK's Client protocol lists every optional method (elicitation, extensions);
    # the SDK answers "method not found" for those a client lacks.
    conn = acp.connect_to_agent(cast(acp.Client, client), process.stdin, reader)
    try:
        yield Runtime(conn, process, received, mark)
    except BaseException:
        await _stop(process, conn, tee, client, mark)
        # Shown with the failure (pytest prints a failed test's output): what it last said.
        tail = setup.log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]
        print(f"--- {setup.name}: the last messages it sent", *received[-8:], sep="\n")
        print(f"--- {setup.name}: the end of its stderr ({setup.log})", *tail, sep="\n")
        raise
    leaked = await _stop(process, conn, tee, client, mark)
    assert not leaked, f"{setup.name} left processes running (killed now): {leaked}"


async def _tee(
    source: asyncio.StreamReader, sink: asyncio.StreamReader, received: list[dict[str, Any]]
) -> None:
    try:
        while line := await source.readline():
            with contextlib.suppress(ValueError):
                received.append(json.loads(line))
            sink.feed_data(line)
    finally:
        sink.feed_eof()


async def _stop(
    process: asyncio.subprocess.Process,
    conn: ClientSideConnection,
    tee: asyncio.Task[None],
    client: Recorder,
    mark: str,
) -> list[str]:
    """SIGTERM the runtime's group, then wait for every marked process; → the leftovers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(AssertionError):  # a timeout: the leftovers are the answer
        await async_wait_for(lambda: not _marked(mark), GONE_S, "the runtime's processes to end")
    left = _marked(mark)
    for pid, _ in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    await conn.close()
    await tee
    await client.aclose()
    return [f"{pid}: {command}" for pid, command in left]


def _marked(mark: str) -> list[tuple[int, str]]:
    """``(pid, command line)`` of each live process whose environment carries ``mark``."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if state != "Z":  # a zombie is dead; its parent reaps it
            found.append((int(entry.name), command.strip()))
    return found


def capabilities(*, fs: bool = True, terminal: bool = True) -> ClientCapabilities:
    files = FileSystemCapabilities(read_text_file=fs, write_text_file=fs)
    return ClientCapabilities(fs=files, terminal=terminal)


async def start_session(runtime: Runtime, cwd: Path, caps: ClientCapabilities | None = None) -> str:
    """initialize → session/new; → the session id."""
    await runtime.conn.initialize(
        protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps or capabilities()
    )
    session = await runtime.conn.new_session(cwd=str(cwd), mcp_servers=[])
    return session.session_id


async def prompt(runtime: Runtime, session_id: str, text: str) -> str:
    """One prompt; → its stop reason."""
    async with asyncio.timeout(WAIT_S):
        response = await runtime.conn.prompt(session_id=session_id, prompt=[acp.text_block(text)])
    return response.stop_reason
