"""The projects a console sees on this host: where it stands, and where its agents run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ateam import fleet
from ateam.client import project_at
from ateam.config import AgentConfig, ProjectConfig, load_project
from ateam.console.session import ConsoleSession
from ateam.errors import UsageError

__all__ = ["configured_names", "home_project", "local_config", "team_project"]


async def home_project(console: ConsoleSession) -> ProjectConfig:
    """The project of the attached agent's cwd, else of the console's cwd."""
    view = console.known.get(console.attached) if console.attached else None
    cwd = Path(view.entry.cwd) if view is not None and view.entry.cwd else Path.cwd()
    project = await asyncio.to_thread(project_at, cwd)
    if project is None:
        project = await asyncio.to_thread(load_project, Path.cwd())
    return project


async def team_project(console: ConsoleSession) -> str:
    """The project whose context and board a command reads or writes.

    That of the attached agent, else the project around the console's directory. A
    directory outside every project is refused rather than taken for a project of its
    own name: a post there would reach no agent (and look as if it had).

    Raises:
        UsageError: nothing is attached and no project is around the directory.
    """
    project = await home_project(console)
    if console.attached is None and project.root is None:
        raise UsageError(
            f"no project here ({Path.cwd()} has no .ateam/ above it): /attach an agent "
            "of the project first, or start the console inside the project"
        )
    return project.name


def configured_names(cwd: Path) -> set[str]:
    """Agent names configured in the project at ``cwd`` (none if it is not here)."""
    project = project_at(cwd)
    return set(project.agents) if project is not None else set()


async def local_config(agent: str, cwd: Path) -> AgentConfig | None:
    """The configuration ``agent`` has on this host, if its cwd is here."""
    project_name, _, name = agent.partition("/")
    project = await asyncio.to_thread(project_at, cwd)
    if project is None:
        return None
    return fleet.agent_config_for(project, project_name, name, cwd, explicit_cwd=False)
