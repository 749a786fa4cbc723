"""What every verb shares: finding the project and the bus, and one team session per run.

A verb's handler parses nothing (argparse did) and maps no error (``main()`` does): it
hands a :data:`Work` to :func:`run_verb`, which resolves a bare agent name and the bus
and runs it on a :class:`~ateam.client.Team` session.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ateam.client import Target, Team, bus_errors, local_redactor, resolve_target, session_id
from ateam.client.names import agent_candidates, resolve_agent
from ateam.config.discovery import configured
from ateam.console.tables import table_lines
from ateam.errors import ConfigError
from ateam.exits import Exit
from ateam.redact import Redactor

if TYPE_CHECKING:
    from ateam.config import ProjectConfig

Work = Callable[[Team], Awaitable[int]]
"""A verb's part that runs on the team: returns the exit code."""


def target(args: argparse.Namespace, project: ProjectConfig | None) -> Target:
    """``--redis``, ATEAM_REDIS_URL, tools.yaml, else the embedded server (started on demand)."""
    return resolve_target(args.redis, project)


def project_or_none() -> ProjectConfig | None:
    """The project around the cwd; a broken one is a warning, as verbs work without one."""
    if not configured():
        return None  # what loading would give, without YAML or the schemas
    # Imported here, as in run_in_project: the loader brings YAML and the schemas.
    from ateam.config.loader import load_project

    try:
        return load_project(Path.cwd())
    except ConfigError as exc:
        print(f"warning: ignoring configuration: {exc.message}", file=sys.stderr)
        return None


def home_project(args: argparse.Namespace, project: ProjectConfig | None) -> str | None:
    """The project a bare agent name belongs to: ``--project``, else the one around the cwd."""
    given = getattr(args, "project", None)
    if isinstance(given, str):
        return given
    return project.name if project is not None and project.root is not None else None


async def resolve_names(team: Team, args: argparse.Namespace, project: str | None) -> None:
    """Turn what was typed for ``id`` (or each of ``ids``) into full agent ids.

    A bare name means that agent of ``project``; a unique prefix of a name means that
    agent (:mod:`ateam.client.names`); a full id stays as it is.
    """
    given: list[str] = [args.id] if isinstance(getattr(args, "id", None), str) else []
    given += getattr(args, "ids", None) or []
    if not given:
        return
    known = await agent_candidates(team)
    found = [resolve_agent(name, known, project=project) for name in given]
    if isinstance(getattr(args, "id", None), str):
        args.id = found.pop(0)
    if getattr(args, "ids", None):
        args.ids = found


def run_verb(
    args: argparse.Namespace, verb: str, work: Work, *, redactor: Redactor | None = None
) -> int:
    """Find the bus, name the agents, then run ``work`` on a team session.

    Errors go to ``main()``.
    """
    try:
        project = project_or_none()
        bus = target(args, project)
        home = home_project(args, project)

        async def named(team: Team) -> int:
            await resolve_names(team, args, home)
            return await work(team)

        return asyncio.run(with_team(bus, verb, named, redactor=redactor))
    except KeyboardInterrupt:
        return Exit.INTERRUPTED


async def with_team(bus: Target, verb: str, work: Work, *, redactor: Redactor | None = None) -> int:
    """``work`` on a new team session on ``bus``, closed after it; Redis errors as ateam's."""
    # Host, pid and a random part in the session id (see session_id): two verbs with
    # one id would take each other's one-call claims for their own.
    team = await Team.connect(bus, session=session_id(verb), redactor=redactor or Redactor())
    try:
        with bus_errors():
            return await work(team)
    finally:
        await team.aclose()


def print_table(rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    if not rows:
        print("no agents")
        return
    for line in table_lines(rows, columns):
        print(line)


def redaction_notice(notice: str | None) -> None:
    """Tell the sender that secrets were masked (on stderr, as ``ateam send`` does)."""
    if notice:
        print(notice, file=sys.stderr)


ProjectWork = Callable[[Team, str], Awaitable[int]]
"""A project-wide verb's part that runs on the team, given the project: the exit code."""


def run_in_project(args: argparse.Namespace, verb: str, work: ProjectWork) -> int:
    """The project (``--project`` or the nearest one), then ``work`` on a team session."""
    from ateam.config.loader import project_name

    project = project_name(args.project)

    async def on_team(team: Team) -> int:
        return await work(team, project)

    # The project's redact.yaml patterns too, as for `ateam send`: items and tasks are
    # read by every agent and console of the project.
    return run_verb(args, verb, on_team, redactor=local_redactor())
