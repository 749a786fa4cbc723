"""The agent's share of the session snapshot (issue 12 §4): keep ``~/.ateam/session.json`` fresh.

Every agent runs a :class:`SnapshotKeeper`, and on each host (and ``ATEAM_HOME``) one of
them holds the :class:`~ateam.bus.snapshot.WriterSeat`: every
:data:`~ateam.constants.SNAPSHOT_INTERVAL_S` the holder renews its term, rebuilds the
snapshot from the bus and writes the file if it changed; the others only try for the
seat, so a host of 200 agents builds one snapshot a second, not 200. A holder that dies
loses the seat when its term lapses, one that stops gives it up at once.

The snapshot is a courtesy to other tools: a Redis outage or a file that cannot be
written is logged (once per outage) and retried at the next tick, and never reaches the
agent's work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from ateam.agent.loop.control import cancel_quietly
from ateam.bus.keys import Keys
from ateam.bus.snapshot import SnapshotFile, SnapshotReader, WriterSeat
from ateam.constants import SNAPSHOT_INTERVAL_S, SNAPSHOT_WRITER_TTL_S

__all__ = ["SnapshotKeeper"]

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 0.5
"""How long a stopping agent spends on its last snapshot and giving up the seat."""
TICK_LIMIT_S = 10.0
"""A tick that takes longer (a frozen Redis) is abandoned, and the next one tries again."""


class SnapshotKeeper:
    """Writes the host's snapshot file while this agent holds the writer seat.

    Args:
        client: the agent's bus.
        keys: its key names.
        agent_id: the agent (``project/name``), named as the writer.
        project: the agent's project, shown even before its agents are registered.
        home: the ateam home whose ``session.json`` this keeps.
        bus: the bus as the document names it (a masked URL).
        interval_s: between ticks.
        ttl_s: the seat's term.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        *,
        agent_id: str,
        project: str,
        home: Path,
        bus: str,
        interval_s: float = SNAPSHOT_INTERVAL_S,
        ttl_s: float = SNAPSHOT_WRITER_TTL_S,
    ) -> None:
        self._project = project
        self._reader = SnapshotReader(client, keys, bus=bus)
        self._interval_s = interval_s
        self._seat_wait_s = max(interval_s, ttl_s * 2 / 3)
        self.file = SnapshotFile(home)
        self.seat = WriterSeat(client, keys, home, holder=agent_id, ttl_s=ttl_s)
        self._writer: dict[str, Any] = {
            "agent": agent_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._mark: object = None
        """The mark of the last snapshot written (see :attr:`Snapshot.mark`)."""
        self.writes = 0
        """How many times this keeper wrote ``session.json`` (for tests and logs)."""

    def start(self) -> None:
        """Start the loop (once); :meth:`aclose` ends it."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="session-snapshot")

    async def aclose(self) -> None:
        """Stop the loop; a holder writes a last snapshot and gives the seat up.

        Called after the agent left the registry, so the last document no longer lists
        it. Bounded and silent: a stopping agent never waits on a dead bus for this.
        """
        await cancel_quietly(self._task)
        self._task = None
        if not self.seat.held:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await self.tick()
                await self.seat.release()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_LIMIT_S):
                    await self.tick()
            # The holder rebuilds every interval; the others only need to notice that
            # the seat fell free, which takes a whole term anyway: with 200 agents on a
            # host, 199 of them cost one SET a term instead of one a second.
            await asyncio.sleep(self._interval_s if self.seat.held else self._seat_wait_s)

    async def tick(self) -> bool:
        """Renew or try for the seat; as the holder, rebuild and write if changed.

        Returns whether the file was written. Never raises (but cancellation).
        """
        try:
            if not await self.seat.claim():
                self._mark = None
                self._recovered()
                return False
            snapshot = await self._reader.read(also=(self._project,), writer=self._writer)
            day = datetime.fromtimestamp(snapshot.generated_at, UTC).date().isoformat()
            if snapshot.mark == self._mark and self.file.untouched(day):
                # Nothing new: rendering and comparing 10 000 agents would cost more
                # than reading what changed did (issue 28 §4).
                self._recovered()
                return False
            # fsync and rename block; on a busy disk that is milliseconds the agent's
            # loop (its token stream, its heartbeat) should not wait.
            written = await asyncio.to_thread(self.file.write, snapshot.to_json())
        except Exception as exc:
            if not self._failing:
                log.warning("session snapshot not refreshed (retrying each tick): %s", exc)
            self._failing = True
            return False
        self._recovered()
        self._mark = snapshot.mark
        if written:
            self.writes += 1
        return written

    def _recovered(self) -> None:
        if self._failing:
            log.info("session snapshot refreshing again")
            self._failing = False
