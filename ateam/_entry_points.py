"""The entry points of a group, remembered between processes (tool plugins: ``ateam.tools``).

:func:`importlib.metadata.entry_points` answers by reading the metadata of every
installed distribution: 158 of them here, 6 ms with a warm page cache and 25-30 ms with
a cold one, on every agent's way to serving. Its answer changes only when a
distribution's metadata does: a ``*.dist-info`` or ``*.egg-info`` entry added to or
removed from a directory of ``sys.path`` (an install, an upgrade, an uninstall), or the
``entry_points.txt`` inside one written (an install under way, an in-place
``egg_info``).

So the answer is kept in ``~/.ateam/cache/entry-points.json``, under a key made of the
interpreter and, for each ``sys.path`` directory that holds metadata, the name of every
such entry and the inode, size and mtime of its ``entry_points.txt`` (a stat each: about
1 ms in all here; stevedore keeps its plugins the same way, keyed by mtimes).
Directories without metadata are left out of the key: they add no distribution, and a
project's own directory, first on an agent's ``sys.path``, changes all the time. A
process that finds its key reads no metadata; any change above misses it and scans, and
an answer whose key moved while it was scanned (pip still writing) is not kept.

Anything the key cannot see, another finder on ``sys.meta_path`` that offers
distributions, makes every call scan. A cache that cannot be read or written is no
error: the scan's answer is used as it is. The file is the user's own (``~/.ateam`` is
private): what it names is loaded as a plugin, as what an installed package names is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from dataclasses import dataclass
from importlib.machinery import PathFinder
from importlib.metadata import EntryPoint
from importlib.metadata import entry_points as scan_entry_points
from pathlib import Path
from typing import Any, TypeGuard

from ateam._fs import atomic_write
from ateam.paths import ateam_home

__all__ = ["Plugin", "cache_file", "entry_points"]

log = logging.getLogger(__name__)

_KEPT_KEYS = 8
"""Answers kept (one per interpreter and set of distributions), the most recently written."""
_METADATA = (".dist-info", ".egg-info")


@dataclass(frozen=True)
class Plugin:
    """One entry point, and the distribution that declares it."""

    entry: EntryPoint
    """The entry point, loaded with ``entry.load()``."""
    dist: str
    """The name of the distribution that declares it, for messages (``"?"``: unknown)."""


def cache_file() -> Path:
    return ateam_home() / "cache" / "entry-points.json"


def entry_points(group: str) -> list[Plugin]:
    """The entry points of ``group`` that :mod:`importlib.metadata` finds, in its order."""
    try:
        key = _key()
    except Exception as exc:  # an odd sys.path, a vanished cwd: the scan answers all
        log.debug("entry points of %s scanned: no cache key (%s)", group, exc)
        key = None
    path = cache_file()
    kept = _read(path) if key is not None else {}
    answers = kept.get(key) if key is not None else None
    rows = answers.get(group) if isinstance(answers, dict) else None
    if not _well_formed(rows):
        rows = _scan(group)
        if key is not None and _same_key(key):  # not kept if metadata moved meanwhile
            answers = kept.pop(key, None)
            answers = answers if isinstance(answers, dict) else {}
            answers[group] = rows
            kept[key] = answers  # the newest last: the oldest answers go first
            _write(path, dict(list(kept.items())[-_KEPT_KEYS:]))
    return [Plugin(EntryPoint(name, value, group), dist) for name, value, dist in rows]


def _scan(group: str) -> list[list[str]]:
    return [
        [ep.name, ep.value, ep.dist.name if ep.dist is not None else "?"]
        for ep in scan_entry_points(group=group)
    ]


def _same_key(key: str) -> bool:
    try:
        return _key() == key
    except Exception:
        return False


def _key() -> str | None:
    """What a scan's answer depends on; ``None``: something the key cannot see."""
    if any(
        finder is not PathFinder and hasattr(finder, "find_distributions")
        for finder in sys.meta_path
    ):
        return None
    seen: list[object] = [sys.version, sys.executable]
    for entry in sys.path:
        place = os.path.abspath(os.fsdecode(entry) or os.curdir)
        found = _metadata_in(place)
        if found:
            seen.append([place, found])
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()


def _metadata_in(place: str) -> list[object]:
    """Each metadata entry of one ``sys.path`` directory, as the key sees it."""
    try:
        with os.scandir(place) as listing:
            names = sorted(item.name for item in listing if item.name.lower().endswith(_METADATA))
    except NotADirectoryError:  # a zip on sys.path: its own stat stands for its contents
        return [["", *_stat(place)]]
    except OSError:
        return []
    if place.lower().endswith(".egg"):  # an egg directory keeps its metadata in EGG-INFO
        names.append("EGG-INFO")
    return [[name, *_stat(os.path.join(place, name, "entry_points.txt"))] for name in names]


def _stat(path: str) -> tuple[int, int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0, 0)  # none (yet): its arrival moves the key
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _well_formed(rows: object) -> TypeGuard[list[list[str]]]:
    """Rows as this module writes them; anything else (a damaged file) is a miss."""
    return isinstance(rows, list) and all(
        isinstance(row, list) and len(row) == 3 and all(isinstance(v, str) for v in row)
        for row in rows
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        kept = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return {}
    return kept if isinstance(kept, dict) else {}


def _write(path: Path, kept: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(path, json.dumps(kept).encode())
    except OSError:
        pass  # a cache not kept costs the next start a scan, nothing else
