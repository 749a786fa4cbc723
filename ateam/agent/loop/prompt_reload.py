"""Reloading the system prompt files (SPEC §5.6): on SIGHUP, on request, and when they change.

A reload never happens mid-task: the prompt a task started with is the one it ends with.
Asked while the agent is busy, the reload is deferred (and announced once) and applied by
the worker as soon as the task ends.
"""

from __future__ import annotations

import asyncio
import logging

from ateam.agent.context.prompts import Prompts
from ateam.agent.loop.status import AgentState, AgentStatus
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.constants import PROMPT_POLL_S

__all__ = ["PromptReloader"]

log = logging.getLogger(__name__)


class PromptReloader:
    """Reloads the prompt files now when idle, after the current task when busy."""

    def __init__(self, prompts: Prompts, status: AgentStatus, events: EventPublisher) -> None:
        self._prompts = prompts
        self._status = status
        self._events = events
        self.pending = False
        """A reload was asked for during a task and waits for its end."""

    @property
    def prompts(self) -> Prompts:
        """The prompt it reloads (``prompt.*`` reads and edits it directly)."""
        return self._prompts

    def request(self, reason: str) -> bool:
        """Reload the prompt files; returns whether it happened now (else after the task)."""
        if self._status.state in (AgentState.BUSY, AgentState.WAITING):
            if self.pending:
                return False  # already queued: the 1 s poll must not repeat the notice
            self.pending = True
            self._events.emit(
                EventType.PROMPT,
                action="reload_deferred",
                reason=reason,
                version=self._prompts.version,
            )
            return False
        self.apply(reason)
        return True

    def apply_pending(self, reason: str) -> None:
        """Apply a deferred reload, if one waits."""
        if self.pending:
            self.apply(reason)

    def apply(self, reason: str) -> None:
        self.pending = False
        result = self._prompts.reload()
        if result.refused:
            self._events.emit(EventType.WARN, msg=result.refused, code="prompt.protected_violation")
        self._events.emit(
            EventType.PROMPT,
            action="reloaded",
            reason=reason,
            changed=result.changed,
            version=self._prompts.version,
        )

    def changed(self, reason: str) -> None:
        """The overlay was edited through ateam (``# text``, ``/sys edit``)."""
        self._events.emit(
            EventType.PROMPT, action="updated", reason=reason, version=self._prompts.version
        )

    async def watch(self) -> None:
        """Poll the prompt files' mtimes every second until the agent stops."""
        while not self._status.stop.is_set():
            await asyncio.sleep(PROMPT_POLL_S)
            try:
                if self._prompts.changed_on_disk():
                    self.request("file changed")
            except OSError as exc:
                log.warning("prompt poll failed: %s", exc)
