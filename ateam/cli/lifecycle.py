"""A project's agents started and stopped: ``up``, ``down``, ``start`` and ``restart``.

The project is the one around the working directory (or ``DIR``), like ``docker
compose``; its agents run under the project's supervisor (:mod:`ateam.supervisor`), which
a start asks to run them when it is running and which is started otherwise. Each verb
prints one line per agent, or with ``--json`` one row per agent::

    [{"id": "hello/zeus", "status": "started", "pid": 4242,
      "log": "/…/.ateam/agents/zeus/state/agent.log", "error": null}, …]

``status`` is ``started``, ``running`` (it ran already: left alone), ``stopped``, ``not
running`` or ``failed`` (then ``error`` says why, and the verb exits non-zero).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ateam.cli._run import target, with_team
from ateam.cli.console import run_console
from ateam.client import Target, Team
from ateam.client.names import resolve_agent
from ateam.config import CONFIG_DIR, ProjectConfig, load_project
from ateam.config.discovery import find_project_root, remembered_root
from ateam.errors import ConfigError, UsageError
from ateam.exits import Exit

if TYPE_CHECKING:  # imported when a verb runs: the supervisor is for these verbs only
    from ateam.supervisor import AgentOutcome


def project_at(directory: str) -> ProjectConfig:
    """The project around ``directory``; none there is a one-line error that says what to do.

    Raises:
        UsageError: there is no ``.ateam/`` in ``directory`` or above it.
        ConfigError: the project's configuration does not load, or has no agents.
    """
    root = Path(directory).expanduser().resolve()
    project = load_project(root)
    if project.root is None:
        where = "" if directory == "." else f" {directory}"
        raise UsageError(
            f"no ateam project in {root} or its parents (no {CONFIG_DIR}/ directory); "
            f"create one with `ateam init{where}`"
        )
    if not project.agents:
        raise ConfigError(
            f"no agents configured under {project.root / CONFIG_DIR / 'agents'}; "
            f"`ateam init --agent NAME` in a new directory shows what one looks like"
        )
    return project


def project_of(names: Sequence[str]) -> ProjectConfig:
    """The project ``start``/``restart`` act on: the one here, else the one the ids name.

    Outside any project, full ids of one project (``hello/hera``) find it where ``ateam
    up`` last started it, so the README's ``ateam up examples/hello`` followed by ``ateam
    start hello/hera`` works from the same directory.

    Raises:
        UsageError: no project here, and the names do not lead to one.
        ConfigError: the project's configuration does not load, or has no agents.
    """
    if find_project_root() is not None:
        return project_at(".")
    projects = {name.partition("/")[0] for name in names if "/" in name}
    root = remembered_root(projects.pop()) if len(projects) == 1 else None
    if root is None or any("/" not in name for name in names):
        return project_at(".")  # its error says there is no project here
    return project_at(str(root))


def print_outcomes(outcomes: Sequence[AgentOutcome], as_json: bool) -> None:
    """One line per agent for people, or the documented JSON rows."""
    if as_json:
        print(json.dumps([o.to_json() for o in outcomes], indent=2, sort_keys=True))
        return
    for outcome in outcomes:
        print(outcome.line())


def configured_names(project: ProjectConfig, given: Sequence[str]) -> list[str]:
    """The configured agents that ``given`` names: bare names, unique prefixes or full ids.

    Raises:
        AmbiguousName: a prefix starts several agents' names.
        UsageError: a name is not an agent of this project.
    """
    ids = [agent.id for agent in project.agents.values()]
    names = []
    for text in given:
        agent_id = resolve_agent(text, ids, project=project.name)
        their_project, _, name = agent_id.partition("/")
        if their_project != project.name or name not in project.agents:
            configured = ", ".join(sorted(project.agents))
            raise UsageError(
                f"{text!r} is not an agent of {project.name} (configured in "
                f"{project.root}/{CONFIG_DIR}/agents/: {configured})"
            )
        names.append(name)
    return list(dict.fromkeys(names))


# up / down ------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    if args.down:  # the older spelling of `ateam down DIR`
        return cmd_down(args)
    project = project_at(args.dir)
    bus = target(args, project)
    code = _start(project, bus, None, args)
    if args.detach or args.json:
        return code
    return run_console(bus, plain=args.no_ui)


def _start(
    project: ProjectConfig, bus: Target, names: list[str] | None, args: argparse.Namespace
) -> int:
    from ateam.supervisor import start_agents

    started = start_agents(project, bus, names=names, redis_url=args.redis)
    print_outcomes(started.outcomes, args.json)
    if started.error is not None:  # the exit status must say it
        raise started.error
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """``ateam down [DIR]``: stop what ``up``, ``start`` and consoles started for the project."""
    from ateam.supervisor import stop_agents

    project = project_at(args.dir)
    rows, ok = stop_agents(project, target(args, project))
    print_outcomes(rows, args.json)
    return 0 if ok else Exit.FAILED


# start / restart ------------------------------------------------------------------------


def cmd_start(args: argparse.Namespace) -> int:
    """``ateam start NAME…``: start agents of the project here that are not running."""
    project = project_of(args.names)
    names = configured_names(project, args.names)
    return _start(project, target(args, project), names, args)


def cmd_restart(args: argparse.Namespace) -> int:
    """``ateam restart NAME…``: stop each agent that runs (gracefully), then start it."""
    project = project_of(args.names)
    names = configured_names(project, args.names)
    bus = target(args, project)
    ids = [f"{project.name}/{name}" for name in names]

    async def stop_running(team: Team) -> int:
        for agent_id in ids:
            view = await team.status(agent_id)
            if view is None or not view.connected:
                continue
            if not await team.agent(agent_id).stop(wait=args.wait, takeover=args.takeover):
                print(
                    f"{agent_id} was asked to stop but is still registered after "
                    f"{args.wait:g} s; see `ateam logs {agent_id}`",
                    file=sys.stderr,
                )
                return Exit.FAILED
        return 0

    if asyncio.run(with_team(bus, "restart", stop_running)) != 0:
        return Exit.FAILED
    return _start(project, bus, names, args)
