"""Bus upkeep: heartbeat, registry entry, instance lock, console owner, usage counts, board.

One loop (:meth:`BusUpkeep.maintain`) refreshes the lock, reads the owner, publishes the
registry entry and saves the usage counts every :data:`HEARTBEAT_INTERVAL_S`, or sooner
when the entry changed; after the heartbeat it reopens the project's board tasks whose
holders are gone (issue 12), at most once an interval. A second
(:meth:`BusUpkeep.lock_watch`) only watches the lock's local deadline, because on a
silent network partition the first can hang in a call for as long as TCP takes to give
up, and an agent whose lock may have lapsed must stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ateam.agent.fence import WriteFence
from ateam.agent.queue import DurableQueue
from ateam.agent.router import ModelRouter
from ateam.agent.status import AgentStatus
from ateam.agent.usage import UsageLedger
from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.board import TaskBoard
from ateam.bus.events import EventType
from ateam.bus.keys import Keys
from ateam.bus.lock import InstanceLock
from ateam.bus.publisher import EventPublisher
from ateam.bus.registry import Heartbeat
from ateam.constants import BACKOFF_WARN_AFTER, GRACE_MARKER_S, HEARTBEAT_INTERVAL_S
from ateam.errors import AteamError, LockLost

__all__ = ["BusUpkeep"]

log = logging.getLogger(__name__)


class BusUpkeep:
    """Keeps the agent's presence on the bus current, and notices when it is lost."""

    def __init__(
        self,
        *,
        client: aioredis.Redis,
        keys: Keys,
        lock: InstanceLock,
        heartbeat: Heartbeat,
        status: AgentStatus,
        events: EventPublisher,
        queue: DurableQueue,
        router: ModelRouter,
        ledger: UsageLedger,
        write_fence: WriteFence,
        board: TaskBoard | None = None,
    ) -> None:
        self._client = client
        self._keys = keys
        self._lock = lock
        self._heartbeat = heartbeat
        self._status = status
        self._events = events
        self._queue = queue
        self._router = router
        self._ledger = ledger
        self._write_fence = write_fence
        self._board = board
        self._reconciled_at = -HEARTBEAT_INTERVAL_S
        self._recheck: asyncio.TimerHandle | None = None
        self._rechecks: set[asyncio.Task[None]] = set()
        self.owner: str | None = None
        """The session that owns the agent's console, as last read."""
        self.owner_allows_external = True
        """Whether input from external runtimes (``mcp:``) is let in, as last read:
        always when nobody owns the agent, else only when the owner said so."""
        self.bus_connected = True
        self._usage_dirty = False

    async def current_owner(self) -> tuple[str, str] | None:
        """The owning session and its token's SHA-256 (``OwnerClaim``), or None.

        Notices a change the moment it is read. Both fields in one HMGET: the RPC owner
        check runs this on every mutating call.
        """
        key = self._keys.owner(self._status.id)
        raw, digest, external = await self._client.hmget(
            key, ["session", "token_sha256", "external"]
        )
        owner = raw.decode() if isinstance(raw, bytes) else None
        self.owner_allows_external = owner is None or external == b"1"
        if owner != self.owner:
            self._events.emit(EventType.OWNERSHIP, owner=owner, previous=self.owner)
            self.owner = owner
            self._status.entry.owner = owner
            self._status.touch()
        if owner is None:
            return None
        token_sha256 = digest.decode("ascii", "replace") if isinstance(digest, bytes) else ""
        return owner, token_sha256

    async def maintain(self) -> None:
        """Heartbeat, lock refresh and owner watch, every 3 s or sooner on news."""
        status = self._status
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the
            # cancel that shutdown sends, leaving this loop refreshing the lock forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HEARTBEAT_INTERVAL_S):
                    await status.dirty.wait()
            if status.stop.is_set():
                return
            changed = status.dirty.is_set()
            status.dirty.clear()
            self.save_usage()
            try:
                await self._lock.refresh()
                await self.current_owner()
                status.entry.queue_len = len(self._queue)
                status.entry.fence = self._lock.fence
                await self._heartbeat.beat(changed=changed)
            except LockLost as exc:
                status.lock_lost(str(exc))
                return
            except CONNECTION_ERRORS as exc:
                log.warning("heartbeat failed: %s", exc)
            else:
                await self.reconcile_board()
            if self._lock.expired_locally():
                status.lock_lost("could not refresh the instance lock before it expired")
                return

    async def reconcile_board(self) -> None:
        """Reopen the project's claimed tasks whose holders are gone; never raises.

        At most once per heartbeat interval, however often the entry changes; bounded
        by the interval, so a slow bus never holds up the next heartbeat for long. The
        agent's own claims are always spared, even if its heartbeat lapsed meanwhile.
        """
        now = time.monotonic()
        if self._board is None or now - self._reconciled_at < HEARTBEAT_INTERVAL_S:
            return
        await self._reconcile(now)

    async def _reconcile(self, now: float) -> None:
        assert self._board is not None
        self._reconciled_at = now
        entry = self._status.entry
        try:
            async with asyncio.timeout(HEARTBEAT_INTERVAL_S):
                reopened = await self._board.reconcile(entry.project, keep=(entry.id,))
        # The timeout and a dropped link (OSError), a refusal (RedisError), a bad record.
        except (OSError, RedisError, AteamError) as exc:
            log.warning("could not reconcile the task board of %s: %s", entry.project, exc)
            return
        for task in reopened:
            log.info("task %s back to open: %s", task.id, task.reason)
        due = self._board.next_loss_s.get(entry.project)
        if due is not None and self._recheck is None:
            # A holder stopped beating: look again the moment its heartbeat expires, so
            # its task is open within the heartbeat TTL, not an interval later.
            self._recheck = asyncio.get_running_loop().call_later(due + 0.05, self._recheck_now)

    def _recheck_now(self) -> None:
        self._recheck = None
        task = asyncio.create_task(self._reconcile(time.monotonic()), name="board-recheck")
        self._rechecks.add(task)
        task.add_done_callback(self._rechecks.discard)

    async def lock_watch(self) -> None:
        """Stop work when the lock may have lapsed, even if a Redis call hangs."""
        while not self._status.stop.is_set():
            await asyncio.sleep(0.5)
            if self._lock.expired_locally():
                self._status.lock_lost("could not refresh the instance lock before it expired")
                return

    def bus_changed(self, connected: bool, failures: int) -> None:
        """The event stream lost or regained Redis (``failures`` attempts so far)."""
        self.bus_connected = connected
        if not connected and failures == BACKOFF_WARN_AFTER:
            log.warning("Redis unreachable after %d attempts; still retrying", failures)
            # Buffered like every event: consoles see it once the bus is back.
            self._events.emit(
                EventType.WARN,
                msg=f"Redis was unreachable for {failures} consecutive attempts",
                code="redis.unavailable",
            )
        if connected and failures == 0:
            self._status.touch()

    def usage_changed(self) -> None:
        # Written by the maintenance loop within a heartbeat (3 s), after each task and
        # on shutdown, not after every model call: a kill -9 loses at most a heartbeat
        # of counts, and a busy tool loop does not fsync a file per call.
        self._usage_dirty = True

    def save_usage(self) -> None:
        """Persist the usage counts if they changed, and show them in the registry."""
        if not self._usage_dirty or self._write_fence.lost:
            return
        self._status.entry.usage = self._router.usage_view()
        # A failure keeps the counts in memory, dirty, for the next try.
        self._usage_dirty = not self._ledger.save_quietly(self._router.usage)

    async def restart_marker(self) -> None:
        """Tell the registry a restart follows, so ``ps`` shows it as restarting."""
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self._heartbeat.grace(GRACE_MARKER_S)
