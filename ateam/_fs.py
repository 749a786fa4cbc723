"""Durable file primitives: private creation, append+fsync, atomic replace (appendix CV).

Also how a store reports a damaged file (:class:`DamageLog`): the damage is never
absorbed in silence. The file is copied aside (:func:`keep_aside`) before anything
rewrites it, a warning with the counts goes to the log, and the agent announces it.
What was reported is remembered across restarts (:class:`DamageMemory`), so the same
damage is reported and copied once, not again at every start that comes across it.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import json
import logging
import os
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

__all__ = [
    "Damage",
    "DamageLog",
    "DamageMemory",
    "Problem",
    "append_durably",
    "atomic_write",
    "file_key",
    "fsync_dir",
    "keep_aside",
    "open_append",
    "probe_room",
]

log = logging.getLogger("ateam.storage")

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_COPY_BLOCK = 1 << 20


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
        try:
            append_durably(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        # On a full disk a half-written temp file would hold on to the very space the
        # next try needs.
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def keep_aside(path: Path, data: bytes | None = None) -> Path:
    """Copy ``path`` to ``NAME.corrupt-<UTC time>`` beside it, 0600 and fsynced.

    Made before a damaged file is cut, compacted or replaced, so a person can still see
    what was there. An existing copy is never overwritten (``-2``, ``-3``... follow),
    and a copy that already holds exactly these bytes is reused: damage found again at
    each start (a restart loop) costs no new copy, so it cannot fill the disk.

    Args:
        path: the damaged file.
        data: its bytes as the caller read them, when it has them: a file replaced in
            the meantime would otherwise be copied instead of the damaged one.

    Returns:
        The copy.

    Raises:
        OSError: the file cannot be read or the copy written; no copy is left behind.
    """
    same = _same_copy(path, data)
    if same is not None:
        return same
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in itertools.count(1):
        copy = path.with_name(f"{path.name}.corrupt-{stamp}" + (f"-{n}" if n > 1 else ""))
        try:
            fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o600)
        except FileExistsError:
            continue
        break
    try:
        try:
            if data is not None:
                append_durably(fd, data)
            else:
                with path.open("rb") as source:
                    while block := source.read(_COPY_BLOCK):
                        view = memoryview(block)
                        while view:
                            view = view[os.write(fd, view) :]
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            copy.unlink()
        raise
    fsync_dir(path.parent)
    return copy


def _same_copy(path: Path, data: bytes | None) -> Path | None:
    """A ``NAME.corrupt-*`` copy beside ``path`` with the same bytes, if there is one."""
    try:
        size = len(data) if data is not None else path.stat().st_size
        copies = [
            c
            for c in path.parent.glob(f"{glob.escape(path.name)}.corrupt-*")
            if c.stat().st_size == size
        ]
        if not copies:
            return None
        content = data if data is not None else path.read_bytes()
        for copy in sorted(copies):
            if copy.read_bytes() == content:
                return copy
    except OSError:
        return None  # then a fresh copy is made, or its failure reported
    return None


def probe_room(directory: Path, size: int) -> None:
    """Write ``size`` bytes to a scratch file in ``directory``, fsync, and remove it.

    How a writer that met a full disk learns there is room again without risking a real
    file: a few bytes may fit in the slack of a file's last block when a real write
    would not, so the probe asks for as much room as is worth resuming for.

    Raises:
        OSError: there is not that much room (ENOSPC, EDQUOT), or ``directory`` cannot
            be written; the scratch file is gone either way.
    """
    path = directory / f".room-probe.{os.getpid()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o600)
    try:
        try:
            append_durably(fd, bytes(size))
        finally:
            os.close(fd)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def file_key(path: Path) -> Hashable:
    """What tells one version of ``path`` from another: device, inode, size, mtime.

    ``None`` when the file cannot be stat'ed.
    """
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class Problem(StrEnum):
    """What is wrong with a damaged file (the ``problem`` field of the warning)."""

    TORN_TAIL = "torn_tail"
    """The last line was cut short by a write that died half-way."""
    UNREADABLE_LINES = "unreadable_lines"
    """Lines inside a JSON-lines file that are not JSON objects of the expected kind."""
    NOT_JSON = "not_json"
    """A JSON file that does not parse."""
    WRONG_SHAPE = "wrong_shape"
    """A JSON file that parses but is not what the file holds (a list for a record...)."""
    BAD_CHECKSUM = "bad_checksum"
    """A record whose checksum does not match its content."""


@dataclass(frozen=True)
class Damage:
    """One damaged file that was found, and the copy of it kept aside."""

    store: str
    """Whose file it is: ``queue``, ``history``, ``handoff``, ``context``."""
    path: Path
    """The damaged file."""
    problem: Problem
    what: str
    """For people: what was found and what was done about it."""
    count: int = 1
    """How many lines (or records) are affected."""
    dropped_bytes: int = 0
    """Bytes cut off the file (a torn last line); 0 when nothing was cut."""
    kept: Path | None = None
    """The copy of the file as it was found; ``None`` when none could be made."""
    keep_error: str | None = None
    """Why no copy could be made."""

    def message(self) -> str:
        """The warning line: ``{store}: {what}; {where the copy is}``."""
        if self.kept is not None:
            return f"{self.store}: {self.what}; the damaged file is kept as {self.kept}"
        return f"{self.store}: {self.what}; no copy could be kept ({self.keep_error})"

    def fields(self) -> dict[str, object]:
        """The warning event's fields beside ``msg`` and ``code``."""
        return {
            "store": self.store,
            "file": str(self.path),
            "problem": self.problem.value,
            "count": self.count,
            "dropped_bytes": self.dropped_bytes,
            "kept": str(self.kept) if self.kept is not None else None,
        }


class DamageMemory:
    """The damage reported already, kept in a small JSON file across restarts.

    A damaged line that stays where it is (the history is append-only) is met again at
    every start that reads back over it; so is a damaged file nothing has rewritten yet.
    Without this, each start would report it anew and, the file having grown, copy it
    aside again in full. Keys are opaque strings a store chooses (an inode and an offset,
    a file's version), grouped by scope (a file, or a store whose files rotate).

    Losing the file only costs a repeated report, so it is read and written leniently.

    Args:
        path: the memory's file (``state/damage.json``).
    """

    KEEP = 256
    """Keys kept per scope, newest last: enough for any real damage, bounded for a flood."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._scopes: dict[str, list[str]] | None = None

    def knows(self, scope: str, key: str) -> bool:
        """Whether ``key`` was reported in ``scope`` (by this process or an earlier one)."""
        return key in self._load().get(scope, ())

    def remember(self, scope: str, keys: list[str]) -> None:
        """Note ``keys`` as reported in ``scope``, durably (best effort)."""
        scopes = self._load()
        known = scopes.setdefault(scope, [])
        known.extend(key for key in keys if key not in known)
        del known[: -self.KEEP]
        self._save()

    def forget(self, scope: str) -> None:
        """Drop what ``scope`` remembers (its files were deleted: an inode may come back)."""
        if self._load().pop(scope, None) is not None:
            self._save()

    def _load(self) -> dict[str, list[str]]:
        if self._scopes is None:
            try:
                data = json.loads(self.path.read_bytes())
                found = data.get("scopes") if isinstance(data, dict) else None
            except FileNotFoundError:
                found = None
            except (OSError, ValueError, RecursionError) as exc:
                log.warning("damage memory %s unreadable (%s); starting afresh", self.path, exc)
                found = None
            self._scopes = {
                str(scope): [k for k in keys if isinstance(k, str)]
                for scope, keys in (found.items() if isinstance(found, dict) else ())
                if isinstance(keys, list)
            }
        return self._scopes

    def _save(self) -> None:
        data = json.dumps({"v": 1, "scopes": self._scopes}, separators=(",", ":")).encode()
        try:
            atomic_write(self.path, data, mode=0o600)
        except OSError as exc:
            log.warning("damage memory %s not saved (%s): may be reported again", self.path, exc)


class DamageLog:
    """The damage one store found: each logged once and handed to a listener.

    Until someone listens (the agent, once its events are up) reports wait here, so
    damage found while the files are opened is announced too.

    Args:
        store: the store's name in the messages (``queue``, ``history``...).
    """

    def __init__(self, store: str) -> None:
        self.store = store
        self._pending: list[Damage] = []
        self._listener: Callable[[Damage], None] | None = None
        self._reported: dict[Path, tuple[Hashable, bool]] = {}
        """The last damage reported for each file, and whether its copy was made."""
        self.memory: DamageMemory | None = None
        """Where reported damage is remembered across restarts; ``None``: this process only."""

    def listen(self, listener: Callable[[Damage], None]) -> None:
        """Hand every report, those waiting included, to ``listener`` from now on."""
        self._listener = listener
        pending, self._pending = self._pending, []
        for damage in pending:
            listener(damage)

    def drain(self) -> list[Damage]:
        """The reports nobody listened to yet, removed."""
        pending, self._pending = self._pending, []
        return pending

    def already(self, path: Path, key: Hashable, *, kept: bool = False) -> bool:
        """Whether the damage ``key`` stands for in ``path`` was reported already.

        A reader that finds the same damage on every read (a corrupt file read each turn)
        reports it once, not once a read.

        Args:
            kept: count it only if its copy was made too (before a rewrite).
        """
        if key is None:
            return False
        if path in self._reported:
            reported, copied = self._reported[path]
            if reported == key and (copied or not kept):
                return True
        # What an earlier process remembered was copied aside too (see report()).
        return self.memory is not None and self.memory.knows(str(path), repr(key))

    def report(
        self,
        path: Path,
        problem: Problem,
        what: str,
        *,
        count: int = 1,
        dropped_bytes: int = 0,
        kept: Path | None = None,
        required: bool = False,
        key: Hashable = None,
        data: bytes | None = None,
    ) -> Damage:
        """Keep ``path`` aside (unless ``kept`` is the copy already made) and report it.

        Args:
            path: the damaged file.
            problem: what kind of damage.
            what: for people, what was found and done.
            count: lines or records affected.
            dropped_bytes: bytes cut off.
            kept: a copy of the file made already (one copy serves several findings).
            required: the caller is about to change the file, so a copy that cannot
                be made is an error rather than a note in the warning.
            key: identifies this damage for :meth:`already`.
            data: the damaged bytes as read, copied instead of the file's current ones.

        Raises:
            OSError: ``required`` and the copy could not be made; nothing is reported.
        """
        error: str | None = None
        if kept is None:
            try:
                kept = keep_aside(path, data)
            except OSError as exc:
                if required:
                    raise
                error = exc.strerror or str(exc)
        damage = Damage(
            self.store, path, problem, what, count, dropped_bytes, kept=kept, keep_error=error
        )
        if key is not None:
            self._reported[path] = (key, kept is not None)
            if kept is not None and self.memory is not None:
                self.memory.remember(str(path), [repr(key)])
        log.warning("%s", damage.message())
        if self._listener is not None:
            self._listener(damage)
        else:
            self._pending.append(damage)
        return damage
