"""Exponential backoff with jitter for every reconnecting loop (SPEC §4.6)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ateam.constants import BACKOFF_INITIAL_S, BACKOFF_JITTER, BACKOFF_MAX_S, BACKOFF_WARN_AFTER

CONNECTION_ERRORS: tuple[type[BaseException], ...]
"""What "Redis went away" looks like from redis-py and the OS.

Besides a lost link: a server still loading its data, and the passing states of a
Cluster or a Sentinel-watched master (issue 13). ``CLUSTERDOWN`` (a master failed and
its replica is not promoted yet, or a slot is being reassigned), ``MASTERDOWN``,
``TRYAGAIN`` (a multi-key command during a slot migration), redis-py's "TTL exhausted"
after too many redirections, and a Sentinel naming no master during a failover
(``MasterNotFoundError``, a ``ConnectionError``) all pass by waiting: they are retried
with backoff, never taken for a refusal or a crash. A cluster with no reachable node or
uncovered slots reaches ateam as a ``ConnectionError`` too (see
:class:`ateam.bus.cluster.ClusterUnavailable`).
"""

try:
    from redis.exceptions import BusyLoadingError, ClusterError, TryAgainError
    from redis.exceptions import ConnectionError as _RedisConnectionError
    from redis.exceptions import TimeoutError as _RedisTimeoutError

    CONNECTION_ERRORS = (
        _RedisConnectionError,
        _RedisTimeoutError,
        BusyLoadingError,
        ClusterError,  # ClusterDownError, MasterDownError, "TTL exhausted"
        TryAgainError,
        ConnectionError,
        OSError,
    )
except ImportError:  # pragma: no cover - redis is a hard dependency
    CONNECTION_ERRORS = (ConnectionError, OSError)


@dataclass(eq=False)
class Backoff:
    """250 ms doubling to 5 s with ±25 % jitter; counts consecutive failures."""

    initial: float = BACKOFF_INITIAL_S
    maximum: float = BACKOFF_MAX_S
    jitter: float = BACKOFF_JITTER
    warn_after: int = BACKOFF_WARN_AFTER
    failures: int = 0

    def next_delay(self) -> float:
        """Record one more failure and return how long to wait before retrying."""
        self.failures += 1
        base = min(self.maximum, self.initial * (2 ** (self.failures - 1)))
        return float(base * (1 + random.uniform(-self.jitter, self.jitter)))

    @property
    def should_warn(self) -> bool:
        """True exactly once per outage, when the failure count reaches the threshold."""
        return self.failures == self.warn_after

    def reset(self) -> None:
        self.failures = 0
