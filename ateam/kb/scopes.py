"""Where each knowledge-base scope lives on disk (SPEC §10).

* ``agent`` (the default): one agent's own notes, ``.ateam/agents/<name>/kb/``;
* ``project``: shared by the project's agents, ``<project>/.ateam/kb/``;
* ``user``: shared by every project of the user, ``~/.ateam/kb/``.

The caller knows the agent's directory, the project root and ateam's home (``~/.ateam``
unless overridden); this module only maps a scope name onto them, so a KB command that
names a scope resolves it in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ateam.constants import KB_DEFAULT_SCOPE, KB_SCOPES
from ateam.errors import BadRequest

__all__ = ["DEFAULT_SCOPE", "SCOPES", "scope_dir"]

SCOPES = KB_SCOPES
"""Every scope name, the default first."""
DEFAULT_SCOPE = KB_DEFAULT_SCOPE


def _project(agent_dir: Path, project_root: Path | None, home: Path) -> Path:
    if project_root is None:
        raise BadRequest(
            "the project scope needs a project (a directory with .ateam/); "
            "use the agent or user scope",
            detail={"scope": "project"},
        )
    return project_root / ".ateam" / "kb"


_DIRS: dict[str, Callable[[Path, Path | None, Path], Path]] = {
    "agent": lambda agent_dir, project_root, home: agent_dir / "kb",
    "project": _project,
    "user": lambda agent_dir, project_root, home: home / "kb",
}


def scope_dir(scope: str, *, agent_dir: Path, project_root: Path | None, home: Path) -> Path:
    """The directory holding ``scope``'s store.

    Args:
        scope: One of :data:`SCOPES`.
        agent_dir: The agent's directory, ``.ateam/agents/<name>``.
        project_root: The project's root (the directory holding ``.ateam/``), if any.
        home: ateam's per-user directory, normally ``~/.ateam``.

    Raises:
        BadRequest: An unknown scope, or ``project`` outside a project.
    """
    where = _DIRS.get(scope)
    if where is None:
        raise BadRequest(
            f"unknown kb scope {scope!r} (choose {', '.join(SCOPES)})",
            detail={"scope": scope},
        )
    return where(agent_dir, project_root, home)
