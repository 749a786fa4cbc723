"""The stall watch: a busy worker that shows no progress is made visible, then moved on.

The worker runs everything it does — a task, the summary after it, a compaction, the
switch-back probe — as a *step* through :meth:`StallWatch.step`. A separate task samples
a progress counter (the agent's event offset: every token, tool output frame or state
change moves it) and, when a step has shown none for ``stall_after_s``, raises an alert;
after ``cancel_after_s`` it cancels the step so the worker takes the next item. A
watch that only reads a counter cannot itself hang on what hangs the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from ateam.errors import WorkerStalled

__all__ = ["Stall", "StallWatch"]

T = TypeVar("T")

CANCEL_GRACE_S = 5.0
"""How long a cooperative stop (the task's hard interrupt) gets before the step is
cancelled outright."""


@dataclass(frozen=True)
class Stall:
    """A step that has shown no progress."""

    step: str
    """What the worker was doing: ``task q-…``, ``summary``, ``compaction``, ``probe``."""
    idle_s: float
    """Seconds since the last progress."""
    cancelling: bool = False
    """Whether the watch is cancelling the step now (else it only alerts)."""

    def message(self) -> str:
        verb = "cancelling it" if self.cancelling else "still waiting"
        return f"worker stalled: no progress for {self.idle_s:.0f}s in {self.step}; {verb}"


@dataclass(eq=False)
class _Running:
    """A task being watched, and when it last made progress."""

    name: str
    task: asyncio.Task[object]
    stop: Callable[[], None] | None
    last_progress: float
    last_mark: int
    alerted: bool = False
    cancel_at: float | None = None
    """When the watch asked the step to stop (monotonic); it is cancelled after the grace."""


class StallWatch:
    """Watches the worker's steps; owned by the agent, closed with :meth:`aclose`.

    Args:
        progress: a counter that moves whenever the agent shows progress.
        paused: ``True`` while a wait is legitimate (a person must answer an approval):
            such time never counts as a stall.
        alert: told when a step stalls (and again when it is being cancelled).
        clear: told when a stalled step ended or moved again.
        stall_after_s: silence before the alert.
        cancel_after_s: silence before the step is cancelled; ``0`` never cancels.
    """

    def __init__(
        self,
        *,
        progress: Callable[[], int],
        paused: Callable[[], bool],
        alert: Callable[[Stall], None],
        clear: Callable[[], None],
        stall_after_s: float,
        cancel_after_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._progress = progress
        self._paused = paused
        self._alert = alert
        self._clear = clear
        self.stall_after_s = stall_after_s
        self.cancel_after_s = cancel_after_s
        self._clock = clock
        self._running: _Running | None = None
        self._task: asyncio.Task[None] | None = None
        self.alerts = 0
        """Stalls alerted since start (for status and tests)."""

    @property
    def current(self) -> str | None:
        """The step the worker is in, if any."""
        return self._running.name if self._running else None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="stall-watch")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def step(
        self, name: str, work: Awaitable[T], *, stop: Callable[[], None] | None = None
    ) -> T:
        """Run one worker step under the watch.

        Args:
            name: what the step is, for the alert.
            work: the step.
            stop: a cooperative way to end the step (a task's hard interrupt, which
                still ends it with ``task.end``); without it the step is cancelled.

        Raises:
            WorkerStalled: the watch cancelled the step.
        """
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        running = _Running(name, task, stop, self._clock(), self._progress())
        self._running = running
        try:
            # shield: a cancel aimed at the worker must reach the step, and one aimed at
            # the step (by this watch) must not be mistaken for the worker's.
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled() and running.cancel_at is not None:
                raise WorkerStalled(
                    f"{name} made no progress for {self._idle(running):.0f}s and was cancelled",
                    detail={"step": name},
                ) from None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise
        finally:
            self._running = None
            if running.alerted:
                self._clear()

    def _idle(self, running: _Running) -> float:
        return self._clock() - running.last_progress

    async def _watch(self) -> None:
        interval = max(0.05, min(1.0, self.stall_after_s / 4))
        while True:
            await asyncio.sleep(interval)
            running = self._running
            if running is not None and not running.task.done():
                self.check(running)

    def check(self, running: _Running) -> None:
        """One look at the running step (the watch loop calls this every interval)."""
        now = self._clock()
        mark = self._progress()
        if mark != running.last_mark or self._paused():
            running.last_mark = mark
            running.last_progress = now
            if running.alerted and running.cancel_at is None:
                running.alerted = False
                self._clear()
            return
        idle = now - running.last_progress
        if running.cancel_at is not None:
            if now - running.cancel_at >= CANCEL_GRACE_S:
                running.task.cancel()  # the cooperative stop did not end it
            return
        cancel = self.cancel_after_s > 0 and idle >= self.cancel_after_s
        if cancel:
            running.cancel_at = now
            self._say(running, Stall(running.name, idle, cancelling=True))
            if running.stop is not None:
                running.stop()
            else:
                running.task.cancel()
        elif idle >= self.stall_after_s and not running.alerted:
            self._say(running, Stall(running.name, idle))

    def _say(self, running: _Running, stall: Stall) -> None:
        running.alerted = True
        self.alerts += 1
        self._alert(stall)
        # The alert is an event itself: it must not count as the step's progress.
        running.last_mark = self._progress()
