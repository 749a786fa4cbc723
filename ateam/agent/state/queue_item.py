"""One queued prompt (:class:`QueueItem`) and the ids that order the queue.

The values the durable queue (:mod:`ateam.agent.state.queue`) writes and replays, apart
from the op log itself, so the many parts that read an item need not import the log.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict, TypeGuard

__all__ = ["QueueItem", "TaskIds", "is_int", "max_id", "next_queue_id"]

_ID_RE = re.compile(r"q-(\d+)-([0-9a-f]+)")
_COUNTER_MAX = 0xFFF

# --- ids ---------------------------------------------------------------------------------


def _parse_id(item_id: str) -> tuple[int, int] | None:
    match = _ID_RE.fullmatch(item_id)
    return (int(match[1]), int(match[2], 16)) if match else None


def next_queue_id(last_id: str | None, now: float) -> str:
    """The id following ``last_id`` at time ``now``: ``q-{unix_ms}-{counter:03x}``.

    Ids are strictly increasing as strings and as (ms, counter) pairs: when the clock
    stands still or goes back, the counter advances on top of the last id's millisecond.

    Args:
        last_id: the highest id issued so far, or ``None``.
        now: the current unix time in seconds.
    """
    now_ms = int(now * 1000)
    last = _parse_id(last_id) if last_id else None
    if last is None or now_ms > last[0]:
        return f"q-{now_ms}-{0:03x}"
    ms, counter = last
    if counter < _COUNTER_MAX:
        return f"q-{ms}-{counter + 1:03x}"
    # A fourth hex digit would sort before "fff" as a string, so borrow the next millisecond.
    return f"q-{ms + 1}-{0:03x}"


def max_id(current: str | None, candidate: str) -> str | None:
    """The higher of two queue ids; ``current`` when ``candidate`` is not an id."""
    parsed = _parse_id(candidate)
    if parsed is None:
        return current
    if current is None or parsed > (_parse_id(current) or (-1, -1)):
        return candidate
    return current


# --- values ------------------------------------------------------------------------------


class TaskIds(TypedDict, total=False):
    """The ids every event about a task carries (none for work outside a task)."""

    task_id: str
    trace_id: str | None


@dataclass
class QueueItem:
    """One prompt waiting for, or undergoing, processing."""

    id: str
    """``q-{unix_ms}-{counter:03x}``, strictly increasing (see :func:`next_queue_id`)."""
    text: str
    """The prompt."""
    source: str
    """Where it came from: ``console``, ``local``, ``cli``, ..."""
    enqueued_at: float
    """Unix time of the append."""
    priority: int = 0
    """Reserved: higher is taken first; FIFO among equal priorities."""
    rid: str | None = None
    """The RPC request id that created it, so a retried ``input`` is not enqueued twice."""
    caller: str | None = None
    """Who sent it (the RPC caller)."""
    trace_id: str | None = None
    """Correlates the item's events across processes."""
    attempts: int = 0
    """How many times processing started."""
    hops: int = 0
    """How many agent-to-agent steps brought it here (``team.send``): 0 for input from a
    person or script. A ``team.send`` made while working on it carries ``hops + 1``."""
    kills: int = 0
    """How many times the process was killed from outside (SIGKILL, SIGTERM that could not
    finish) while this item was in progress: not held against it as crashes are."""
    reply_to: str | None = None
    """The teammate (``PROJECT/NAME``) that sent it with ``reply: true``: its final answer,
    or its error, goes back to that agent before the item is marked done."""

    def to_dict(self) -> dict[str, Any]:
        """The item as a JSON-ready dict."""
        # Spelled out rather than dataclasses.asdict(), which deep-copies: this runs on
        # every append, whose latency budget is a raw write + fsync (SPEC §13).
        return {
            "id": self.id,
            "text": self.text,
            "source": self.source,
            "enqueued_at": self.enqueued_at,
            "priority": self.priority,
            "rid": self.rid,
            "caller": self.caller,
            "trace_id": self.trace_id,
            "attempts": self.attempts,
            "kills": self.kills,
            "hops": self.hops,
            # Only when set: most items are not awaited, and every append is fsynced.
            **({"reply_to": self.reply_to} if self.reply_to is not None else {}),
        }

    def ids(self) -> TaskIds:
        """The ids the item's events carry."""
        return {"task_id": self.id, "trace_id": self.trace_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueueItem:
        """Rebuild an item from :meth:`to_dict` output, ignoring unknown keys.

        Raises:
            TypeError: a required field is missing.
            ValueError: a field has the wrong type.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        item = cls(**{key: value for key, value in data.items() if key in known})
        if not all(isinstance(v, str) for v in (item.id, item.text, item.source)):
            raise ValueError("queue item: id, text and source must be strings")
        if not all(is_int(v) for v in (item.priority, item.attempts, item.kills, item.hops)):
            raise ValueError("queue item: priority, attempts, kills and hops must be integers")
        if not (is_int(item.enqueued_at) or isinstance(item.enqueued_at, float)):
            raise ValueError("queue item: enqueued_at must be a number")
        # The rid is a dict key once loaded: a list there would fail open() as a TypeError.
        optional = (item.rid, item.caller, item.trace_id, item.reply_to)
        if not all(v is None or isinstance(v, str) for v in optional):
            raise ValueError("queue item: rid, caller, trace_id, reply_to: strings or null")
        return item


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool (JSON true must not pass for a count)."""
    return isinstance(value, int) and not isinstance(value, bool)
