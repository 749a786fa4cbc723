"""``ateam agent``: run one agent in the foreground, parsed without the rest of the CLI.

An agent process is started by supervisors, ``up`` and remote spawns far more often than
a person types any verb, and it lives for hours: building the whole verb table would
import every front end's module (the client, the console's tables and diffs, rich, the
KB) into a process that uses none of them, at a cost in start-up time and idle memory
(issue 28 §2). :func:`ateam.cli.main` sends ``ateam agent …`` here before the parser is
built; ``ateam agent --help`` still goes through the full parser, so its text is the
one every verb's help shares.
"""

from __future__ import annotations

import argparse
import sys

from ateam.cli._hints import cli_line
from ateam.cli._verb import add_project_option, add_redis_option
from ateam.errors import AteamError
from ateam.exits import Exit, cli_exit_code

__all__ = ["agent_args", "cmd_agent", "fast_path", "main"]

_HELP = frozenset({"-h", "--help"})


def fast_path(given: list[str]) -> bool:
    """Whether ``given`` (argv without the program) is an agent start, not a help request."""
    return given[:1] == ["agent"] and not _HELP.intersection(given)


def cmd_agent(args: argparse.Namespace) -> int:
    from ateam.agent.runtime.main import AgentOptions, run_agent

    options = AgentOptions(
        name=args.name,
        project=args.project,
        cwd=args.cwd,
        model=args.model,
        redis=args.redis,
        bootstrap=args.bootstrap,
        repl=not args.no_repl,
    )
    return run_agent(options)


def agent_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    add_project_option(p)
    p.add_argument("--name", required=True, help="the agent's name within its project")
    p.add_argument(
        "--cwd", metavar="DIR", help="its working directory and configuration (default: here)"
    )
    p.add_argument("--model", metavar="ID", help="a model of models.yaml to use instead")
    p.add_argument("--no-repl", action="store_true", help="no local prompt, even on a terminal")
    p.add_argument(
        "--bootstrap",
        metavar="TOKEN",
        help="join with a one-time token a console issued (a start on another host)",
    )


def main(argv: list[str]) -> int:
    """``ateam agent ARGS``: ``argv`` is what follows ``agent``; same exits as the full CLI."""
    parser = argparse.ArgumentParser(prog="ateam agent")
    agent_args(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        # argparse exits 2 on bad usage, which ateam reserves for "Redis unavailable".
        return Exit.USAGE if exc.code == 2 else int(exc.code or 0)
    try:
        return cmd_agent(args)
    except AteamError as exc:
        print(cli_line(exc, args), file=sys.stderr)
        return cli_exit_code(exc)
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
