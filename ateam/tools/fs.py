"""The file sandbox behind ``fs.read``, ``fs.list``, ``fs.write`` and ``fs.patch`` (SPEC §5.5).

Every path an agent names is confined to its cwd plus an explicit whitelist. A relative
path is joined to the cwd and the result put through :func:`os.path.realpath`, so ``..``
and symlinks anywhere in the path (the final component or a parent directory) are judged
by where they really lead; device files, FIFOs and sockets are refused even inside a
whitelisted directory, because reading ``/dev/zero`` or a FIFO never ends. Every refusal
is an :class:`~ateam.errors.FsDenied` whose one-line message names the path and the reason.

Ordinary I/O failures (a missing file, a directory where a file was expected) are left as
the standard :class:`OSError` subclasses so the tool layer can report them as they are.

Writes are atomic: a uniquely named temp file in the same directory, fsync, rename, fsync
of the directory. An existing file keeps its permission bits; a new file is created
``0666`` minus the process umask, as an editor or ``git checkout`` would create it. (The
``0600`` rule of SPEC §11 is for ateam's own state — queues, history, logs — not for the
project files an agent writes on its owner's behalf.) Because the rename replaces the
directory entry, a write never reaches through a hard link or a symlink to another file.

Limits, stated rather than hidden: the checks run before the file is opened, and a local
process that can already rewrite the tree could swap a parent directory for a symlink in
between. The final component is opened with ``O_NOFOLLOW`` and checked with ``fstat``,
which closes the common cases; the sandbox confines the model's paths, it is not a defence
against a hostile process on the same account. A hard link planted inside the sandbox to a
file outside cannot be told apart from an ordinary file and would be readable.

The functions are synchronous; the tool layer runs them in a thread under the ``fs.*``
timeout (3 s).
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import difflib
import errno
import hashlib
import heapq
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ateam._fs import append_durably, fsync_dir
from ateam.errors import FsConflict, FsDenied

__all__ = [
    "DEFAULT_LIST_ENTRIES",
    "DEFAULT_READ_BYTES",
    "Encoding",
    "Entry",
    "EntryType",
    "Listing",
    "PatchProposal",
    "ReadResult",
    "Sandbox",
    "unified_diff",
]

DEFAULT_READ_BYTES = 1 << 20
"""How much of a file ``fs.read`` returns unless asked otherwise (1 MiB)."""
DEFAULT_LIST_ENTRIES = 1000
"""How many entries ``fs.list`` returns unless asked otherwise."""

_CHUNK = 1 << 16
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# A FIFO swapped in after the type check must not block open() for ever; on a regular
# file O_NONBLOCK changes nothing.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NO_NEWLINE = "\\ No newline at end of file\n"

StrPath = str | os.PathLike[str]


class Encoding(StrEnum):
    """How :attr:`ReadResult.content` carries the file's bytes."""

    TEXT = "utf-8"
    BASE64 = "base64"


class EntryType(StrEnum):
    """What a directory entry is, judged without following symlinks."""

    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    OTHER = "other"


@dataclass(frozen=True)
class ReadResult:
    """What ``fs.read`` returns."""

    content: str
    """The first ``max_bytes`` of the file, as text or base64 (see :attr:`encoding`)."""
    encoding: Encoding
    """``utf-8`` when the bytes are valid UTF-8 without NULs, else ``base64``."""
    sha256: str
    """Hex SHA-256 of the whole file, even when truncated: the base a patch is checked against."""
    size: int
    """Size of the whole file in bytes."""
    truncated: bool
    """Whether :attr:`content` holds less than the whole file."""


@dataclass(frozen=True)
class Entry:
    """One directory entry as ``fs.list`` reports it."""

    name: str
    """The entry's name inside the listed directory."""
    type: EntryType
    """File, directory, symlink (never followed) or other (device, FIFO, socket)."""
    size: int
    """Size in bytes from ``lstat`` (a symlink's own size, not its target's)."""


@dataclass(frozen=True)
class Listing:
    """What ``fs.list`` returns: entries sorted by name, capped at ``max_entries``."""

    entries: tuple[Entry, ...]
    """The first ``max_entries`` entries in name order."""
    total: int
    """How many entries the directory holds."""
    truncated: bool
    """Whether entries were left out."""


@dataclass(frozen=True)
class PatchProposal:
    """A change to one file, shown to the owner as a diff before it is applied."""

    id: str
    """Random id the owner's answer (``diff.decide``) refers to."""
    path: str
    """The file, relative to the sandbox root when inside it, else absolute."""
    diff: str
    """Unified diff with 3 lines of context and ``a/``/``b/`` headers."""
    base_sha: str
    """SHA-256 the file must still have when the patch is applied."""
    new_sha: str
    """SHA-256 of :attr:`new_content` encoded as UTF-8."""
    new_content: str
    """The whole proposed file."""


class Sandbox:
    """File operations confined to ``root`` (the agent's cwd) plus ``whitelist``.

    Args:
        root: The agent's working directory; relative paths are resolved against it.
        whitelist: Further files or directories outside ``root`` the agent may use.
    """

    def __init__(self, root: Path, whitelist: Sequence[Path] = ()) -> None:
        self.root = Path(os.path.realpath(root))
        self.whitelist = tuple(Path(os.path.realpath(item)) for item in whitelist)
        self._allowed = (self.root, *self.whitelist)

    def resolve(self, path: StrPath) -> Path:
        """Return the real path ``path`` names, or refuse it.

        Args:
            path: Relative to the root, or absolute.

        Returns:
            The symlink-free absolute path, inside the root or the whitelist. It need
            not exist; if it does, it is a regular file or a directory.

        Raises:
            FsDenied: A NUL byte, a real path outside the sandbox, or a device file,
                FIFO or socket.
        """
        raw = os.fspath(path)
        if "\x00" in raw:
            raise _denied(raw, "contains a NUL byte")
        # join() keeps an absolute ``raw`` as it is, so both kinds go through realpath.
        real = Path(os.path.realpath(os.path.join(self.root, raw)))
        if not self._inside(real):
            raise _denied(raw, f"outside the sandbox (resolves to {str(real)!r})")
        try:
            mode = os.stat(real).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return real
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise _denied(raw, f"is a {_kind(mode)}, not a regular file")
        return real

    def read(self, path: StrPath, *, max_bytes: int = DEFAULT_READ_BYTES) -> ReadResult:
        """Read a file: its first ``max_bytes`` plus the hash and size of all of it.

        Args:
            path: The file.
            max_bytes: Most bytes returned in :attr:`ReadResult.content`.

        Returns:
            The content as text when it is UTF-8 (a multi-byte character cut by the limit
            is dropped), else as base64.

        Raises:
            FsDenied: See :meth:`resolve`.
            OSError: The file is missing, is a directory, or cannot be read.
        """
        real = self.resolve(path)
        digest = hashlib.sha256()
        with _open_regular(real, path) as fd:
            head = _read_upto(fd, max_bytes)
            digest.update(head)
            size = len(head)
            for chunk in _chunks(fd):
                digest.update(chunk)
                size += len(chunk)
        truncated = size > len(head)
        text = _as_text(head, complete=not truncated)
        if text is None:
            return ReadResult(
                base64.b64encode(head).decode("ascii"),
                Encoding.BASE64,
                digest.hexdigest(),
                size,
                truncated,
            )
        return ReadResult(text, Encoding.TEXT, digest.hexdigest(), size, truncated)

    def list(self, path: StrPath = ".", *, max_entries: int = DEFAULT_LIST_ENTRIES) -> Listing:
        """List a directory without following symlinks.

        Args:
            path: The directory.
            max_entries: Most entries returned; the first ones in name order.

        Raises:
            FsDenied: See :meth:`resolve`.
            OSError: The directory is missing or is not a directory.
        """
        real = self.resolve(path)
        total = 0

        def counted(entries: Iterator[os.DirEntry[str]]) -> Iterator[os.DirEntry[str]]:
            nonlocal total
            for entry in entries:
                total += 1
                yield entry

        with os.scandir(real) as entries:
            # nsmallest keeps memory at max_entries however large the directory is.
            first = heapq.nsmallest(max_entries, counted(entries), key=lambda e: e.name)
            found = [_entry(item) for item in first]
        kept = tuple(item for item in found if item is not None)
        return Listing(kept, total, truncated=total > len(first))

    def write(self, path: StrPath, content: str) -> str:
        """Replace (or create) a file with ``content`` atomically.

        Missing parent directories are created, but only inside the sandbox.

        Args:
            path: The file.
            content: The whole new content, written as UTF-8.

        Returns:
            The hex SHA-256 of what was written.

        Raises:
            FsDenied: See :meth:`resolve`, or a parent would be created outside.
            OSError: ``path`` is a directory, or the write fails.
        """
        real = self.resolve(path)
        mode = self._existing_mode(real, path)
        if mode is None:
            self._make_parents(real, path)
        data = content.encode("utf-8")
        _atomic_replace(real, data, mode)
        return _sha256(data)

    def propose_patch(self, path: StrPath, new_content: str, *, based_on_sha: str) -> PatchProposal:
        """Describe replacing a text file's content as a diff, without touching the file.

        Args:
            path: An existing UTF-8 text file (new files go through :meth:`write`).
            new_content: The whole proposed content.
            based_on_sha: The SHA-256 the caller read (:attr:`ReadResult.sha256`).

        Raises:
            FsConflict: The file no longer has ``based_on_sha``.
            FsDenied: See :meth:`resolve`, or the file is not UTF-8 text.
            OSError: The file is missing or cannot be read.
        """
        real = self.resolve(path)
        with _open_regular(real, path) as fd:
            old = b"".join(_chunks(fd))
        _check_base(path, based_on_sha, _sha256(old))
        try:
            old_text = old.decode("utf-8")
        except UnicodeDecodeError:
            raise _denied(os.fspath(path), "is not UTF-8 text; use fs.write") from None
        shown = self._display(real)
        return PatchProposal(
            id=secrets.token_hex(8),
            path=shown,
            diff=unified_diff(old_text, new_content, shown.lstrip("/")),
            base_sha=based_on_sha,
            new_sha=_sha256(new_content.encode("utf-8")),
            new_content=new_content,
        )

    def apply_patch(self, proposal: PatchProposal, *, backup: bool = False) -> str:
        """Apply a proposal if its file still has the hash it was proposed against.

        Args:
            proposal: From :meth:`propose_patch`.
            backup: Keep the previous content as ``<file>.bak`` (same mode).

        Returns:
            The hex SHA-256 of the file as written.

        Raises:
            FsConflict: The file changed since it was read; it is left untouched.
            FsDenied: See :meth:`resolve`.
        """
        return self._replace_checked(proposal, proposal.new_content, backup=backup)

    def apply_edited(
        self, proposal: PatchProposal, edited_content: str, *, backup: bool = False
    ) -> str:
        """Write the owner's edit of a proposal (``$EDITOR``), under the same hash check.

        Args:
            proposal: From :meth:`propose_patch`.
            edited_content: The whole file as the owner left it.
            backup: Keep the previous content as ``<file>.bak`` (same mode).

        Returns:
            The hex SHA-256 of the file as written.

        Raises:
            FsConflict: The file changed since it was read; it is left untouched.
            FsDenied: See :meth:`resolve`.
        """
        return self._replace_checked(proposal, edited_content, backup=backup)

    def _replace_checked(self, proposal: PatchProposal, content: str, *, backup: bool) -> str:
        real = self.resolve(proposal.path)
        with _open_regular(real, proposal.path) as fd:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            old = b"".join(_chunks(fd))
        _check_base(proposal.path, proposal.base_sha, _sha256(old))
        if backup:
            # Not resolved: even if ``<file>.bak`` is a symlink leading out, the rename
            # replaces the link itself and never writes through it.
            _atomic_replace(real.with_name(real.name + ".bak"), old, mode)
        data = content.encode("utf-8")
        _atomic_replace(real, data, mode)
        return _sha256(data)

    def _inside(self, real: Path) -> bool:
        return any(real.is_relative_to(allowed) for allowed in self._allowed)

    def _display(self, real: Path) -> str:
        if real.is_relative_to(self.root):
            return real.relative_to(self.root).as_posix()
        return str(real)

    def _existing_mode(self, real: Path, path: StrPath) -> int | None:
        try:
            mode = os.stat(real).st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(path))
        return stat.S_IMODE(mode)

    def _make_parents(self, real: Path, path: StrPath) -> None:
        missing = [parent for parent in real.parents if not parent.exists()]
        # A whitelisted file whose directory is absent must not create that directory.
        if missing and not self._inside(missing[-1]):
            raise _denied(os.fspath(path), f"would create {str(missing[-1])!r} outside")
        if missing:
            os.makedirs(real.parent, exist_ok=True)


def unified_diff(old: str, new: str, name: str) -> str:
    """A ``patch``-compatible unified diff (3 lines of context) of one file.

    Args:
        old: The current content.
        new: The proposed content.
        name: The path shown in the ``a/`` and ``b/`` headers.

    Returns:
        The diff, empty when nothing changes; a last line without a newline is marked
        ``\\ No newline at end of file`` as ``diff`` and ``git`` do.
    """
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
        n=3,
    )
    return "".join(line if line.endswith("\n") else f"{line}\n{_NO_NEWLINE}" for line in lines)


def _denied(raw: str, why: str) -> FsDenied:
    # repr() keeps the message on one line whatever the path holds.
    return FsDenied(f"{raw!r}: {why}", detail={"path": raw, "reason": why})


def _check_base(path: StrPath, base_sha: str, current_sha: str) -> None:
    if current_sha != base_sha:
        raw = os.fspath(path)
        raise FsConflict(
            f"{raw!r}: changed since it was read",
            detail={"path": raw, "base_sha": base_sha, "current_sha": current_sha},
        )


_KINDS = (
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


@contextlib.contextmanager
def _open_regular(real: Path, path: StrPath) -> Iterator[int]:
    """Open ``real`` for reading, re-checking on the descriptor that it is a regular file."""
    try:
        fd = os.open(real, os.O_RDONLY | _CLOEXEC | _NOFOLLOW | _NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component became a symlink since resolve()
            raise _denied(os.fspath(path), "became a symlink") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(path))
        if not stat.S_ISREG(mode):
            raise _denied(os.fspath(path), f"is a {_kind(mode)}, not a regular file")
        yield fd
    finally:
        os.close(fd)


def _read_upto(fd: int, limit: int) -> bytes:
    parts: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _chunks(fd: int) -> Iterator[bytes]:
    while chunk := os.read(fd, _CHUNK):
        yield chunk


def _as_text(data: bytes, *, complete: bool) -> str | None:
    """``data`` as text, or None when it looks binary (a NUL, or invalid UTF-8)."""
    if b"\x00" in data:
        return None
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        # When the read was cut short a trailing partial character is not an error:
        # the incremental decoder holds it back instead of raising.
        return decoder.decode(data, final=complete)
    except UnicodeDecodeError:
        return None


def _entry(item: os.DirEntry[str]) -> Entry | None:
    try:
        info = item.stat(follow_symlinks=False)
    except FileNotFoundError:  # removed while we listed
        return None
    return Entry(item.name, _entry_type(info.st_mode), info.st_size)


def _entry_type(mode: int) -> EntryType:
    if stat.S_ISLNK(mode):
        return EntryType.SYMLINK
    if stat.S_ISDIR(mode):
        return EntryType.DIR
    if stat.S_ISREG(mode):
        return EntryType.FILE
    return EntryType.OTHER


def _atomic_replace(target: Path, data: bytes, mode: int | None) -> None:
    """Replace ``target`` by ``data``: temp file in the same directory, fsync, rename.

    ``mode`` None means a new file, created ``0666`` minus the umask by the kernel
    itself (reading the umask from Python is racy across threads).
    """
    # A random suffix keeps two concurrent writes of one file from sharing a temp file;
    # the name is cut so the temp name stays under NAME_MAX.
    tmp = target.with_name(f".{target.name[:64]}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC | _NOFOLLOW
    fd = os.open(tmp, flags, 0o666 if mode is None else 0o600)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            append_durably(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:  # also on KeyboardInterrupt/cancellation: never leave the temp
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
