"""Which files an ingest call reads: the sandbox check, directory expansion, reading.

SPEC §10 and §5.5: every path is judged by where it really leads (``os.path.realpath``,
so ``..`` and symlinks anywhere in it are resolved first), and is refused with
``kb.ingest.denied`` unless it lies inside one of the allowed roots; device files, FIFOs
and sockets are refused even inside, since reading ``/dev/zero`` or a FIFO never ends.
The check covers every path the caller names before anything is read, so a refused call
stores nothing.

Directories expand to the text and source files under them (by suffix), leaving out
hidden entries (``.git``, ``.env``, ``.ateam``), dependency and cache directories, and
ateam's own ``state`` directories (queues and history). A symlink met inside a directory
that leads out of the sandbox is not followed: it is reported as skipped rather than
refusing the whole call, because the caller did not name it.

Reading re-checks on the open descriptor that the file is a regular file, and reports
(as skipped, with the reason) files over 1 MiB and binary files — a NUL byte in the first
8 KiB, which also rules out UTF-16 text.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ateam.errors import BadRequest, KbDenied

MAX_PATHS = 512
"""SPEC §10: at most 512 files per ingest call, after directories are expanded."""
MAX_FILE_BYTES = 1 << 20
BINARY_PROBE_BYTES = 8 << 10

TEXT_SUFFIXES = frozenset(
    """md markdown mdx rst txt adoc org tex
    py pyi js mjs cjs jsx ts tsx go rs java kt kts scala c h cc cpp cxx hpp hh cs swift
    m rb php pl lua r jl ex exs erl hs ml clj dart zig nim sql proto graphql
    sh bash zsh fish ps1 bat
    toml yaml yml json jsonc ini cfg conf xml html htm css scss vue svelte
    csv tsv""".split()
)
"""Suffixes (without the dot) a directory expands to."""
TEXT_NAMES = frozenset({"Makefile", "Dockerfile", "Justfile", "README", "LICENSE", "NOTICE"})
"""Files without a telling suffix that a directory still expands to."""
SKIP_DIRS = frozenset(
    {"node_modules", "__pycache__", "venv", "target", "dist", "build", "site-packages"}
)
"""Directories that hold generated or third-party files (hidden ones are skipped anyway)."""

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# A FIFO swapped in after the type check must not block open(); on a regular file
# O_NONBLOCK changes nothing.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


@dataclass(frozen=True)
class Skip:
    """A file left out, and why (it goes to the report's ``skipped``)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Document:
    """A file's text and the facts stored with it."""

    path: Path
    text: str
    mtime: float
    size: int


def resolve_requested(paths: Sequence[Path | str], allowed_roots: Sequence[Path]) -> list[Path]:
    """The real paths the caller named, all inside the sandbox, or :class:`KbDenied`.

    Relative paths are taken from the first allowed root (the agent's working directory).
    A path that does not exist is returned as it is; :func:`expand` reports it.

    Raises:
        KbDenied: A path with a NUL byte, outside every root, or a special file. The
            message names the first such path; ``detail["paths"]`` lists all of them.
    """
    roots = [Path(os.path.realpath(root)) for root in allowed_roots]
    if not roots:
        raise KbDenied("no directory is open to kb.ingest (no allowed roots)")
    real_paths: list[Path] = []
    refused: list[tuple[str, str]] = []
    for path in paths:
        raw = os.fspath(path)
        why = ""
        if "\x00" in raw:
            why = "contains a NUL byte"
        else:
            real = Path(os.path.realpath(os.path.join(roots[0], raw)))
            why = _refusal(real, roots)
            real_paths.append(real)
        if why:
            refused.append((raw, why))
    if refused:
        raw, why = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise KbDenied(
            f"{raw!r}: {why}{more}",
            detail={"paths": [{"path": p, "reason": r} for p, r in refused]},
        )
    return real_paths


def _refusal(real: Path, roots: Sequence[Path]) -> str:
    if not any(real.is_relative_to(root) for root in roots):
        return f"outside the sandbox (resolves to {str(real)!r})"
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return ""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return ""
    return "is " + next((name for test, name in _KINDS if test(mode)), "a special file")


def expand(
    real_paths: Sequence[Path], allowed_roots: Sequence[Path]
) -> tuple[list[Path], list[Skip]]:
    """The files to read: named files as they are, directories expanded; no repeats.

    Raises:
        BadRequest: More than :data:`MAX_PATHS` files (the walk stops at the first extra).
    """
    roots = [Path(os.path.realpath(root)) for root in allowed_roots]
    files: dict[Path, None] = {}  # ordered and de-duplicated
    skipped: list[Skip] = []
    for real in real_paths:
        if real.is_dir():
            found = _walk(real, roots, skipped)
        elif real.exists():
            found = iter((real,))
        else:
            skipped.append(Skip(str(real), "not found"))
            continue
        for file in found:
            files[file] = None
            if len(files) > MAX_PATHS:
                raise BadRequest(
                    f"at most {MAX_PATHS} paths per call: name fewer files or a smaller directory",
                    detail={"limit": MAX_PATHS},
                )
    return list(files), skipped


def _walk(top: Path, roots: Sequence[Path], skipped: list[Skip]) -> Iterator[Path]:
    """The text files under ``top`` in a stable order; links leading out go to ``skipped``."""
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        in_ateam = ".ateam" in here.parts
        dirnames[:] = sorted(
            name
            for name in dirnames
            if not name.startswith(".")
            and name not in SKIP_DIRS
            and not (in_ateam and name == "state")
        )
        for name in sorted(filenames):
            if name.startswith(".") or not _is_text_name(name):
                continue
            real = Path(os.path.realpath(here / name))
            why = _refusal(real, roots)
            if why:
                skipped.append(Skip(str(here / name), why))
            elif real.is_file():
                yield real


def _is_text_name(name: str) -> bool:
    suffix = name.rpartition(".")[2].lower() if "." in name else ""
    return suffix in TEXT_SUFFIXES or name in TEXT_NAMES


def read_document(path: Path) -> Document | Skip:
    """The file's text, or why it is left out (too big, binary, not a regular file)."""
    fd = os.open(path, os.O_RDONLY | _CLOEXEC | _NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Skip(str(path), "not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            return Skip(str(path), f"larger than {MAX_FILE_BYTES // (1 << 20)} MiB")
        with os.fdopen(os.dup(fd), "rb") as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:  # it grew since fstat
        return Skip(str(path), f"larger than {MAX_FILE_BYTES // (1 << 20)} MiB")
    if b"\x00" in data[:BINARY_PROBE_BYTES]:
        return Skip(str(path), "binary")
    return Document(
        path=path,
        # Text in a legacy encoding is still worth finding; its odd bytes become U+FFFD.
        text=data.decode("utf-8", errors="replace"),
        mtime=info.st_mtime,
        size=len(data),
    )
