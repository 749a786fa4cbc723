"""JSON-lines files: one object a line, appended durably (the queue's and history's).

:func:`encode_line`, :func:`decode_line` and :func:`truncate_torn_tail` read and write the
lines; :class:`AppendLog` is the descriptor a log appends through, which keeps the file
line-aligned when a write fails.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from ateam._fs import DamageLog, Problem, append_durably, fsync_dir, keep_aside, open_append
from ateam._json import JsonObject
from ateam.constants import QUEUE_TAIL_SCAN
from ateam.errors import StorageError, StorageFull

__all__ = [
    "AppendLog",
    "decode_line",
    "encode_line",
    "repair_torn_tail",
    "storage_error",
    "truncate_torn_tail",
]

_SCAN_BLOCK = 64 * 1024

_ERRNO_ERRORS: dict[int, type[StorageError]] = {
    errno.ENOSPC: StorageFull,
    errno.EDQUOT: StorageFull,
}
"""Write failures that say what happened, by errno. The rest (EIO, EROFS, EACCES...) stay
``storage.corrupt``: only room can come back by itself, so only a full disk is waited out."""


def encode_line(obj: Mapping[str, object]) -> bytes:
    """Serialise ``obj`` as one compact JSON line, newline included.

    The newline is the line's only one (JSON escapes those inside strings), which is what
    lets :func:`truncate_torn_tail` recognise a torn write.

    Raises:
        TypeError: if ``obj`` holds something JSON cannot represent.
    """
    try:
        return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    except UnicodeEncodeError:
        # Lone surrogates (from undecodable input) have no UTF-8 form; escaped JSON keeps them.
        return (json.dumps(obj, separators=(",", ":")) + "\n").encode("ascii")


def decode_line(line: bytes) -> JsonObject | None:
    """Parse one line; ``None`` if it is not a JSON object (damaged or foreign)."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def truncate_torn_tail(
    path: Path,
    *,
    max_scan: int | None = QUEUE_TAIL_SCAN,
    before_cut: Callable[[int], object] | None = None,
) -> int:
    """Cut the unterminated last line a killed write left behind, fsynced.

    Every line ends with its only newline, so the bytes after the last newline are exactly
    what a write that died half-way left. They must go before anything else is appended,
    or the next line would be glued onto them and become unreadable too.

    Args:
        path: the JSON-lines file; a missing file is fine.
        max_scan: how far back from the end to look for a newline; ``None`` for no limit.
        before_cut: called with the number of bytes about to be dropped, before the file
            changes (to keep a copy of it); an exception from it leaves the file as it was.

    Returns:
        The number of bytes dropped (0 when the file was intact).

    Raises:
        StorageError: no newline within ``max_scan`` bytes of the end of a longer file:
            that is a damaged file rather than a torn line, and needs a person.
        OSError: the file cannot be read or truncated, or ``before_cut`` raised it.
    """
    try:
        handle = path.open("r+b")
    except FileNotFoundError:
        return 0
    with handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        floor = 0 if max_scan is None else max(0, size - max_scan)
        cut = 0
        end = size
        while end > floor:
            start = max(floor, end - _SCAN_BLOCK)
            handle.seek(start)
            newline = handle.read(end - start).rfind(b"\n")
            if newline >= 0:
                cut = start + newline + 1
                break
            end = start
        else:
            if floor > 0:
                raise StorageError(
                    f"{path}: the last {max_scan} bytes hold no line break; the file is "
                    "damaged beyond automatic repair",
                    detail={"path": str(path), "size": size},
                )
        if before_cut is not None:
            before_cut(size - cut)
        handle.truncate(cut)
        handle.flush()
        os.fsync(handle.fileno())
        return size - cut


def repair_torn_tail(path: Path, damage: DamageLog) -> int:
    """Cut a torn last line (no scan limit), copying the file aside first and reporting it.

    Returns:
        The number of bytes dropped (0 when the file was intact).

    Raises:
        OSError: the file cannot be read, copied or truncated; it is left as it was.
    """
    kept: list[Path] = []
    dropped = truncate_torn_tail(
        path, max_scan=None, before_cut=lambda _: kept.append(keep_aside(path))
    )
    if dropped:
        damage.report(
            path,
            Problem.TORN_TAIL,
            f"repaired torn last line of {path.name} ({dropped} bytes dropped)",
            dropped_bytes=dropped,
            kept=kept[0],
        )
    return dropped


def storage_error(label: str, what: str, path: Path, exc: OSError) -> StorageError:
    """The :class:`StorageError` for ``exc``, worded ``{label}: {what} {path}: {reason}``.

    A full disk or quota gives :class:`StorageFull`, which the agent waits out.
    """
    cls = _ERRNO_ERRORS.get(exc.errno or 0, StorageError)
    return cls(
        f"{label}: {what} {path}: {exc.strerror or exc}",
        detail={"path": str(path), "errno": exc.errno},
    )


class AppendLog:
    """One append-only file written through a descriptor kept open, every write fsynced.

    Not thread-safe: its owner serialises the calls.

    Args:
        path: the file; created 0600 by :meth:`open`, in a directory that must exist.
        label: names the owner in error messages (``"queue"``, ``"history"``).
    """

    def __init__(self, path: Path, *, label: str) -> None:
        self.path = path
        self.label = label
        self.size = 0
        """The file's size as this writer knows it: taken at :meth:`open`, then counted."""
        self._fd: int | None = None

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` was called since the last :meth:`close`."""
        return self._fd is not None

    def open(self) -> None:
        """Open the file for appending, creating it (durably) if missing, and take its size.

        Raises:
            RuntimeError: it is open already.
            OSError: the file cannot be created or opened.
        """
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is open already")
        created = not self.path.exists()
        self._fd = open_append(self.path)
        if created:
            fsync_dir(self.path.parent)
        self.size = os.fstat(self._fd).st_size

    def reopen(self) -> None:
        """Close and open again, as needed after the file was replaced or renamed.

        Raises:
            OSError: the file cannot be created or opened; the log is then closed.
        """
        self.close()
        self.open()

    def close(self) -> None:
        """Release the descriptor; safe to call twice. :attr:`size` is kept."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole lines) and fsync it; on failure none of it stays.

        Raises:
            RuntimeError: the log is not open.
            StorageError: the write failed.
        """
        if self._fd is None:
            raise RuntimeError(f"{self.path} is not open")
        try:
            append_durably(self._fd, data)
        except OSError as exc:
            # A half-written line would swallow the next one; cut it off so the log stays
            # line-aligned and the caller, who gets the error, owes nobody an ack.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size)
            error = storage_error(self.label, "cannot write", self.path, exc)
            error.detail["bytes"] = len(data)  # how much room a retry needs
            raise error from exc
        self.size += len(data)
