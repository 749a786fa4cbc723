"""Durable file primitives: private creation, append+fsync, atomic replace (appendix CV)."""

from __future__ import annotations

import os
from pathlib import Path

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def open_append(path: Path) -> int:
    """Open ``path`` for appending, creating it 0600; returns a raw descriptor."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC, 0o600)


def append_durably(fd: int, data: bytes) -> None:
    """Write all of ``data`` then fsync, so the caller may acknowledge it."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.fsync(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (a no-op where directories can't be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename; keeps the old mode."""
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o600
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o600)
    try:
        append_durably(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
