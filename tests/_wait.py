"""The one way tests wait for a condition that has no event to wait on.

``wait_for`` blocks (sync tests, fixtures, helper threads); ``async_wait_for`` yields to
the running loop between tries (async tests) and also takes a predicate that returns an
awaitable, such as a Redis query. Both call ``predicate`` until it returns something
truthy and return that value; past ``timeout`` they fail the test with an
``AssertionError`` that names what was awaited. The predicate is tried once more after
the deadline, so a busy machine that oversleeps an interval never fails a wait that has
come true.

Poll only what offers no notification (files, another process, registry entries,
widgets that change on an app's own timers); where the code under test has an event, a
condition or a reader, wait on that instead.
"""

from __future__ import annotations

import asyncio
import inspect
import linecache
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast, overload

__all__ = ["DEFAULT_TIMEOUT_S", "INTERVAL_S", "async_wait_for", "wait_for"]

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
"""Long enough for 2 busy cores; a test that knows its bound passes its own."""
INTERVAL_S = 0.02
"""Between tries: short against the waits it serves, long enough not to spin a core."""

Errors = tuple[type[Exception], ...]


def wait_for(
    predicate: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT_S,
    message: str | None = None,
    *,
    interval: float = INTERVAL_S,
    ignore: Errors = (),
) -> T:
    """Block until ``predicate()`` is truthy and return it.

    Args:
        predicate: Called with no arguments until it returns a truthy value.
        timeout: Seconds before the wait fails the test.
        message: What is awaited, for the failure ("the task to end"); by default the
            predicate's name and source line.
        interval: Seconds between tries.
        ignore: Exceptions from ``predicate`` that mean "not yet" (a server still
            starting); on timeout the last one is chained to the failure.
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ignore as exc:
            last = exc
        if time.monotonic() > deadline:
            raise _timed_out(predicate, timeout, message) from last
        time.sleep(interval)


@overload
async def async_wait_for(
    predicate: Callable[[], Awaitable[T]],
    timeout: float = ...,
    message: str | None = ...,
    *,
    interval: float = ...,
    ignore: Errors = ...,
) -> T: ...
@overload
async def async_wait_for(
    predicate: Callable[[], T],
    timeout: float = ...,
    message: str | None = ...,
    *,
    interval: float = ...,
    ignore: Errors = ...,
) -> T: ...
async def async_wait_for(
    predicate: Callable[[], Any],
    timeout: float = DEFAULT_TIMEOUT_S,
    message: str | None = None,
    *,
    interval: float = INTERVAL_S,
    ignore: Errors = (),
) -> Any:
    """:func:`wait_for` for async tests: sleeps on the loop, awaits an awaitable result.

    An awaited try is itself bounded by what is left of ``timeout``, so a query that
    hangs fails the wait rather than the whole test run.
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = predicate()
            if inspect.isawaitable(value):
                scope = asyncio.timeout(max(deadline - time.monotonic(), interval))
                try:
                    async with scope:
                        value = await value
                except TimeoutError:
                    if not scope.expired():
                        raise  # the predicate's own, not this wait's deadline
                    raise _timed_out(predicate, timeout, message) from last
            if value:
                return value
        except ignore as exc:
            last = exc
        if time.monotonic() > deadline:
            raise _timed_out(predicate, timeout, message) from last
        await asyncio.sleep(interval)


def _timed_out(
    predicate: Callable[[], object], timeout: float, message: str | None
) -> AssertionError:
    return AssertionError(
        f"timed out after {timeout:g}s waiting for {message or _describe(predicate)}"
    )


def _describe(predicate: Callable[[], object]) -> str:
    """Name and source line of ``predicate``: a lambda's text says what it waited for."""
    code = getattr(predicate, "__code__", None)
    name = cast(str, getattr(predicate, "__qualname__", repr(predicate)))
    if code is None:
        return name
    source = linecache.getline(code.co_filename, code.co_firstlineno).strip()
    return f"{name} at {Path(code.co_filename).name}:{code.co_firstlineno}: {source}"
