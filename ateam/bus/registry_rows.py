"""Turning a project's registry and heartbeat hashes into ``ps`` rows, fast (issue 28 §4).

``ps`` of 10 000 agents spent two thirds of its time here rather than in Redis: each
entry's 400 bytes hashed to find it among the entries decoded last time, an id check per
entry, a dataclass per entry, then a sort of them all. :class:`EntryCache` keeps the
decoded entries by agent id with the bytes they came from (a lookup hashes the short
id and compares the bytes, a memcmp), judges an entry once when its bytes change (a
foreign writer's is remembered as rejected, not decoded again), and :meth:`EntryCache.rows`
yields each project's agents already in id order (its ids sorted as bytes, which is
the order of the text), so a listing of well-named projects needs no sort at the end.

A warm listing does not even read the entries: :meth:`EntryCache.holds` says whether a
project's change log moved since its hash was read (4 MB at 10 000 agents, where the
beats are 0.3 MB), and the rows come from the two lists kept per project, ids and
entries in id order.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgpack

from ateam.constants import DISCONNECTED_SHOWN_S
from ateam.wire.registry import AgentEntry, AgentStatus

__all__ = ["ENTRY_CONTAINERS", "EntryCache", "in_id_order"]

_SHOWN_MS = DISCONNECTED_SHOWN_S * 1000
ENTRY_CONTAINERS = 4
"""What the cycle collector tracks of a decoded entry: the model, its ``__dict__``, its
set of fields set and its ``damage`` list."""


class EntryCache:
    """The entries of the last listing by project and agent id, with their bytes.

    Entries are shared between listings: read them, never set them (the agent writes a
    new entry when it changes, which this cache then decodes anew). The bytes and the
    entries sit in two maps rather than in a pair per agent: a map of bytes to bytes is
    not tracked by the cycle collector, and at 10 000 agents each object it tracks makes
    every full collection (tens of ms, the slowest listings) longer.
    """

    def __init__(self, resync_s: float) -> None:
        self.made = 0
        """Containers decoded since the owner last reported them (:func:`_gc.lasting`)."""
        self._resync_s = resync_s
        self._versions: dict[str, tuple[bytes, bytes, float]] = {}
        """Each project's change-log epoch and version when its hash was read, and when."""
        self._raws: dict[str, dict[bytes, bytes]] = {}
        self._entries: dict[str, dict[bytes, AgentEntry | None]] = {}
        """None: the bytes are not an entry of this project under this id."""
        self._order: dict[str, builtins.list[bytes]] = {}
        """Each project's ids, sorted: kept while the set of ids does not change."""
        self._shown: dict[str, tuple[builtins.list[bytes], builtins.list[AgentEntry]]] = {}
        """Each project's ids of entries (its own agents'), in id order, and the entries:
        a warm listing walks these two lists (two objects for the collector, not one
        pair per agent)."""

    def holds(self, project: str, log: Sequence[bytes | None]) -> bool:
        """Whether the hash of ``project`` read last is the current one: the change log's
        epoch and version (``log``, as just read) are those it was read at.

        Every writer of the hash notes the change after writing (see
        :mod:`ateam.bus.registry_log`); a write not yet noted is read at the next
        listing after its note. A project without a log (lost, or written by a foreign
        writer) is read every time, and every project at least each ``resync_s``.
        """
        seen = self._versions.get(project)
        epoch, ver = log
        return (
            seen is not None
            and epoch is not None
            and ver is not None
            and (epoch, ver) == seen[:2]
            and time.monotonic() - seen[2] < self._resync_s
        )

    def rows(
        self,
        project: str,
        entries: Mapping[bytes, bytes] | None,
        log: Sequence[bytes | None],
        beats: Mapping[bytes, bytes],
        now_ms: int,
        views: builtins.list[AgentStatus],
        expired: builtins.list[bytes],
    ) -> None:
        """Append ``project``'s agents to ``views`` in id order; ids gone too long to
        ``expired``.

        ``entries`` is the project's registry hash as just read after ``log``, or None
        if :meth:`holds` said the last one read is current. Only the entries of this
        listing are kept afterwards: the cache is bounded by the team, not by its
        history.
        """
        if entries is None:
            raws = self._raws[project]
        else:
            raws = dict(entries)
            epoch, ver = log
            if epoch is not None and ver is not None:
                self._versions[project] = (epoch, ver, time.monotonic())
            else:
                self._versions.pop(project, None)
        old_raws = self._raws.get(project)
        if old_raws is raws or old_raws == raws:
            # Nothing written since the last listing (the usual case: an agent writes its
            # entry when its state changes, not when it beats): one comparison in C.
            ids, shown = self._shown[project]
        else:
            decoded = self._decoded(project, raws, old_raws or {})
            same_ids = old_raws is not None and old_raws.keys() == raws.keys()
            order = self._order[project] if same_ids else sorted(raws)
            self._raws[project] = raws
            self._entries[project] = decoded
            self._order[project] = order
            valid = [(raw_id, e) for raw_id in order if (e := decoded[raw_id]) is not None]
            ids, shown = [raw_id for raw_id, _ in valid], [e for _, e in valid]
            self._shown[project] = ids, shown
        shown_ms, get, make, add = _SHOWN_MS, beats.get, AgentStatus, views.append
        for raw_id, entry in zip(ids, shown, strict=True):
            age_ms = now_ms - int(get(raw_id, 0))
            if age_ms > shown_ms:
                expired.append(raw_id)
            else:
                add(make(entry, age_ms / 1000 if age_ms > 0 else 0.0))

    def _decoded(
        self, project: str, raws: dict[bytes, bytes], old_raws: dict[bytes, bytes]
    ) -> dict[bytes, AgentEntry | None]:
        """``raws`` decoded, reusing the entries whose bytes did not change."""
        old_entries = self._entries.get(project, {})
        prefix = f"{project}/"
        decoded: dict[bytes, AgentEntry | None] = {}
        fresh = 0
        for raw_id, raw in raws.items():
            if old_raws.get(raw_id) == raw:
                decoded[raw_id] = old_entries[raw_id]
            else:
                decoded[raw_id] = _decode(raw, raw_id, prefix)
                fresh += 1
        self.made += fresh * ENTRY_CONTAINERS
        return decoded

    def keep_only(self, projects: Iterable[str]) -> None:
        """Forget the projects not listed now."""
        wanted = set(projects)
        maps: tuple[dict[str, Any], ...] = (
            self._raws,
            self._entries,
            self._order,
            self._shown,
            self._versions,
        )
        for held in maps:
            for project in [p for p in held if p not in wanted]:
                del held[project]


def _decode(raw: bytes, raw_id: bytes, prefix: str) -> AgentEntry | None:
    """The entry in ``raw`` if it is the one of agent ``raw_id`` of the project."""
    try:
        entry = AgentEntry.from_wire(msgpack.unpackb(raw, raw=False, strict_map_key=True))
    except Exception:  # not msgpack, not a map, not an entry: a foreign writer's
        return None
    good = entry.id == f"{prefix}{entry.name}" and entry.project == prefix[:-1]
    return entry if good and entry.id.encode() == raw_id else None


def in_id_order(projects: builtins.list[str]) -> builtins.list[str]:
    """``projects`` in the order that puts their agents in id order, project after
    project, or an empty list if there is none (a name with a ``/``, from a foreign
    writer): the caller sorts the views then.

    Every id of project ``p`` starts with ``p/``; without a ``/`` in the names no such
    prefix starts another, so the ids of two projects compare as their prefixes do.
    """
    if any("/" in name for name in projects):
        return []
    return sorted(projects, key=lambda name: f"{name}/")
