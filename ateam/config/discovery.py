"""Which ``.ateam/`` directories apply to a place, and which project a place is in (SPEC §3).

Only the file system is read here, never a configuration file's content: what the
directories hold is merged and validated by :mod:`ateam.config.loader`.
"""

from __future__ import annotations

from pathlib import Path

from ateam.paths import ateam_home

__all__ = ["CONFIG_DIR", "discover", "find_project_root"]

CONFIG_DIR = ".ateam"
"""Name of a configuration directory."""


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
