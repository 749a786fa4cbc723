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

_Held = tuple[bytes, AgentEntry | None]
"""An entry's bytes in the hash and what they decoded to (None: not an entry of this
project under this id)."""


class EntryCache:
    """The entries of the last listing by project and agent id, with their bytes.

    Entries are shared between listings: read them, never set them (the agent writes a
    new entry when it changes, which this cache then decodes anew).
    """

    def __init__(self) -> None:
        self._held: dict[str, dict[bytes, _Held]] = {}

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
        old = self._held.get(project, {})
        new: dict[bytes, _Held] = {}
        shown_ms = _SHOWN_MS
        prefix = f"{project}/"
        for raw_id in sorted(entries):
            raw = entries[raw_id]
            held = old.get(raw_id)
            if held is None or held[0] != raw:
                held = (raw, _decode(raw, raw_id, prefix))
            new[raw_id] = held
            entry = held[1]
            if entry is None:
                continue
            age_ms = now_ms - int(beats.get(raw_id, 0))
            if age_ms > shown_ms:
                expired.append(raw_id)
            else:
                views.append(AgentStatus(entry, age_ms / 1000 if age_ms > 0 else 0.0))
        self._held[project] = new

    def keep_only(self, projects: Iterable[str]) -> None:
        """Forget the projects not listed now."""
        wanted = set(projects)
        for project in [p for p in self._held if p not in wanted]:
            del self._held[project]


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
