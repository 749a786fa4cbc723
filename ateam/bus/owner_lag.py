"""Backpressure from the owning console (issue 28 §3): no byte of output lost to its owner.

tmux never drops a byte of a pane: when its client falls behind it stops reading the
pane, and the program blocks on its write. The same here, for the one console that owns
an agent (SPEC §4.3). The owner reports how far it has read (the ``read`` field of
``owner:{agent}``, written only with the owner's token: see
:meth:`~ateam.bus.ownership.Ownership.mark_read`); the agent counts what it published
since that offset (:class:`EmitLedger`, kept by the publisher) and, past a bound, stops
reading the command's terminal until the owner catches up (:class:`OwnerLag`).

Never for ever: no owner, an owner that never reported (a one-call claim, an older
console), a lapsed lease (a console killed with -9) or a link to Redis that fails all
mean no backpressure. Tails (read-only watchers) are never counted: they fall behind the
trimmed stream and are told so with a gap.

The bound is far below the stream's byte cap (at most half of it, checked when the
agent is built), and the count of entries behind is bounded at half the stream's length:
an owner that keeps within them never meets a trimmed entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from array import array

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.keys import Keys
from ateam.constants import (
    EVENT_LOG_MAX_BYTES,
    EVENT_LOG_MAXLEN,
    OWNER_LAG_POLL_S,
    OWNER_MARK_READ_TIMEOUT_S,
)

__all__ = ["READ_FIELD", "EmitLedger", "OwnerLag", "check_bound", "owner_lag"]

log = logging.getLogger(__name__)

_UNREADABLE: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, RedisError, TimeoutError)

_FIRST_RING = 64
"""Offsets the ledger's ring holds at first; it doubles as an agent publishes more."""

READ_FIELD = "read"
"""The field of ``owner:{agent}`` holding the offset its owner has read up to."""


class EmitLedger:
    """What this agent published, by offset: cumulative cost of the newest ``size``.

    Costs are counted as the stream's byte cap counts them (payload plus a per-entry
    overhead), so a lag in bytes is a share of that cap. One machine word per offset in
    a ring that grows as events come, up to ``size`` (80 KiB for the default stream
    length): an agent's weight barely moves, nor that of a process publishing for
    thousands of simulated agents.
    """

    def __init__(self, size: int) -> None:
        self._size = max(size, 1)
        self._cum = array("q", bytes(8 * min(self._size, _FIRST_RING)))
        self._first = 0
        """The first offset of the current run of consecutive offsets (0: none yet)."""
        self._last = 0
        self._base = 0
        """The total before ``_first``."""
        self.total = 0
        """Bytes counted since the process started."""

    @property
    def last(self) -> int:
        """The newest offset counted (0 before the first)."""
        return self._last

    def add(self, offset: int, cost: int) -> None:
        if self._first == 0 or offset != self._last + 1:
            # The first event, or offsets renumbered at start: a new run begins; what
            # came before it is counted in the total only.
            self._first, self._base = offset, self.total
        elif offset - self._first >= len(self._cum) < self._size:
            self._grow()
        self.total += cost
        self._cum[offset % len(self._cum)] = self.total
        self._last = offset

    def _grow(self) -> None:
        old, ring = self._cum, len(self._cum)
        self._cum = array("q", bytes(8 * min(2 * ring, self._size)))
        for offset in range(max(self._first, self._last - ring + 1), self._last + 1):
            self._cum[offset % len(self._cum)] = old[offset % ring]

    def since(self, mark: int) -> tuple[int, int]:
        """Bytes and entries published after offset ``mark``."""
        if mark >= self._last or self._first == 0:
            return 0, 0
        entries, ring = self._last - mark, len(self._cum)
        oldest = max(self._first, self._last - ring + 1)
        if mark < self._first:
            return self.total - self._base, entries
        if mark < oldest:  # older than the ring remembers: at least what it holds
            return self.total - self._cum[oldest % ring], entries
        return self.total - self._cum[mark % ring], entries


def check_bound(bound_bytes: int, cap_bytes: int) -> None:
    """Refuse a bound an owner keeping within could still lose bytes under (the stream
    trims to 7/8 of its cap; half of it leaves room for a read's worth of overshoot)."""
    if bound_bytes > cap_bytes // 2:
        raise ValueError(
            f"owner_lag_bytes ({bound_bytes}) must be at most half the event stream's "
            f"byte cap ({cap_bytes}), or an owner within it could meet trimmed entries"
        )


class OwnerLag:
    """Whether the agent may read more of a command's output: its owner keeps up.

    :meth:`ready` is the cheap, synchronous check made before each read of the
    terminal: the lag behind the owner's last known mark. Halfway to the bound it starts
    reading the mark again in the background, so an owner that keeps up is rarely
    waited for; past the bound the reader stops and awaits :meth:`wait`, which polls the
    mark until the owner is back within the bound, or gone.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        agent: str,
        ledger: EmitLedger,
        *,
        bound_bytes: int,
        bound_entries: int,
        poll_s: float = OWNER_LAG_POLL_S,
    ) -> None:
        self._client = client
        self._key = keys.owner(agent)
        self._ledger = ledger
        self.bound_bytes = bound_bytes
        self.bound_entries = max(bound_entries, 1)
        self._poll_s = poll_s
        self._mark = 0
        """The offset lag is counted from: the owner's read mark, or, with no owner
        reporting, where the ledger stood when that was seen."""
        self._reading: asyncio.Task[None] | None = None
        self._read_at = -poll_s
        """When the mark was last asked for (monotonic): the owner reports at most every
        50 ms, so asking on every read of a flooding terminal would be wasted calls."""
        self.waits = 0
        """How many times the reader was held (for tests and benchmarks)."""

    def _within(self, share: int) -> bool:
        """Whether the lag is at most ``1/share`` of the bounds."""
        size, count = self._ledger.since(self._mark)
        return size * share <= self.bound_bytes and count * share <= self.bound_entries

    def ready(self) -> bool:
        """Whether the terminal may be read now (never blocks)."""
        if self._within(2):
            return True
        idle = self._reading is None or self._reading.done()
        if idle and time.monotonic() - self._read_at >= self._poll_s:
            self._reading = asyncio.get_running_loop().create_task(self._read_mark())
        return self._within(1)

    async def wait(self) -> None:
        """Return once the owner is back within the bound, has let go, or is gone."""
        self.waits += 1
        while True:
            await self._read_mark()
            if self._within(1):
                return
            await asyncio.sleep(self._poll_s)

    async def _read_mark(self) -> None:
        newest = self._ledger.last
        self._read_at = time.monotonic()
        mark = None
        try:
            # The client waits for ever on a server that accepts and never answers (a
            # partition, a frozen host): bounded here, or the command would stay held.
            async with asyncio.timeout(OWNER_MARK_READ_TIMEOUT_S):
                session, read = await self._client.hmget(self._key, ["session", READ_FIELD])
        except _UNREADABLE as exc:
            # Nobody can prove they are behind (Redis away, silent, or refusing: a key of
            # another type, an ACL): output flows, as it did before owners reported.
            log.debug("owner lag: the owner's mark could not be read (%s)", exc)
            session = read = None
        if session is not None and read is not None:
            with contextlib.suppress(ValueError):
                mark = int(read)
        # No owner, or one that does not report: free for another bound's worth, then
        # looked at again (one read per few MB of output).
        # A mark past what this process published (offsets that restarted lower, a
        # forged entry the owner's tail took, a caller's mistake) counts as "read up to
        # here": kept as it is, the lag would read 0 for good and never be asked again.
        self._mark = newest if mark is None else min(mark, newest)


def owner_lag(
    client: aioredis.Redis, keys: Keys, agent: str, ledger: EmitLedger, bound_bytes: int
) -> OwnerLag | None:
    """The agent's backpressure at ``bound_bytes`` over a stream of the default caps;
    None when it is off (a bound of 0)."""
    if bound_bytes <= 0:
        return None
    check_bound(bound_bytes, EVENT_LOG_MAX_BYTES)
    return OwnerLag(
        client,
        keys,
        agent,
        ledger,
        bound_bytes=bound_bytes,
        bound_entries=EVENT_LOG_MAXLEN // 2,
    )
