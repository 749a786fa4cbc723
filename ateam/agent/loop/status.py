"""The agent's run status, shared by its parts: its state, registry entry, stop and task in hand.

States: INIT (config, lock) → REGISTERED (RPC served, heartbeat on) → IDLE ⇄ BUSY
(⇄ WAITING) → SHUTDOWN, and BLOCKED while the state directory cannot be written.

Every part that changes what ``ps`` shows, or that must stop the process, goes through
one :class:`AgentStatus`: a state change is always announced (a ``state`` event) and
published (the registry entry is marked dirty, and the next heartbeat carries it at once).

The entry's one ``alert`` text is made of standing alerts of several kinds (:class:`Alert`),
each set and cleared by its own part, so clearing one (a stall that ended) never
clears another (a model that cannot work, a task that failed).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from enum import StrEnum

from ateam._fs import Damage
from ateam.agent.loop.control import TaskControl
from ateam.agent.loop.watchdog import Stall
from ateam.agent.state.fence import WriteFence
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.exits import Exit
from ateam.wire.registry import AgentEntry

__all__ = ["DAMAGE_SHOWN", "AgentState", "AgentStatus", "Alert"]

log = logging.getLogger(__name__)

DAMAGE_SHOWN = 20
"""Damage reports the registry entry keeps (the newest); the log and events have them all."""


class AgentState(StrEnum):
    INIT = "init"
    REGISTERED = "registered"
    IDLE = "idle"
    BUSY = "busy"
    WAITING = "waiting"
    BLOCKED = "blocked"
    """The state directory cannot be written (a full disk): nothing is taken, the work
    stays queued, and the agent resumes by itself once a write succeeds."""
    SHUTDOWN = "shutdown"


class Alert(StrEnum):
    """The kinds of standing alert, in the order the ALERT cell shows them."""

    BLOCKED = "blocked"
    """The state directory cannot be written: nothing is taken until it can."""
    STALL = "stall"
    """A worker step shows no progress."""
    RUNTIME = "runtime"
    """The coding agent that is the model cannot work (missing, needs a login)."""
    MODEL = "model"
    """A model of the agent's route cannot work at all (no API key, no SDK)."""
    TASK = "task"
    """The last task failed; the next one that succeeds clears it."""


class AgentStatus:
    """What every part of a running agent reads and reports about it.

    Args:
        entry: The registry entry the heartbeat publishes.
        events: Where state changes and alerts are announced.
        write_fence: Closed for good when the instance lock is lost.
    """

    def __init__(self, entry: AgentEntry, events: EventPublisher, write_fence: WriteFence) -> None:
        self.entry = entry
        self._events = events
        self._write_fence = write_fence
        self.state = AgentState.INIT
        self.dirty = asyncio.Event()
        """The registry entry changed: the heartbeat publishes it without waiting."""
        self.stop = asyncio.Event()
        """Set once shutdown is requested; every loop of the agent ends on it."""
        self.exit_code = 0
        self.control: TaskControl | None = None
        """The running task's control; ``None`` between tasks."""
        self._alerts: dict[Alert, str] = {}

    @property
    def id(self) -> str:
        return self.entry.id

    def set(self, state: AgentState) -> None:
        """Move to ``state``, announce it and publish it; nothing leaves ``shutdown``.

        The worker may still be between two awaits of going idle (a hook, a notice) when
        the shutdown begins: its late ``idle`` must not show a stopping agent as ready.
        """
        if state == self.state or self.state is AgentState.SHUTDOWN:
            return
        self.state = state
        self.entry.state = state.value
        self._events.emit(EventType.STATE, state=state.value)
        self.dirty.set()

    def touch(self) -> None:
        """The registry entry changed: publish it with the next heartbeat, now."""
        self.dirty.set()

    def request_shutdown(self, code: int = 0) -> None:
        """Stop the process with ``code`` (the first request's code wins)."""
        if not self.stop.is_set():
            self.exit_code = code
            self.stop.set()

    def lock_lost(self, why: str) -> None:
        """Another process may own this identity now: write nothing more, stop at once."""
        if self.stop.is_set():
            return
        self._write_fence.mark_lost()  # from now on nothing of ours reaches the files
        log.error("stopping: %s", why)
        print(f"ateam agent {self.id}: stopping: {why}", file=sys.stderr)
        if self.control is not None:
            self.control.interrupt(hard=True)
        self.request_shutdown(Exit.LOCK_LOST)

    def fenced(self) -> None:
        """The event stream refused a write: a newer instance holds the lock."""
        self.lock_lost("another process holds the instance lock (fenced)")

    def approvals_changed(self, open_requests: int) -> None:
        """WAITING while an approval is open; back to BUSY (or IDLE) once none is."""
        if open_requests:
            self.set(AgentState.WAITING)
        elif self.state is AgentState.WAITING:
            self.set(AgentState.BUSY if self.control is not None else AgentState.IDLE)

    def runtime_mode(self, mode: str | None) -> None:
        """The coding agent's own mode changed (or it is no longer a coding agent)."""
        if mode != self.entry.runtime_mode:
            self.entry.runtime_mode = mode
            self.dirty.set()

    def alert(self, kind: Alert, message: str | None) -> None:
        """Raise (or, with ``None``, clear) the standing alert of ``kind``; ``ps`` shows
        every standing alert, in :class:`Alert` order."""
        if message is None:
            self._alerts.pop(kind, None)
        else:
            self._alerts[kind] = message
        shown = [self._alerts[k] for k in Alert if k in self._alerts]
        text = "; ".join(shown) if shown else None
        if text != self.entry.alert:
            self.entry.alert = text
            self.dirty.set()

    def alerting(self, kind: Alert) -> str | None:
        """The standing alert of ``kind``, if raised."""
        return self._alerts.get(kind)

    def runtime_alert(self, message: str | None) -> None:
        """A coding agent that cannot work (missing, needs a login), or no longer so."""
        self.alert(Alert.RUNTIME, message)

    def stalled(self, stall: Stall, item: QueueItem | None) -> None:
        """The stall watch saw a silent step: everyone sees it (events, ps, /ps)."""
        message = stall.message()
        log.warning("%s", message)
        self.alert(Alert.STALL, message)
        ids = {} if item is None else {"task_id": item.id, "trace_id": item.trace_id}
        self._events.emit(
            EventType.WARN,
            msg=message,
            code="worker.stalled",
            step=stall.step,
            idle_s=round(stall.idle_s, 1),
            cancelling=stall.cancelling,
            **ids,
        )
        self.dirty.set()

    def damaged(self, damage: Damage) -> None:
        """A damaged file was found: ``ps`` shows it (ALERT) until acknowledged."""
        shown = {"msg": damage.message(), **damage.fields()}
        self.entry.damage = [*self.entry.damage, shown][-DAMAGE_SHOWN:]
        self.dirty.set()

    def acknowledge(self) -> int:
        """Someone has seen the damage reports (``alert.ack``): clear them; how many."""
        count = len(self.entry.damage)
        if count:
            self.entry.damage = []
            self.dirty.set()
        return count

    def stall_cleared(self) -> None:
        self.alert(Alert.STALL, None)
