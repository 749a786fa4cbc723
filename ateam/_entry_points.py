"""The entry points of a group, remembered between processes (tool plugins: ``ateam.tools``).

:func:`importlib.metadata.entry_points` answers by reading the metadata of every
installed distribution: 158 of them here, 6 ms with a warm page cache and 25-30 ms with
a cold one, on every agent's way to serving. Its answer changes only when a
distribution is installed, removed or upgraded, and each of those adds, removes or
rewrites a ``*.dist-info`` (or ``*.egg-info``) entry in a directory of ``sys.path``.

So the answer is kept in ``~/.ateam/cache/entry-points.json``, under a key made of the
interpreter, ``sys.path``, the names of those entries in each of its directories and
the mtime of each directory that holds some (listing them costs well under a
millisecond; stevedore keeps its plugins the same way, keyed by mtimes). A process
that finds its key reads no metadata; an install, an upgrade or another ``PYTHONPATH``
misses it and scans. A cache that cannot be read or written is no error: the scan's
answer is used as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from importlib.metadata import entry_points as scan_entry_points
from pathlib import Path
from typing import Any, TypeGuard

from ateam.paths import ateam_home

__all__ = ["Plugin", "cache_file", "entry_points"]

_KEPT_KEYS = 8
"""Answers kept (one per interpreter and ``sys.path``), the most recently written."""
_METADATA = (".dist-info", ".egg-info")


@dataclass(frozen=True)
class Plugin:
    """One entry point, and the distribution that declares it (for messages)."""

    entry: EntryPoint
    dist: str


def cache_file() -> Path:
    return ateam_home() / "cache" / "entry-points.json"


def entry_points(group: str) -> list[Plugin]:
    """The entry points of ``group`` that :mod:`importlib.metadata` would find, in its order."""
    key = _key()
    path = cache_file()
    kept = _read(path)
    answers = kept.get(key)
    rows = answers.get(group) if isinstance(answers, dict) else None
    if not _well_formed(rows):
        rows = [
            [ep.name, ep.value, ep.dist.name if ep.dist is not None else "?"]
            for ep in scan_entry_points(group=group)
        ]
        answers = kept.pop(key, None)
        answers = answers if isinstance(answers, dict) else {}
        answers[group] = rows
        kept[key] = answers  # the newest last: the oldest answers go first
        _write(path, dict(list(kept.items())[-_KEPT_KEYS:]))
    return [Plugin(EntryPoint(name, value, group), dist) for name, value, dist in rows]


def _key() -> str:
    """What the scan's answer depends on: the interpreter, and the metadata on ``sys.path``."""
    seen: list[object] = [sys.version, sys.executable]
    for entry in sys.path:
        place = entry or os.getcwd()
        try:
            with os.scandir(place) as listing:
                names = sorted(item.name for item in listing if item.name.endswith(_METADATA))
        except NotADirectoryError:  # a zip on sys.path: its own mtime stands for its contents
            names = [""]
        except OSError:
            names = []
        # Installing, upgrading (even to the same version) or removing a distribution
        # adds or removes an entry here, which moves the directory's mtime. A directory
        # without metadata (a project's own, first on sys.path) changes all the time and
        # has nothing to say: only its having none counts.
        seen.append([place, names, _mtime(place) if names else 0])
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()


def _well_formed(rows: object) -> TypeGuard[list[list[str]]]:
    """Rows as this module writes them; anything else (a damaged file) is a miss."""
    return isinstance(rows, list) and all(
        isinstance(row, list) and len(row) == 3 and all(isinstance(v, str) for v in row)
        for row in rows
    )


def _mtime(place: str) -> int:
    try:
        return os.stat(place).st_mtime_ns
    except OSError:
        return 0


def _read(path: Path) -> dict[str, Any]:
    try:
        kept = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def _write(path: Path, kept: dict[str, Any]) -> None:
    # No fsync: a cache lost in a crash is a scan at the next start, not lost data.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.touch(mode=0o600)  # as every file under ~/.ateam
        tmp.write_text(json.dumps(kept))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
