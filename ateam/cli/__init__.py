"""Every ``ateam …`` command: parse, call, print. The work lives in the packages.

The layout, one module per verb family over :mod:`ateam.client`::

    parser.py    the table of every verb (name, help, handler, arguments, actions)
                 and build_parser(), which walks it
    agents.py    agent (runs ateam.agent.runtime.main), up, ps, session, send, tail, stop, ack
    console.py   console: panes, plain lines, or a browser
    kb.py        kb add|search|ls
    tasks.py     tasks ls|add|claim|done|fail
    context.py   context ls|search|post
    acl.py       acl
    mcp.py       mcp
    server.py    server start|stop|status
    init.py      init
    _verb.py     how a verb is declared, and the options several families take
    _run.py      the project, the bus and a team session for one verb's run

Handlers raise; :func:`main` alone maps an :class:`~ateam.errors.AteamError` to its
line and exit status. Nothing here talks to Redis: ``tests/unit/test_layers.py``
checks that the CLI imports :mod:`ateam.client`, never :mod:`ateam.bus`.
"""

from __future__ import annotations

import contextlib
import os
import sys

from ateam._cmdline import mask_own_title
from ateam.cli._verb import Handler
from ateam.cli.parser import VERBS, build_parser
from ateam.errors import AteamError, Exit, cli_exit_code

__all__ = ["VERBS", "build_parser", "main"]

_BROKEN_PIPE_EXIT = 128 + 13
"""What a shell shows for a process that SIGPIPE ended: the reader of stdout left."""


def main(argv: list[str] | None = None) -> int:
    # SIGPIPE stays ignored (Python's default): restoring its default action would let a
    # write to a Redis connection the server had just reset kill the process outright.
    # A closed stdout (`ateam ps | head`) is a BrokenPipeError, ended quietly below.
    if argv is None:
        mask_own_title()  # before anything slow: `ps` must not show a --redis password
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        # argparse exits 2 on bad usage, which ateam reserves for "Redis unavailable".
        return Exit.USAGE if exc.code == 2 else int(exc.code or 0)
    handler: Handler = args.handler
    try:
        return handler(args)
    except AteamError as exc:
        # One place maps every error to its line and exit status (SPEC §2): verbs raise.
        print(exc.one_line(), file=sys.stderr)
        return cli_exit_code(exc)
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except BrokenPipeError:
        # Whoever read stdout has gone, like `head`: end as quietly as a Unix tool, and
        # keep Python from complaining when it flushes stdout at exit.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _BROKEN_PIPE_EXIT
