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

from dataclasses import dataclass
from typing import Protocol

from ateam.agent.loop.control import TaskControl
from ateam.agent.state.queue_item import QueueItem

__all__ = ["HandOver", "TaskOutcome", "TaskRunner"]


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


class TaskRunner(Protocol):
    """Runs one queued item to its end."""

    async def run(self, item: QueueItem, control: TaskControl) -> TaskOutcome:
        """Work ``item`` until it is answered, fails or ``control`` stops it.

        Raises only what ends the agent's work (a lost lock, a full disk); every other
        failure is an outcome with ``ok`` false.
        """
        ...
