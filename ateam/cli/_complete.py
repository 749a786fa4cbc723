"""``ateam __complete agents|tasks|work [WORD]``: live names for the shell completion script.

Hidden (the script runs it, people don't) and quick: :func:`ateam.cli.main` dispatches
here before it builds the parser, the bus is asked with a short deadline, and an
embedded server that is not running is never started for it. It prints one candidate a
line and always exits 0: a completion that fails completes nothing, it never writes an
error into the middle of what someone is typing.

Agents: the project here's configured and registered agents as bare names, every other
project's registered agents as full ids. Tasks: the ids on the project here's board.
Work: the task ids and agent names of the project's ateam branches.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Awaitable, Callable
from pathlib import Path

from ateam.client import Team, bus_errors, session_id
from ateam.client.target import running_target
from ateam.config import ProjectConfig, load_project
from ateam.errors import AteamError
from ateam.worktrees import Repository, list_work

DEADLINE_S = 2.0
"""The longest the helper waits for the bus: a prompt must not hang on a lost link."""

Lister = Callable[[Team | None, ProjectConfig | None], Awaitable[list[str]]]


async def _agents(team: Team | None, project: ProjectConfig | None) -> list[str]:
    here = project.name if project is not None and project.root is not None else None
    found = list(project.agents) if here is not None and project is not None else []
    for agent_id in [view.id for view in await team.agents()] if team is not None else []:
        their_project, _, name = agent_id.partition("/")
        found.append(name if their_project == here else agent_id)
    return list(dict.fromkeys(found))


async def _tasks(team: Team | None, project: ProjectConfig | None) -> list[str]:
    if team is None or project is None or project.root is None:
        return []
    return [task.id for task in await team.tasks.ls(project.name)]


async def _work(team: Team | None, project: ProjectConfig | None) -> list[str]:
    """What ``ateam diff|merge|discard`` take: the task ids and agent names of the
    branches ateam made in the project's repository (git alone, no bus)."""
    if project is None or project.root is None:
        return []
    found = list_work(Repository.open(project.root))
    return list(dict.fromkeys(work.task_id or work.agent for work in found))


KINDS: dict[str, Lister] = {"agents": _agents, "tasks": _tasks, "work": _work}


def main(argv: list[str]) -> int:
    lister = KINDS.get(argv[0]) if argv else None
    if lister is None:
        return 0
    # Nothing but candidates on stdout, nothing at all on stderr: both land in a prompt.
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            words = asyncio.run(_list(lister))
        except (AteamError, OSError, TimeoutError):
            return 0
    for word in words:
        print(word)
    return 0


async def _list(lister: Lister) -> list[str]:
    try:
        project: ProjectConfig | None = load_project(Path.cwd())
    except AteamError:
        project = None
    try:
        bus = running_target(None, project)
        if bus is not None:
            async with asyncio.timeout(DEADLINE_S):
                team = await Team.connect(bus, session=session_id("complete"))
                try:
                    with bus_errors():
                        return await lister(team, project)
                finally:
                    await team.aclose()
    except (AteamError, OSError, TimeoutError):
        pass  # no bus to ask: what the configuration says is still worth completing
    return await lister(None, project)
