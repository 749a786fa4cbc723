"""An owner's read mark, reported to Redis as it reads (issue 28 §3).

The agent stops reading a command's terminal while its owning console lags too far
behind (:mod:`ateam.bus.owner_lag`); what it measures the lag from is the offset the
owner last reported here. Reports are small (one field of the owner's hash, written
only with the owner's token) and throttled: at most one per ``every_s``, and the newest
mark is always written in the end, so an owner that has read everything is never
taken for one still behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.constants import OWNER_READ_REPORT_S

__all__ = ["ReadReports"]

log = logging.getLogger(__name__)


class ReadReports:
    """Writes each agent's newest read mark with ``write`` (:meth:`AgentHandle.mark_read
    <ateam.client.agent.AgentHandle.mark_read>`).

    :meth:`note` never blocks: a background task writes what changed, waits
    ``every_s``, and writes again if a mark moved meanwhile, then ends. A failed write
    is retried after the interval (a held agent waits for exactly that mark).
    """

    def __init__(
        self,
        write: Callable[[str, int], Awaitable[bool]],
        *,
        every_s: float = OWNER_READ_REPORT_S,
    ) -> None:
        self._write = write
        self._every_s = every_s
        self._wanted: dict[str, int] = {}
        self._sent: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        """Reports written (for tests)."""

    def note(self, agent: str, offset: int | None) -> None:
        """The owner has read ``agent``'s events up to ``offset`` (None: nothing yet)."""
        if offset is None or self._sent.get(agent) == offset:
            return
        self._wanted[agent] = offset
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="read-marks")

    async def _run(self) -> None:
        while self._wanted:
            wanted, self._wanted = self._wanted, {}
            for agent, offset in wanted.items():
                try:
                    await self._write(agent, offset)
                except CONNECTION_ERRORS as exc:
                    log.debug("read mark of %s not reported (%s); retrying", agent, exc)
                    self._wanted.setdefault(agent, offset)
                except Exception as exc:
                    # A refusal (out of memory, an ACL, a script error) must not end the
                    # reporter: the mark it dropped could be the one a held agent waits for.
                    log.warning("read mark of %s not reported (%s); retrying", agent, exc)
                    self._wanted.setdefault(agent, offset)
                else:
                    self._sent[agent] = offset
                    self.written += 1
            await asyncio.sleep(self._every_s)

    async def aclose(self) -> None:
        self._wanted.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
