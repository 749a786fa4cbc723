"""How a running task is stopped from outside: its :class:`TaskControl`.

The worker makes one per task and hands it to the task loop; an interrupt from a console,
the REPL, a signal, the stall watch or a lost lock reaches the model stream, the running
command and any open approval through it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from ateam.tools.approvals import Approvals

__all__ = ["Stoppable", "TaskControl", "cancel_quietly"]


class Stoppable(Protocol):
    """A running tool process as the loop can stop it (see :class:`ateam.tools.pty`)."""

    def interrupt(self) -> None: ...
    def kill(self) -> None: ...


@dataclass(eq=False)
class TaskControl:
    """How the outside world stops a running task."""

    interrupted: asyncio.Event = field(default_factory=asyncio.Event)
    hard: bool = False
    stream_task: asyncio.Task[None] | None = None
    tool_task: asyncio.Task[Any] | None = None
    process: Stoppable | None = None
    approvals: Approvals | None = None
    reason: str | None = None
    """Why the task was stopped, when neither a person's interrupt nor cancel did it."""
    code: str | None = None
    """The stable code of that reason (``worker.stalled``), for the task's end."""
    continuing: bool = False
    """The task was handed over from another runner mid-way (a switch between a native
    model and a coding agent): it has started already."""

    def interrupt(
        self, *, hard: bool = False, reason: str | None = None, code: str | None = None
    ) -> None:
        if reason is not None and self.reason is None:
            self.reason, self.code = reason, code
        self.interrupted.set()
        if self.approvals is not None:
            self.approvals.reject_all("interrupted" if not hard else "cancelled")
        if hard:
            self.hard = True
            # A hard cancel does not wait for the next chunk: stop the stream now, and
            # kill the running command's whole group.
            if self.stream_task is not None:
                self.stream_task.cancel()
            if self.process is not None:
                self.process.kill()
            elif self.tool_task is not None:
                self.tool_task.cancel()
        elif self.process is not None:
            self.process.interrupt()

    def track(self, process: Any) -> None:
        self.process = process
        # An interrupt that raced the start of the command still reaches it.
        if process is not None and self.interrupted.is_set():
            process.kill() if self.hard else process.interrupt()


async def cancel_quietly(task: asyncio.Task[Any] | None, *, grace: float = 2.0) -> None:
    """Cancel ``task`` and wait for it, but never longer than ``grace`` seconds."""
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.wait({task}, timeout=grace)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved
