"""Turning a project's registry and heartbeat hashes into ``ps`` rows, fast (issue 28 §4).

``ps`` of 10 000 agents spent two thirds of its time here rather than in Redis: each
entry's 400 bytes hashed to find it among the entries decoded last time, an id check per
entry, a dataclass per entry, then a sort of them all. :class:`EntryCache` keeps the
decoded entries by agent id with the bytes they came from (a lookup hashes the short
id and compares the bytes, a memcmp), judges an entry once when its bytes change (a
foreign writer's is remembered as rejected, not decoded again), and :func:`read_rows`
yields each project's agents already in id order (its ids sorted as bytes, which is
the order of the text), so a listing of well-named projects needs no sort at the end.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping

import msgpack

from ateam.constants import DISCONNECTED_SHOWN_S
from ateam.wire.registry import AgentEntry, AgentStatus

__all__ = ["EntryCache", "in_id_order"]

_SHOWN_MS = DISCONNECTED_SHOWN_S * 1000


class EntryCache:
    """The entries of the last listing by project and agent id, with their bytes.

    Entries are shared between listings: read them, never set them (the agent writes a
    new entry when it changes, which this cache then decodes anew). The bytes and the
    entries sit in two maps rather than in a pair per agent: a map of bytes to bytes is
    not tracked by the cycle collector, and at 10 000 agents each object it tracks makes
    every full collection (tens of ms, the slowest listings) longer.
    """

    def __init__(self) -> None:
        self._raws: dict[str, dict[bytes, bytes]] = {}
        self._entries: dict[str, dict[bytes, AgentEntry | None]] = {}
        """None: the bytes are not an entry of this project under this id."""
        self._order: dict[str, builtins.list[bytes]] = {}
        """Each project's ids, sorted: kept while the set of ids does not change."""

    def rows(
        self,
        project: str,
        entries: Mapping[bytes, bytes],
        beats: Mapping[bytes, bytes],
        now_ms: int,
        views: builtins.list[AgentStatus],
        expired: builtins.list[bytes],
    ) -> None:
        """Append ``project``'s agents to ``views`` in id order; ids gone too long to
        ``expired``.

        Only the entries of this listing are kept afterwards: the cache is bounded by
        the team, not by its history.
        """
        raws = dict(entries)
        old_raws = self._raws.get(project)
        if old_raws == raws:
            # Nothing written since the last listing (the usual case: an agent writes its
            # entry when its state changes, not when it beats): one comparison in C.
            decoded = self._entries[project]
            order = self._order[project]
        else:
            decoded = self._decoded(project, raws, old_raws or {})
            same_ids = old_raws is not None and old_raws.keys() == raws.keys()
            order = self._order[project] if same_ids else sorted(raws)
            self._raws[project] = raws
            self._entries[project] = decoded
            self._order[project] = order
        shown_ms = _SHOWN_MS
        for raw_id in order:
            entry = decoded[raw_id]
            if entry is None:
                continue
            age_ms = now_ms - int(beats.get(raw_id, 0))
            if age_ms > shown_ms:
                expired.append(raw_id)
            else:
                views.append(AgentStatus(entry, age_ms / 1000 if age_ms > 0 else 0.0))

    def _decoded(
        self, project: str, raws: dict[bytes, bytes], old_raws: dict[bytes, bytes]
    ) -> dict[bytes, AgentEntry | None]:
        """``raws`` decoded, reusing the entries whose bytes did not change."""
        old_entries = self._entries.get(project, {})
        prefix = f"{project}/"
        return {
            raw_id: old_entries[raw_id]
            if old_raws.get(raw_id) == raw
            else _decode(raw, raw_id, prefix)
            for raw_id, raw in raws.items()
        }

    def keep_only(self, projects: Iterable[str]) -> None:
        """Forget the projects not listed now."""
        wanted = set(projects)
        for held in (self._raws, self._entries, self._order):
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
