"""What the work loop asks of whatever runs a task: the :class:`TaskRunner` protocol.

The loop owns everything around a task — the durable queue, the stall watch, the
acknowledgement, the upkeep between tasks — and hands each item to a runner with the
item's :class:`~ateam.agent.loop.control.TaskControl`. The runner streams and records
the task's work and says how it ended. ateam's own model-and-tools loop
(:class:`ateam.agent.native.runner.NativeRunner`) is one runner; a runner that drives
another program (a coding agent over a protocol of its own) plugs in beside it, chosen
by the composition root, without the loop knowing which it has.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ateam.agent.loop.control import TaskControl
from ateam.agent.state.queue_item import QueueItem, TaskIds
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.errors import Code

__all__ = ["HandOver", "TaskOutcome", "TaskRunner", "end_task"]


class HandOver(Exception):
    """Raised by a runner that switched the agent to a model another runner drives.

    The switch is made and recorded (the handoff is due); the task is not ended: the
    composition root's dispatcher hands the same item and control to the runner of
    ``model``, which goes on with it (``control.continuing``) without a second
    ``task.start``.
    """

    def __init__(self, model: str) -> None:
        super().__init__(model)
        self.model = model


@dataclass
class TaskOutcome:
    """How one task ended, as the loop records it."""

    ok: bool
    error: str | None
    """The one-line error (with its stable code) when ``ok`` is false."""
    text: str
    """The final answer."""
    tokens_in: int
    tokens_out: int
    iterations: int = 0
    """Model calls the task made."""
    code: str | None = None
    """The error's stable code (``provider.auth``, ``task.interrupted`` ...) when ``ok``
    is false."""


class TaskRunner(Protocol):
    """Runs one queued item to its end."""

    async def run(self, item: QueueItem, control: TaskControl) -> TaskOutcome:
        """Work ``item`` until it is answered, fails or ``control`` stops it.

        Raises only what ends the agent's work (a lost lock, a full disk); every other
        failure is an outcome with ``ok`` false.
        """
        ...


def end_task(
    events: EventPublisher,
    control: TaskControl,
    ids: TaskIds,
    *,
    started: float,
    error: str | None,
    text: str,
    tokens_in: int,
    tokens_out: int,
    iterations: int,
    scrub: Callable[[str], str],
    code: str | None = None,
) -> TaskOutcome:
    """How every runner ends a task: ``task.end`` emitted and the outcome returned.

    A task stopped from outside without an error of its own ends ``interrupted`` (or
    ``cancelled``, or the reason the stop gave); the error is masked, since it goes on
    to the queue file, the registry and the working context. ``started`` is the task's
    ``time.monotonic()`` at its start; ``code`` the error's stable code (``internal``
    when a runner gave an error without one).
    """
    if control.interrupted.is_set() and error is None:
        error = control.reason or ("cancelled" if control.hard else "interrupted")
        code = control.code or (Code.TASK_CANCELLED if control.hard else Code.TASK_INTERRUPTED)
    if error is not None:
        error = scrub(error)
        code = code or Code.INTERNAL
    else:
        code = None
    events.emit(
        EventType.TASK_END,
        ok=error is None,
        error=error,
        code=code,
        duration_s=round(time.monotonic() - started, 4),
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        iterations=iterations,
        **ids,
    )
    return TaskOutcome(error is None, error, text, tokens_in, tokens_out, iterations, code)
