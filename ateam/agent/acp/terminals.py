"""``terminal/*``: a runtime's commands run through ateam's own PTY execution.

A runtime that is given the ``terminal`` capability asks the client to run its commands
instead of running them itself. Each ``terminal/create`` becomes an
:class:`~ateam.tools.pty.ExecProcess` — its own PTY, session and process group, the
agent's environment policy and time limit — whose output streams live as ``tool.output``
of the tool call it belongs to and is kept, bounded, for ``terminal/output``. Killing a
terminal, releasing it, interrupting the task and stopping the agent all end the
command's whole group.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ateam.errors import BadRequest, FsDenied
from ateam.tools.exec_values import ExecLimits, ExecResult, OutputRoom, minimal_env
from ateam.tools.fs import Sandbox
from ateam.tools.pty import ExecProcess

__all__ = ["DEFAULT_OUTPUT_LIMIT", "Terminal", "Terminals"]

DEFAULT_OUTPUT_LIMIT = 1024 * 1024
"""Bytes of output kept for ``terminal/output`` when the runtime names no limit."""

OutputSink = Callable[[str, bytes], None]
"""Told of each chunk of a terminal's output: the terminal id, the bytes."""


@dataclass
class Terminal:
    """One command a runtime asked for, running or ended."""

    id: str
    command: str
    process: ExecProcess
    limit: int
    buffer: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    result: ExecResult | None = None

    def take(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > self.limit:
            # ACP keeps the end of the output: cut from the front, on a character
            # boundary so what is returned stays valid UTF-8.
            cut = len(self.buffer) - self.limit
            while cut < len(self.buffer) and (self.buffer[cut] & 0xC0) == 0x80:
                cut += 1
            del self.buffer[:cut]
            self.truncated = True

    def text(self) -> str:
        return self.buffer.decode("utf-8", "replace")


class Terminals:
    """The terminals of one agent's runtime.

    Args:
        sandbox: Where a command may run: a ``cwd`` outside it is refused.
        limits: The agent's command limits and environment policy.
        on_output: Where each terminal's output streams (the task's events).
    """

    def __init__(
        self,
        sandbox: Sandbox,
        limits: ExecLimits,
        on_output: OutputSink,
        *,
        room: OutputRoom | None = None,
    ) -> None:
        self._sandbox = sandbox
        self._limits = limits
        self._on_output = on_output
        self._room = room
        """Asked before each read of a terminal: held while the owning console lags
        (issue 28 §3), as the agent's own commands are."""
        self._open: dict[str, Terminal] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._open)

    async def create(
        self,
        command: str,
        args: Sequence[str] | None,
        *,
        cwd: str | None,
        env: Mapping[str, str],
        output_limit: int | None,
    ) -> Terminal:
        """Start ``command`` (a shell line when it comes without ``args``)."""
        line = shlex.join([command, *args]) if args else command
        if not line.strip():
            raise BadRequest("terminal/create needs a command")
        workdir = self._workdir(cwd)
        limit = output_limit if output_limit is not None and output_limit >= 0 else None
        limits = dataclasses.replace(
            self._limits, output_limit=min(limit or DEFAULT_OUTPUT_LIMIT, DEFAULT_OUTPUT_LIMIT)
        )
        environ = {**minimal_env(limits), **env}
        terminal_id = f"term-{next(self._ids)}"
        holder: list[Terminal] = []

        def output(data: bytes) -> None:
            if holder:
                holder[0].take(data)
            self._on_output(terminal_id, data)

        process = await ExecProcess.start(
            line, cwd=workdir, limits=limits, on_output=output, env=environ, room=self._room
        )
        terminal = Terminal(terminal_id, line, process, limit or DEFAULT_OUTPUT_LIMIT)
        holder.append(terminal)
        self._open[terminal_id] = terminal
        return terminal

    def _workdir(self, cwd: str | None) -> Path:
        root = self._sandbox.root
        if cwd is None:
            return root
        workdir = self._sandbox.resolve(cwd)
        if not workdir.is_relative_to(root):
            raise FsDenied(f"cwd {cwd!r} is outside the agent's working directory")
        return workdir

    def get(self, terminal_id: str) -> Terminal:
        terminal = self._open.get(terminal_id)
        if terminal is None:
            raise BadRequest(f"no terminal {terminal_id!r} (never created, or released)")
        return terminal

    async def wait(self, terminal_id: str) -> ExecResult:
        terminal = self.get(terminal_id)
        if terminal.result is None:
            terminal.result = await terminal.process.wait()
        return terminal.result

    def kill(self, terminal_id: str) -> None:
        self.get(terminal_id).process.kill()

    async def release(self, terminal_id: str) -> None:
        terminal = self._open.pop(terminal_id, None)
        if terminal is None:
            return
        if not terminal.process.done:
            terminal.process.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(terminal.process.wait(), 5.0)

    def interrupt_all(self) -> None:
        """SIGINT to every running command (an interrupt: they may clean up)."""
        for terminal in self._open.values():
            if not terminal.process.done:
                terminal.process.interrupt()

    async def close_all(self) -> None:
        """Kill and forget every terminal (the task ended, the runtime restarts, stop)."""
        for terminal_id in list(self._open):
            await self.release(terminal_id)
