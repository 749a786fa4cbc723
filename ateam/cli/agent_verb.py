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

__all__ = ["cmd_agent", "fast_path", "parse"]

_HELP = frozenset({"-h", "--help"})


def fast_path(given: list[str]) -> bool:
    """Whether ``given`` (argv without the program) is an agent start, not a help request.

    Asked before every verb, so this module imports nothing more at its top.
    """
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


def parse(argv: list[str]) -> argparse.Namespace | int:
    """``ateam agent ARGS`` parsed (``argv``: what follows ``agent``), or the exit status of
    a bad command line, as the full CLI would exit."""
    from ateam.cli.arguments import agent_args
    from ateam.exits import Exit

    parser = argparse.ArgumentParser(prog="ateam agent")
    agent_args(parser)
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        # argparse exits 2 on bad usage, which ateam reserves for "Redis unavailable".
        return Exit.USAGE if exc.code == 2 else int(exc.code or 0)
