"""What ``state/agent.log`` and ``ps`` say about each task: its start, its end, its error.

The log is the agent's stderr (the supervisor appends it to ``state/agent.log``, the
path ``ateam up`` prints), masked by the redactor like every line. Each task gets one
line when it starts and one when it ends — with its stable error code and message when
it failed — so an agent whose every task fails says so where people look, not only in
events that scroll away. A failure also raises the ``task.failed`` alert ``ps`` shows
(:attr:`~ateam.agent.loop.status.Alert.TASK`) and fills the entry's ``failure``; the
next task that succeeds clears both. A task a person interrupted or cancelled did not
fail: it is logged, and the alert stays as it was.
"""

from __future__ import annotations

import logging
import time

from ateam.agent.loop.status import AgentStatus, Alert
from ateam.agent.loop.task import TaskOutcome
from ateam.agent.state.queue_item import QueueItem
from ateam.errors import Code
from ateam.wire.results import TaskFailure

__all__ = ["failure_message", "task_ended", "task_put_back", "task_started"]

log = logging.getLogger("ateam.agent.tasks")

STOPPED = frozenset({Code.TASK_INTERRUPTED, Code.TASK_CANCELLED})
"""Codes of a task a person stopped: an end, not a failure."""
TEXT_SHOWN = 80
"""Characters of a task's input the start line quotes."""
MESSAGE_SHOWN = 300
"""Characters of an error message a line or the alert quotes."""


def task_started(item: QueueItem) -> None:
    log.info(
        "task %s started (from %s, attempt %d): %s",
        item.id,
        item.source,
        item.attempts,
        _clip(item.text, TEXT_SHOWN),
    )


def task_ended(status: AgentStatus, item: QueueItem, outcome: TaskOutcome, seconds: float) -> None:
    """Log the end of ``item`` and show (or clear) its failure in ``ps``."""
    if outcome.ok:
        log.info(
            "task %s done in %.1f s (model calls: %d, tokens in/out: %d/%d)",
            item.id,
            seconds,
            outcome.iterations,
            outcome.tokens_in,
            outcome.tokens_out,
        )
        status.entry.failure = None
        status.alert(Alert.TASK, None)
        status.touch()
        return
    code = outcome.code or Code.INTERNAL
    message = failure_message(outcome.error or "", code)
    if code in STOPPED:
        log.info("task %s stopped [%s] after %.1f s: %s", item.id, code, seconds, message)
        return
    log.warning("task %s failed [%s] after %.1f s: %s", item.id, code, seconds, message)
    status.entry.failure = TaskFailure(task_id=item.id, code=code, message=message, at=time.time())
    status.alert(Alert.TASK, f"{Code.TASK_FAILED}: {code}: {message}")
    status.touch()


def task_put_back(item: QueueItem, why: str) -> None:
    """``item`` did not end: it goes back to the head of the queue (a shutdown, a full disk)."""
    log.info("task %s put back in the queue, to run again: %s", item.id, why)


def failure_message(error: str, code: str) -> str:
    """``error`` without the ``error [code]: `` its one line starts with, on one line."""
    return _clip(error.removeprefix(f"error [{code}]: "), MESSAGE_SHOWN)


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
