"""Exponential backoff with jitter for every reconnecting loop (SPEC §4.6)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ateam.constants import BACKOFF_INITIAL_S, BACKOFF_JITTER, BACKOFF_MAX_S, BACKOFF_WARN_AFTER

CONNECTION_ERRORS: tuple[type[BaseException], ...]
"""What "Redis went away" looks like from redis-py and the OS."""

try:
    from redis.exceptions import BusyLoadingError
    from redis.exceptions import ConnectionError as _RedisConnectionError
    from redis.exceptions import TimeoutError as _RedisTimeoutError

    CONNECTION_ERRORS = (
        _RedisConnectionError,
        _RedisTimeoutError,
        BusyLoadingError,
        ConnectionError,
        OSError,
    )
except ImportError:  # pragma: no cover - redis is a hard dependency
    CONNECTION_ERRORS = (ConnectionError, OSError)


@dataclass
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
