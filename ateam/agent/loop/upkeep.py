"""Bus upkeep: heartbeat, registry entry, instance lock, console owner, usage counts, board.

One loop (:meth:`BusUpkeep.maintain`) refreshes the lock, reads the owner, publishes the
registry entry and saves the usage counts every :data:`HEARTBEAT_INTERVAL_S`, or sooner
when the entry changed; after the heartbeat it reopens the project's board tasks whose
holders are gone (issue 12), at most once an interval. A second
(:meth:`BusUpkeep.lock_watch`) only watches the lock's local deadline, because on a
silent network partition a call can hang for as long as TCP takes to give up.
Knowing the owner and the bus, it also tells ``team.input`` who may come in: an external
runtime only when the owner allows it, a teammate only with its instance's identity.

A failed or hung call is retried, never taken for a lost lock (issue 13): the agent
stops only on evidence — another process holds the lock. While the lock cannot be
confirmed for longer than its TTL minus a margin, durable writes are refused (see
:class:`~ateam.agent.state.fence.WriteFence`) until Redis answers again. When Redis lost the
agent's state (a restart without persistence, a flush, an eviction), the lock is taken
again with a higher fence and the agent announces itself again as a new one would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ateam.agent.loop.status import AgentStatus
from ateam.agent.models.router import ModelRouter
from ateam.agent.state.fence import WriteFence
from ateam.agent.state.queue import DurableQueue
from ateam.agent.state.usage import UsageLedger
from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.board import TaskBoard
from ateam.bus.connection import bus_error
from ateam.bus.events import EventType
from ateam.bus.identity import proven
from ateam.bus.keys import Keys
from ateam.bus.lock import InstanceLock, Renewal
from ateam.bus.publisher import EventPublisher
from ateam.bus.registry import Heartbeat
from ateam.constants import (
    BACKOFF_WARN_AFTER,
    GRACE_MARKER_S,
    HEARTBEAT_INTERVAL_S,
    LOCK_SAFETY_MARGIN_S,
)
from ateam.errors import AteamError, Code, LockLost

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
        self.on_refused: Callable[[AteamError], None] | None = None
        """Told of a refusal waiting will not cure (set by the composition root)."""

    async def current_owner(self) -> tuple[str, str] | None:
        """The owning session and its token's SHA-256 (``OwnerClaim``), or None.

        Notices a change the moment it is read. Both fields in one HMGET: the RPC owner
        check runs this on every mutating call.
        """
        key = self._keys.owner(self._status.id)
        raw, digest, external, kind = await self._client.hmget(
            key, ["session", "token_sha256", "external", "kind"]
        )
        owner = raw.decode() if isinstance(raw, bytes) else None
        self.owner_allows_external = owner is None or external == b"1"
        if owner != self.owner:
            # The claim's kind lets a console fold a one-call claim's come and go.
            claim = kind.decode() if isinstance(kind, bytes) and owner is not None else None
            self._events.emit(EventType.OWNERSHIP, owner=owner, previous=self.owner, kind=claim)
            self.owner = owner
            self._status.entry.owner = owner
            self._status.touch()
        if owner is None:
            return None
        token_sha256 = digest.decode("ascii", "replace") if isinstance(digest, bytes) else ""
        return owner, token_sha256

    async def external_input_allowed(self) -> bool:
        """Whether an external runtime may queue input now (no owner, or one who allows it)."""
        await self.current_owner()  # read fresh: the owner may just have said no
        return self.owner_allows_external

    async def teammate_proven(self, agent_id: str, auth_sha256: str | None) -> bool:
        """Whether a request whose ``auth`` hashes to ``auth_sha256`` comes from the
        running agent ``agent_id``, as its heartbeat publishes it (:mod:`ateam.bus.identity`)."""
        return await proven(self._client, self._keys, agent_id, auth_sha256)

    async def maintain(self) -> None:
        """Heartbeat, lock refresh and owner watch, every 3 s or sooner on news.

        A failed round is retried with a short backoff rather than a whole interval
        later, so one dead pooled connection costs a fraction of a second.
        """
        status = self._status
        backoff = Backoff()
        wait = HEARTBEAT_INTERVAL_S
        changed = False
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the
            # cancel that shutdown sends, leaving this loop refreshing the lock forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await status.dirty.wait()
            if status.stop.is_set():
                return
            changed = changed or status.dirty.is_set()
            status.dirty.clear()
            self.save_usage()
            try:
                # Bounded: on a silent partition a call hangs until TCP gives up.
                async with asyncio.timeout(HEARTBEAT_INTERVAL_S):
                    changed = await self._keep_lock() or changed
                    await self.current_owner()
                    status.entry.queue_len = len(self._queue)
                    status.entry.fence = self._lock.fence
                    await self._heartbeat.beat(changed=changed)
            except LockLost as exc:
                status.lock_lost(str(exc))
                return
            except CONNECTION_ERRORS as exc:  # TimeoutError is an OSError
                log.warning("heartbeat failed: %s", exc or type(exc).__name__)
                wait = min(backoff.next_delay(), HEARTBEAT_INTERVAL_S)
                continue
            except RedisError as exc:
                # Refused, not unreachable (a full server, a replica after a failover, an
                # ACL): the loop must live on, or the agent would serve unlocked. A
                # permission will not come by waiting: that one stops the agent, finally.
                refusal = bus_error(exc)
                if refusal.code == Code.REDIS_NOPERM and self.on_refused is not None:
                    self.on_refused(refusal)
                    return
                log.warning("heartbeat refused: %s", refusal.message)
                with contextlib.suppress(Exception):
                    await self._client.connection_pool.disconnect()  # a READONLY link
                wait = min(backoff.next_delay(), HEARTBEAT_INTERVAL_S)
                continue
            changed = False
            backoff.reset()
            wait = HEARTBEAT_INTERVAL_S
            await self.reconcile_board()

    async def _keep_lock(self) -> bool:
        """Refresh the lock; True when Redis had lost it and the agent must re-announce."""
        renewal = await self._lock.refresh()
        self._events.fence_checked()  # a batch that doubted its fence may go now
        if renewal is Renewal.KEPT:
            return False
        agent, fence = self._status.id, self._lock.fence
        if renewal is Renewal.RETAKEN:
            message = (
                f"the instance lock of {agent} was gone from Redis (a restart without "
                "persistence, a flush, an eviction, or an outage longer than its TTL) and "
                f"nobody held it: taken again with fence {fence}"
            )
            # A Redis that lost the lock lost the registry with it: a fresh heartbeat
            # announces the agent (join, project set) as at start.
            # The same identity: the instance and its token are unchanged.
            self._heartbeat = Heartbeat(
                self._client, self._keys, self._status.entry, identity=self._heartbeat.identity
            )
        else:
            message = f"the fence counter of {agent} was gone or behind: fence {fence} issued"
        self._events.emit(EventType.WARN, msg=message, code="lock.retaken", fence=fence)
        return True

    def fence_doubted(self) -> None:
        """The event stream refused this agent's fence: check the lock at once."""
        self._status.touch()

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
        """Say when the lock may have lapsed and when it is confirmed again.

        Nothing stops here: while the lock is unconfirmed the write fence refuses
        durable writes, and the heartbeat loop keeps trying to confirm it (the proof of
        a loss, another holder, is what stops the agent).
        """
        lapsed = False
        while not self._status.stop.is_set():
            await asyncio.sleep(0.5)
            now = self._lock.expired_locally()
            if now and not lapsed:
                unconfirmed_s = self._lock.ttl_s - LOCK_SAFETY_MARGIN_S
                message = (
                    f"could not confirm the instance lock for {unconfirmed_s:g}s: durable "
                    "writes wait until Redis answers (the agent stops only if another "
                    "process holds the lock)"
                )
                log.warning("%s", message)
                self._events.emit(EventType.WARN, msg=message, code="lock.unconfirmed")
                self._status.touch()  # try again now, not at the next interval
            elif lapsed and not now:
                log.warning("instance lock confirmed again (fence %s)", self._lock.fence)
            lapsed = now

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
        if not self._usage_dirty or not self._write_fence.open:
            return  # kept dirty while the lock is unconfirmed, for the next try
        self._status.entry.usage = self._router.usage_view()
        # A failure keeps the counts in memory, dirty, for the next try.
        self._usage_dirty = not self._ledger.save_quietly(self._router.usage)

    async def restart_marker(self) -> None:
        """Tell the registry a restart follows, so ``ps`` shows it as restarting."""
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self._heartbeat.grace(GRACE_MARKER_S)
