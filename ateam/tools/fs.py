"""The file sandbox behind ``fs.read``, ``fs.list``, ``fs.write`` and ``fs.patch`` (SPEC §5.5).

One module, slightly over the usual size on purpose: every path check and the descriptor
walk that makes it hold are one security argument, read together.

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

What is opened is what was checked. The real path only decides which file is meant; the
file is then reached by a walk from the sandbox root (or from the whitelist entry holding
it; for a whitelisted file, from its directory) one directory descriptor at a time, every
component opened with ``O_NOFOLLOW`` (see :mod:`ateam.tools._beneath`). Reads, listings,
writes, the parents a write creates, the temp file, the rename and a patch's ``.bak`` all
happen relative to those descriptors, so a parent directory swapped for a symlink after
the check is refused as a change under us, never followed out. A name over ``NAME_MAX``
or a path over ``PATH_MAX`` is refused too, before anything is created.

Limits, stated rather than hidden: the root and the whitelist entries themselves are opened
by name and trusted, and a directory a local process moves out of the sandbox while a call
holds it open is still used. A hard link planted inside the sandbox to a file outside cannot
be told apart from an ordinary file and would be readable (a write replaces the link, so it
never changes the file outside). The sandbox confines the model's paths; it is not a
defence against a hostile process on the same account.

The functions are synchronous; the tool layer runs them in a thread under the ``fs.*``
timeout (3 s).
"""

from __future__ import annotations

import base64
import codecs
import contextlib
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

from ateam._fs import append_durably
from ateam.errors import FsConflict, FsDenied
from ateam.tools._beneath import Swapped, closing, open_at, open_beneath, open_dir

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
# A FIFO swapped in after the type check must not block open() for ever; on a regular
# file O_NONBLOCK changes nothing.
_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
_LIST = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL
# Linux's limits (most BSDs' too), checked before anything is created; a filesystem with
# smaller ones still answers ENAMETOOLONG, which is refused the same way.
_NAME_MAX = 255
_PATH_MAX = 4096
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
            FsDenied: A NUL byte, a real path outside the sandbox, a name too long, a
                tree changing while it is resolved, or a device file, FIFO or socket.
        """
        raw = os.fspath(path)
        if "\x00" in raw:
            raise _denied(raw, "contains a NUL byte")
        try:
            # join() keeps an absolute ``raw`` as it is, so both kinds go through realpath.
            real = Path(os.path.realpath(os.path.join(self.root, raw)))
        except OSError as exc:
            # Non-strict realpath() only fails in readlink(): a link that vanished or
            # stopped being a link between its lstat() and its readlink().
            raise _denied(raw, _REASONS.get(exc.errno, "changed while it was resolved")) from None
        if not self._inside(real):
            raise _denied(raw, f"outside the sandbox (resolves to {str(real)!r})")
        if _too_long(real):
            raise _denied(raw, _REASONS[errno.ENAMETOOLONG])
        try:
            mode = os.stat(real).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return real
        except OSError as exc:
            if exc.errno in _REASONS:
                raise _denied(raw, _REASONS[exc.errno]) from None
            raise
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
            FsDenied: See :meth:`resolve`; or the tree changed as it was opened.
            OSError: The file is missing, is a directory, or cannot be read.
        """
        target = self._target(path)
        digest = hashlib.sha256()
        with (
            _denying(target.raw),
            _regular(open_beneath(target.base, target.parts, _READ), target.raw) as fd,
        ):
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
            FsDenied: See :meth:`resolve`; or the tree changed as it was opened.
            OSError: The directory is missing or is not a directory.
        """
        target = self._target(path)
        total = 0

        def counted(entries: Iterator[os.DirEntry[str]]) -> Iterator[os.DirEntry[str]]:
            nonlocal total
            for entry in entries:
                total += 1
                yield entry

        with (
            _denying(target.raw),
            closing(open_beneath(target.base, target.parts, _LIST)) as fd,
            os.scandir(fd) as entries,
        ):
            # nsmallest keeps memory at max_entries however large the directory is.
            first = heapq.nsmallest(max_entries, counted(entries), key=lambda e: e.name)
            # Inside the block: the entries' lstat() is relative to the open directory.
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
            FsDenied: See :meth:`resolve`; or the tree changed as it was opened, or a
                parent would be created outside.
            OSError: ``path`` is a directory, or the write fails.
        """
        target = self._target(path)
        data = content.encode("utf-8")
        with _denying(target.raw), closing(self._open_parent(target, create=True)) as dir_fd:
            name = target.name
            _atomic_replace(dir_fd, name, data, _existing_mode(dir_fd, name, target.raw))
        return _sha256(data)

    def propose_patch(self, path: StrPath, new_content: str, *, based_on_sha: str) -> PatchProposal:
        """Describe replacing a text file's content as a diff, without touching the file.

        Args:
            path: An existing UTF-8 text file (new files go through :meth:`write`).
            new_content: The whole proposed content.
            based_on_sha: The SHA-256 the caller read (:attr:`ReadResult.sha256`).

        Raises:
            FsConflict: The file no longer has ``based_on_sha``.
            FsDenied: See :meth:`resolve`; or the tree changed as it was opened, or the
                file is not UTF-8 text.
            OSError: The file is missing or cannot be read.
        """
        target = self._target(path)
        with (
            _denying(target.raw),
            _regular(open_beneath(target.base, target.parts, _READ), target.raw) as fd,
        ):
            old = b"".join(_chunks(fd))
        _check_base(path, based_on_sha, _sha256(old))
        try:
            old_text = old.decode("utf-8")
        except UnicodeDecodeError:
            raise _denied(os.fspath(path), "is not UTF-8 text; use fs.write") from None
        shown = self._display(target.real)
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
            FsDenied: See :meth:`resolve`; or the tree changed as it was opened.
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
            FsDenied: See :meth:`resolve`; or the tree changed as it was opened.
        """
        return self._replace_checked(proposal, edited_content, backup=backup)

    def _replace_checked(self, proposal: PatchProposal, content: str, *, backup: bool) -> str:
        target = self._target(proposal.path)
        name, data = target.name, content.encode("utf-8")
        # One directory descriptor for the read, the check, the backup and the rename, so
        # the file replaced is the one whose hash was checked.
        with _denying(target.raw), closing(self._open_parent(target, create=False)) as dir_fd:
            with _regular(open_at(dir_fd, name, _READ), target.raw) as fd:
                mode = stat.S_IMODE(os.fstat(fd).st_mode)
                old = b"".join(_chunks(fd))
            _check_base(proposal.path, proposal.base_sha, _sha256(old))
            if backup:
                # Not resolved: even if ``<file>.bak`` is a symlink leading out, the rename
                # replaces the link itself and never writes through it.
                _atomic_replace(dir_fd, name + ".bak", old, mode)
            _atomic_replace(dir_fd, name, data, mode)
        return _sha256(data)

    def _target(self, path: StrPath) -> _Target:
        real = self.resolve(path)
        holding = (entry for entry in self._allowed if real.is_relative_to(entry))
        # Any allowed entry holding ``real`` will do and the deepest makes the shortest walk,
        # but one strictly above it comes first: a write then may create missing parents.
        base = max(holding, key=lambda entry: (entry != real, len(entry.parts)))
        return _Target(os.fspath(path), real, base, real.relative_to(base).parts)

    def _open_parent(self, target: _Target, *, create: bool) -> int:
        """Open the directory that holds ``target``, making missing ones if asked."""
        base, parts = target.parent
        try:
            return open_dir(base, parts, create=create)
        except FileNotFoundError:
            # Only the base is never made. When it is not itself allowed (the directory of
            # a whitelisted file), making it would create something outside the sandbox.
            if create and not self._inside(base):
                raise _denied(target.raw, f"would create {str(base)!r} outside") from None
            raise

    def _inside(self, real: Path) -> bool:
        return any(real.is_relative_to(allowed) for allowed in self._allowed)

    def _display(self, real: Path) -> str:
        if real.is_relative_to(self.root):
            return real.relative_to(self.root).as_posix()
        return str(real)


@dataclass(frozen=True)
class _Target:
    """A checked path and the walk that reaches it: ``base``, then ``parts`` below it."""

    raw: str
    """The path as the caller spelled it, for messages."""
    real: Path
    """What :meth:`Sandbox.resolve` made of it."""
    base: Path
    """The allowed entry (root or whitelist item) holding :attr:`real`."""
    parts: tuple[str, ...]
    """The components from :attr:`base` down to :attr:`real`; empty when they are one."""

    @property
    def parent(self) -> tuple[Path, tuple[str, ...]]:
        """The walk to the directory holding :attr:`real`."""
        if self.parts:
            return self.base, self.parts[:-1]
        # real is the base itself, a whitelisted file (or the root): its own directory,
        # outside the sandbox, is where it is replaced.
        return self.base.parent, ()

    @property
    def name(self) -> str:
        """:attr:`real`'s name in that directory."""
        return self.parts[-1] if self.parts else self.base.name


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
    import difflib  # only once an edit is proposed: most agents' starts make none

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


# Failures that refuse the path rather than report an I/O error. ELOOP: realpath() leaves
# a symlink in its answer only when the links loop; otherwise the tree changed since.
_REASONS: dict[int | None, str] = {  # None: an OSError made without an errno
    errno.ENAMETOOLONG: "name too long",
    errno.ELOOP: "a symlink loop, or changed while it was checked",
}


def _too_long(real: Path) -> bool:
    encoded = os.fsencode(real)
    # PATH_MAX counts the terminating NUL.
    if len(encoded) >= _PATH_MAX:
        return True
    return any(len(part) > _NAME_MAX for part in encoded.split(b"/"))


@contextlib.contextmanager
def _denying(raw: str) -> Iterator[None]:
    """Refuse, in the sandbox's words, what the walk finds: a swapped tree, a long name.

    Other I/O errors go on as they are, but naming ``raw``: the walk's own error names
    only the component it failed on, or a temp file.
    """
    try:
        yield
    except Swapped as exc:
        why = f"changed while it was opened (a symlink appeared at {exc.name!r})"
        raise _denied(raw, why) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise _denied(raw, _REASONS[exc.errno]) from None
        if exc.filename == raw and exc.filename2 is None:
            raise
        raise type(exc)(exc.errno, exc.strerror, raw) from None


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
def _regular(fd: int, raw: str) -> Iterator[int]:
    """Own ``fd``, opened for reading, once its ``fstat`` shows a regular file."""
    with closing(fd):
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", raw)
        if not stat.S_ISREG(mode):
            raise _denied(raw, f"is a {_kind(mode)}, not a regular file")
        yield fd


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


def _existing_mode(dir_fd: int, name: str, raw: str) -> int | None:
    """The permission bits of ``name`` in ``dir_fd``, or None when there is no such file."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):  # realpath() saw none here
        raise Swapped(name)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", raw)
    return stat.S_IMODE(mode)


def _atomic_replace(dir_fd: int, name: str, data: bytes, mode: int | None) -> None:
    """Replace ``name`` in ``dir_fd`` by ``data``: temp file beside it, fsync, rename.

    ``mode`` None means a new file, created ``0666`` minus the umask by the kernel
    itself (reading the umask from Python is racy across threads).
    """
    # A random suffix keeps two concurrent writes of one file from sharing a temp file;
    # the name is cut (in bytes: a character may take four) to keep it under NAME_MAX.
    stem = os.fsdecode(os.fsencode(name)[:64])
    tmp = f".{stem}.{secrets.token_hex(6)}.tmp"
    fd = open_at(dir_fd, tmp, _CREATE, 0o666 if mode is None else 0o600)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            append_durably(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:  # also on KeyboardInterrupt/cancellation: never leave the temp
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    # Makes the rename durable; some filesystems refuse fsync on a directory, and the
    # rename has happened either way.
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
