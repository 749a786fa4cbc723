"""Every ``ateam …`` command: parse, call, print. The work lives in the packages.

The layout, one module per verb family over :mod:`ateam.client`::

    parser.py     the table of every verb (name, help, handler, arguments, actions)
                  and build_parser(), which walks it; handlers are "module:function",
                  imported when their verb runs
    arguments.py  every verb's arguments, light: argparse and constants,
                  so help and the parse import no client (tests/unit/cli/test_imports.py)
    agents.py     agent (runs ateam.agent.runtime.main), ps, session, send, tail, stop, ack
    lifecycle.py  a project's agents started and stopped: up, down, start, restart
    logs.py       logs: an agent's state/agent.log
    attach.py     attach: the console, attached to one agent
    console.py    console: panes, plain lines, or a browser
    kb.py         kb add|search|ls
    tasks.py      tasks ls|add|claim|done|fail|reopen|retry
    context.py    context ls|search|post
    acl.py        acl
    mcp.py        mcp
    server.py     server start|stop|status
    init.py       init
    runtimes.py   runtimes
    completion.py completion bash|zsh|fish; _complete.py is the hidden helper it calls
    _verb.py      how a verb is declared, and the options several families take
    _run.py       the project, the bus, agent names and a team session for one verb's run
    _hints.py     the hint after an error, worded for a shell (`ateam …`, not `/…`)

Handlers raise; :func:`main` alone maps an :class:`~ateam.errors.AteamError` to its
line and exit status, with the hint a person at a shell needs (a ``ateam …`` command,
not a console one). Nothing here talks to Redis: ``tests/unit/test_layers.py`` checks
that the CLI imports :mod:`ateam.client`, never :mod:`ateam.bus`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ateam import _gc, _telemetry_off
from ateam._cmdline import mask_own_title
from ateam.cli._verb import Handler

if TYPE_CHECKING:
    from ateam.cli._verb import Verb

__all__ = ["VERBS", "build_parser", "main"]

_BROKEN_PIPE_EXIT = 128 + 13
"""What a shell shows for a process that SIGPIPE ended: the reader of stdout left."""

HIDDEN: dict[str, str] = {"__complete": "ateam.cli._complete"}
"""Verbs for programs, not people: name → the module whose ``main(argv)`` runs it.

Dispatched before the parser is built (so they start fast) and listed in no help.
"""


def main(argv: list[str] | None = None) -> int:
    # SIGPIPE stays ignored (Python's default): restoring its default action would let a
    # write to a Redis connection the server had just reset kill the process outright.
    # A closed stdout (`ateam ps | head`) is a BrokenPipeError, ended quietly below.
    if argv is not None:
        return _main(argv)  # a caller's process (tests): its collector is left alone
    _gc.hold()  # the start makes long-lived objects only: see ateam/_gc.py
    _telemetry_off.install()  # before redis-py is imported: see ateam/_telemetry_off.py
    mask_own_title()  # before anything slow: `ps` must not show a --redis password
    try:
        return _main(sys.argv[1:])
    finally:
        _gc.leave()


def _main(given: list[str]) -> int:
    if given and given[0] in HIDDEN:
        run: Callable[[list[str]], int] = importlib.import_module(HIDDEN[given[0]]).main
        return run(given[1:])
    if len(given) == 2 and given[0] == "completion":
        from ateam.cli.completion import SHELLS, print_script

        if given[1] in SHELLS:  # a file printed: no parser, no error catalogue
            return _quiet_pipe(print_script, given[1])
    from ateam.cli.agent_verb import fast_path

    if fast_path(given):  # a long-lived agent process: no verb table, no front end
        from ateam.cli.agent_verb import cmd_agent, parse

        parsed = parse(given[1:])
        return parsed if isinstance(parsed, int) else _run_handler(cmd_agent, parsed)
    from ateam.cli.parser import VERBS, build_parser

    # Only the verb named first is built: ``ateam --help`` and ``ateam ps`` import no
    # other verb's module. A first word that is no verb builds none (argparse refuses it).
    chosen = given[0] if given and given[0] in {verb.name for verb in VERBS} else ""
    parser = build_parser(only=chosen)
    try:
        args = parser.parse_args(given)
    except SystemExit as exc:
        if exc.code != 2:
            return int(exc.code or 0)  # --help, --version
        from ateam.exits import Exit

        # argparse exits 2 on bad usage, which ateam reserves for "Redis unavailable".
        return Exit.USAGE
    return _run_handler(args.handler, args)


def _run_handler(handler: Handler, args: argparse.Namespace) -> int:
    # The error catalogue is imported once a verb runs: help and --version need none of it.
    from ateam.cli._hints import cli_line
    from ateam.errors import AteamError
    from ateam.exits import Exit, cli_exit_code

    try:
        return handler(args)
    except AteamError as exc:
        # One place maps every error to its line and exit status: verbs raise.
        print(cli_line(exc, args), file=sys.stderr)
        return cli_exit_code(exc)
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except BrokenPipeError:
        return _reader_gone()


def _quiet_pipe(run: Callable[[str], int], arg: str) -> int:
    """``run(arg)``, ended like a verb when whoever read stdout has gone."""
    try:
        return run(arg)
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    # Whoever read stdout has gone, like `head`: end as quietly as a Unix tool, and
    # keep Python from complaining when it flushes stdout at exit.
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return _BROKEN_PIPE_EXIT


def __getattr__(name: str) -> Any:
    # The verb table and the parser import every verb's module: only when asked for, so
    # a hidden verb (shell completion) starts without them.
    if name in ("VERBS", "build_parser"):
        from ateam.cli import parser

        found: tuple[Verb, ...] | Callable[..., argparse.ArgumentParser] = getattr(parser, name)
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
