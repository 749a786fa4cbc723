"""Opening a path one component at a time beneath a trusted directory, following no symlink.

Python has no ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``, so the walk is done by
hand: the base directory is opened by name, then every component is opened relative to
the descriptor of the one before it with ``O_NOFOLLOW`` (and ``O_DIRECTORY`` for the
directories). Whatever the tree does meanwhile, the walk ends in the directory or file
that was reached through real directories below the base, or it fails.

The caller passes the components of a path :func:`os.path.realpath` produced, which holds
no symlink and no ``..``. A symlink met on the way therefore means the tree changed since
that path was computed, and is reported as :class:`Swapped` rather than as the
``ELOOP``/``ENOTDIR`` the kernel gives, so the sandbox can refuse it in its own words.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["Swapped", "closing", "open_at", "open_beneath", "open_dir"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY
# With O_NOFOLLOW a symlink as the last component fails with ELOOP on Linux and EMLINK on
# FreeBSD; as a directory component opened with O_DIRECTORY some systems say ENOTDIR.
_SYMLINK_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})


class Swapped(Exception):
    """A component of a symlink-free path is not what it was: the tree changed under us."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name
        """The component (or, for the base, the whole path) found changed."""


@contextlib.contextmanager
def closing(fd: int) -> Iterator[int]:
    """Close ``fd`` when the block ends, however it ends."""
    try:
        yield fd
    finally:
        os.close(fd)


def open_at(dir_fd: int | None, name: str, flags: int, mode: int = 0o777) -> int:
    """``os.open(name, flags, dir_fd=dir_fd)``, never following a symlink in ``name``.

    Args:
        dir_fd: The directory ``name`` is relative to; None for an absolute ``name``.
        name: One component (or, with ``dir_fd`` None, a trusted absolute path).
        flags: ``os.O_*`` flags; ``O_NOFOLLOW`` and ``O_CLOEXEC`` are added.
        mode: Permission bits for a file ``O_CREAT`` makes (the umask applies).

    Returns:
        The new descriptor; the caller closes it.

    Raises:
        Swapped: ``name`` is a symlink, or was one when the open failed.
        OSError: Any other failure, as the kernel reported it.
    """
    try:
        return os.open(name, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _SYMLINK_ERRNOS and _changed(dir_fd, name, exc.errno):
            raise Swapped(name) from None
        raise


def open_dir(base: Path, parts: Sequence[str], *, create: bool = False) -> int:
    """Open the directory ``base/parts[0]/…/parts[-1]`` by a walk that follows no symlink.

    Args:
        base: A trusted absolute directory, opened by name (its last component is not
            followed either). It is never created.
        parts: Components below ``base``, none of them ``..``, ``.`` or empty.
        create: Make missing components (``0777`` minus the umask, as ``mkdir -p``).

    Returns:
        A descriptor of the directory; the caller closes it.

    Raises:
        Swapped: A component is (or, when its open failed, was) a symlink.
        OSError: A component is missing or is not a directory, as the kernel reported it.
    """
    fd = open_at(None, os.fspath(base), _DIR_FLAGS)
    try:
        for name in parts:
            child = _open_child(fd, name, create=create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_beneath(base: Path, parts: Sequence[str], flags: int) -> int:
    """Open ``base/parts…`` with ``flags``, following no symlink below ``base``.

    The directories are walked as :func:`open_dir` walks them and the last component is
    opened with ``O_NOFOLLOW``; with no ``parts``, ``base`` itself is opened.

    Returns:
        The new descriptor; the caller closes it.

    Raises:
        Swapped: A component is (or was) a symlink.
        OSError: As the kernel reported it.
    """
    if not parts:
        return open_at(None, os.fspath(base), flags)
    with closing(open_dir(base, parts[:-1])) as dir_fd:
        return open_at(dir_fd, parts[-1], flags)


def _open_child(dir_fd: int, name: str, *, create: bool) -> int:
    try:
        return open_at(dir_fd, name, _DIR_FLAGS)
    except FileNotFoundError:
        if not create:
            raise
    # Another writer may make it first; either way it is then opened like any component,
    # so a symlink planted in its place is still refused.
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    return open_at(dir_fd, name, _DIR_FLAGS)


def _changed(dir_fd: int | None, name: str, code: int) -> bool:
    """Whether a failed open of ``name`` met a symlink rather than, say, a regular file."""
    if code != errno.ENOTDIR:
        return True  # with O_NOFOLLOW, only a symlink gives ELOOP or EMLINK
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return False  # gone as well: the open's own error says enough
    # A directory now where ENOTDIR was just reported was a symlink a moment ago.
    return stat.S_ISLNK(mode) or stat.S_ISDIR(mode)
