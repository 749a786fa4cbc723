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

import bisect
import builtins
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from ateam.constants import DISCONNECTED_SHOWN_S
from ateam.wire.registry import AgentEntry, AgentStatus

__all__ = ["ENTRY_CONTAINERS", "EntryCache", "Patch", "in_id_order"]

_SHOWN_MS = DISCONNECTED_SHOWN_S * 1000
_Shown = tuple[builtins.list[bytes], builtins.list[AgentEntry]]
"""A project's ids of valid entries in id order, and those entries."""
ENTRY_CONTAINERS = 4
"""What the cycle collector tracks of a decoded entry: the model, its ``__dict__``, its
set of fields set and its ``damage`` list."""


@dataclass(frozen=True, eq=False)
class Patch:
    """What a project's change log named since its hash was last read: the entries of
    those agents as just read (``None``: the entry is gone), to lay over the cached ones."""

    changed: dict[bytes, bytes | None]


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
        self._shown: dict[str, _Shown] = {}
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

    def since(self, project: str) -> bytes | None:
        """The change-log version the cached hash of ``project`` is current at."""
        seen = self._versions.get(project)
        return seen[1] if seen is not None else None

    def patchable(self, project: str, log: Sequence[bytes | None], floor: object) -> bool:
        """Whether the changes noted since the cached read bring ``project`` up to ``log``
        (:class:`Patch`): the same epoch, no change trimmed from the log unseen (``floor``,
        read after the changes were), and the resync not due."""
        seen = self._versions.get(project)
        epoch, ver = log
        if floor is None:
            trimmed = 0  # nothing trimmed yet
        elif isinstance(floor, bytes) and floor.isdigit():
            trimmed = int(floor)
        else:  # an error reply, or a foreign writer's field
            return False
        return (
            seen is not None
            and epoch == seen[0]
            and ver is not None
            and trimmed <= int(seen[1])
            and time.monotonic() - seen[2] < self._resync_s
        )

    def rows(
        self,
        project: str,
        entries: Mapping[bytes, bytes] | Patch | None,
        log: Sequence[bytes | None],
        beats: Mapping[bytes, bytes],
        now_ms: int,
        views: builtins.list[AgentStatus],
        expired: builtins.list[bytes],
    ) -> None:
        """Append ``project``'s agents to ``views`` in id order; ids gone too long to
        ``expired``.

        ``entries`` is the project's registry hash as just read after ``log``, the
        entries the log named since the last read (:meth:`patchable`), or None if
        :meth:`holds` said the last one read is current. Only the entries of this
        listing are kept afterwards: the cache is bounded by the team, not by its
        history.
        """
        if entries is None:
            ids, shown = self._current(project, self._raws[project])
        elif isinstance(entries, Patch):
            epoch, ver = log
            assert epoch is not None and ver is not None  # as patchable() found them
            read_at = self._versions[project][2]  # the resync counts from a whole read
            self._versions[project] = (epoch, ver, read_at)
            ids, shown = self._patched(project, entries.changed)
        else:
            epoch, ver = log
            if epoch is not None and ver is not None:
                self._versions[project] = (epoch, ver, time.monotonic())
            else:
                self._versions.pop(project, None)
            ids, shown = self._current(project, dict(entries))
        shown_ms, get, make, add = _SHOWN_MS, beats.get, AgentStatus, views.append
        for raw_id, entry in zip(ids, shown, strict=True):
            age_ms = now_ms - int(get(raw_id, 0))
            if age_ms > shown_ms:
                expired.append(raw_id)
            else:
                add(make(entry, age_ms / 1000 if age_ms > 0 else 0.0))

    def _current(self, project: str, raws: dict[bytes, bytes]) -> _Shown:
        """The shown lists of ``project`` for its hash ``raws``, as just read (or kept)."""
        old_raws = self._raws.get(project)
        if old_raws is raws or old_raws == raws:
            # Nothing written since the last listing (the usual case: an agent writes its
            # entry when its state changes, not when it beats): one comparison in C.
            return self._shown[project]
        old_entries = self._entries.get(project, {})
        prefix = f"{project}/"
        decoded: dict[bytes, AgentEntry | None] = {}
        fresh = 0
        for raw_id, raw in raws.items():
            if old_raws is not None and old_raws.get(raw_id) == raw:
                decoded[raw_id] = old_entries[raw_id]
            else:
                decoded[raw_id] = _decode(raw, raw_id, prefix)
                fresh += 1
        self.made += fresh * ENTRY_CONTAINERS
        same_ids = old_raws is not None and old_raws.keys() == raws.keys()
        return self._rebuilt(project, raws, decoded, same_ids)

    def _patched(self, project: str, changed: Mapping[bytes, bytes | None]) -> _Shown:
        """The shown lists of ``project`` with ``changed`` laid over its cached hash: only
        those entries are decoded, and while no agent came, went, or turned valid or
        invalid, each new entry takes its old one's place (no list of 10 000 rebuilt)."""
        raws, decoded = dict(self._raws[project]), dict(self._entries[project])
        prefix = f"{project}/"
        swaps: builtins.list[tuple[bytes, AgentEntry]] = []
        same_ids = same_rows = True
        for raw_id, raw in changed.items():
            before = raws.get(raw_id)
            if raw == before:
                continue
            old_entry = decoded.get(raw_id)
            if raw is None:
                del raws[raw_id], decoded[raw_id]
                same_ids = same_rows = False
                continue
            raws[raw_id] = raw
            entry = decoded[raw_id] = _decode(raw, raw_id, prefix)
            self.made += ENTRY_CONTAINERS
            if before is None:
                same_ids = same_rows = False
            elif entry is None or old_entry is None:
                same_rows = False
            else:
                swaps.append((raw_id, entry))
        if not same_rows:
            return self._rebuilt(project, raws, decoded, same_ids)
        self._raws[project], self._entries[project] = raws, decoded
        ids, shown = self._shown[project]
        shown = builtins.list(shown)  # the last listing's stays as it was
        for raw_id, entry in swaps:
            shown[bisect.bisect_left(ids, raw_id)] = entry
        self._shown[project] = ids, shown
        return ids, shown

    def _rebuilt(
        self,
        project: str,
        raws: dict[bytes, bytes],
        decoded: dict[bytes, AgentEntry | None],
        same_ids: bool,
    ) -> _Shown:
        """Keep ``raws`` and ``decoded`` as ``project``'s and build its shown lists anew."""
        order = self._order[project] if same_ids else sorted(raws)
        self._raws[project] = raws
        self._entries[project] = decoded
        self._order[project] = order
        valid = [(raw_id, e) for raw_id in order if (e := decoded[raw_id]) is not None]
        shown = [raw_id for raw_id, _ in valid], [e for _, e in valid]
        self._shown[project] = shown
        return shown

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
