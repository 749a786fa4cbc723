"""Which ``.ateam/`` directories apply to a place, and which project a place is in (SPEC §3).

Only the file system is read here, never a configuration file's content: what the
directories hold is merged and validated by :mod:`ateam.config.loader`.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from ateam.paths import ateam_home

__all__ = [
    "CONFIG_DIR",
    "CONFIG_FILES",
    "configured",
    "discover",
    "find_project_root",
    "remember_root",
    "remembered_root",
]

CONFIG_DIR = ".ateam"
"""Name of a configuration directory."""

CONFIG_FILES = ("project.yaml", "models.yaml", "tools.yaml", "redact.yaml")
"""The files of a configuration directory that the loader merges (a test holds this to
the loader's own list); its ``agents/`` directory is read as well."""


def discover(start: Path) -> list[Path]:
    """Every ``.ateam/`` directory that applies to ``start``, nearest first.

    The walk goes from ``start`` (or its directory, for a file) up to the file-system
    root; :func:`~ateam.paths.ateam_home` comes last unless the walk already found it.
    Paths are absolute; a symlinked ``.ateam`` keeps its own name, because its parent
    is the project root.
    """
    here = start.expanduser().resolve()
    if not here.is_dir():
        here = here.parent
    found = [d / CONFIG_DIR for d in (here, *here.parents) if (d / CONFIG_DIR).is_dir()]
    home = ateam_home().expanduser().resolve()
    if home.is_dir() and home not in {path.resolve() for path in found}:
        found.append(home)
    return found


def find_project_root(start: Path | None = None) -> Path | None:
    """The nearest directory, from ``start`` (default: the cwd) up, with ``.ateam/project.yaml``.

    This is what makes a bare agent name (``zeus``) mean ``<project>/zeus``: the project
    whose file the user is standing in. ``~/.ateam`` holds user-wide defaults, not a
    project, so it never counts. ``None`` when there is no such directory.
    """
    here = (start if start is not None else Path.cwd()).expanduser().resolve()
    if not here.is_dir():
        here = here.parent
    home = ateam_home().expanduser().resolve()
    for directory in (here, *here.parents):
        marker = directory / CONFIG_DIR / "project.yaml"
        if marker.is_file() and (directory / CONFIG_DIR).resolve() != home:
            return directory
    return None


def configured(start: Path | None = None) -> bool:
    """Whether any configuration applies to ``start`` (default: the cwd).

    ``False`` when no project directory is around it and ``~/.ateam`` holds none of the
    files the loader reads: loading would give the defaults. A verb asks this first,
    so that it loads no YAML parser and no schema where there is nothing to load.
    """
    home = ateam_home().expanduser().resolve()
    for config_dir in discover(start if start is not None else Path.cwd()):
        if config_dir.resolve() != home or (config_dir / "agents").exists():
            return True
        if any((config_dir / name).exists() for name in CONFIG_FILES):
            return True
    return False


# --- where a project was last started from ------------------------------------------------

_ROOT_FILE = "root"
"""Under ``~/.ateam/projects/<name>/``: the directory holding that project's ``.ateam/``."""
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def remember_root(name: str, root: Path) -> None:
    """Note that project ``name`` lives in ``root``, so verbs run elsewhere can find it.

    ``ateam up examples/hello`` is run from anywhere; ``ateam start hello/hera`` or
    ``ateam logs hello/hera`` later, from the same place, must find that project again
    without the user repeating its directory (docker compose keeps the same record in
    its containers' labels). Best effort: a home that cannot be written changes nothing.
    """
    if not _SAFE_NAME.match(name):
        return
    record = ateam_home() / "projects" / name / _ROOT_FILE
    with contextlib.suppress(OSError):
        record.parent.mkdir(parents=True, exist_ok=True)
        temporary = record.with_name(f".{_ROOT_FILE}.{os.getpid()}")
        temporary.write_text(f"{root.resolve()}\n", encoding="utf-8")
        os.replace(temporary, record)


def remembered_root(name: str) -> Path | None:
    """The directory :func:`remember_root` noted for ``name``, if it still holds a project."""
    if not _SAFE_NAME.match(name):
        return None
    try:
        text = (ateam_home() / "projects" / name / _ROOT_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    root = Path(text.strip())
    return root if root.is_absolute() and (root / CONFIG_DIR / "project.yaml").is_file() else None
