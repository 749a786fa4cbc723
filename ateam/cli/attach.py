"""``ateam attach NAME``: the console, already attached to NAME (like ``tmux attach -t``).

The console is ``ateam console``'s (panes on a terminal, plain lines otherwise or with
``--no-ui``) with ``/attach ID`` as its first command, so a refusal reads as it does in
the console: another console owns the agent (exit 3 from a script), unless
``--takeover``.
"""

from __future__ import annotations

import argparse
import asyncio

from ateam.cli._run import home_project, project_or_none, resolve_names, target, with_team
from ateam.cli.console import run_console
from ateam.client import Team


def cmd_attach(args: argparse.Namespace) -> int:
    project = project_or_none()
    bus = target(args, project)

    async def name(team: Team) -> int:
        await resolve_names(team, args, home_project(args, project))
        return 0

    asyncio.run(with_team(bus, "attach", name))
    command = f"/attach {args.id}" + (" --takeover" if args.takeover else "")
    return run_console(bus, plain=args.no_ui, first_lines=[command])
