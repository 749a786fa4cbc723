"""Whose secret patterns apply to text a front end sends (SPEC §11).

Text is masked before it reaches Redis (its request lists, its AOF), so the sender
applies the patterns of the project it stands in and, when the receiving agent's
working directory is on this host, of the agent's project too.
"""

from __future__ import annotations

from pathlib import Path

from ateam.config import ProjectConfig, load_project
from ateam.errors import AteamError
from ateam.redact import Redactor

__all__ = ["local_redactor", "project_at", "redactor_for"]


def redactor_for(cwd: str | None, base: Redactor) -> Redactor:
    """``base`` plus the ``redact.yaml`` patterns of the project an agent runs in.

    The agent's own patterns can be read only when its working directory is on this
    host; otherwise ``base`` is all there is.
    """
    project = project_at(Path(cwd)) if cwd else None
    if project is None or not project.redact_patterns:
        return base
    return Redactor((*base.extra, *project.redact_patterns))


def project_at(cwd: Path) -> ProjectConfig | None:
    """The project configuration for ``cwd``; ``None`` if it is not a directory here."""
    if not cwd.is_dir():
        return None
    try:
        return load_project(cwd)
    except AteamError:
        return None


def local_redactor() -> Redactor:
    """The redactor of the project here (the cwd): built-ins plus its redact.yaml."""
    try:
        return Redactor.from_config(load_project())
    except AteamError:
        return Redactor()  # no project, or a broken one: the built-in patterns still hold
