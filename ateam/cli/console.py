"""``ateam console``: the interactive console, in panes, plain lines or a browser.

The consoles themselves live in :mod:`ateam.console`; this picks one and starts it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from ateam._token import token_from_file
from ateam.cli._run import project_or_none, target
from ateam.cli._verb import port_number
from ateam.client import Target
from ateam.errors import UsageError


def cmd_console(args: argparse.Namespace) -> int:
    web_only = (args.host, args.port, args.token_file) != (None, None, None) or args.read_only
    if web_only and not args.web:
        raise UsageError("--host, --port, --token-file and --read-only go with --web")
    if args.web and (args.no_ui or args.panes):
        raise UsageError("--web serves the panes console; --no-ui and --panes do not go with it")
    bus = target(args, project_or_none())
    if args.web:
        return _console_web(args, bus)
    return run_console(bus, plain=args.no_ui, force_panes=args.panes)


def _console_web(args: argparse.Namespace, bus: Target) -> int:
    """``ateam console --web``: the panes console in a browser, one console per tab."""
    try:
        from ateam.console.web import DEFAULT_PORT, WebOptions, serve
    except ImportError as exc:  # textual-serve is an extra
        need = f"ateam console --web needs the web extra: pip install 'ateam[web]' ({exc})"
        raise UsageError(need) from None
    try:
        port = DEFAULT_PORT if args.port is None else port_number(args.port)
    except (ValueError, argparse.ArgumentTypeError):
        raise UsageError(f"--port {args.port}: a port is a number from 0 to 65535") from None
    token: dict[str, str] = {}
    if args.token_file is not None:
        found = token_from_file(args.token_file)
        token["token"] = found.token
        print(found.line("ateam console"), flush=True)
    options = WebOptions(
        host=args.host or "127.0.0.1",
        port=port,
        read_only=args.read_only,
        redis_url=args.redis,
        **token,
    )
    asyncio.run(serve(options, bus))
    return 0


def panes_capable() -> bool:
    """A terminal a full-screen UI can use: both ends a TTY, and a TERM that is not dumb."""
    term = os.environ.get("TERM", "")
    return sys.stdin.isatty() and sys.stdout.isatty() and term not in ("", "dumb")


def run_console(
    bus: Target, *, plain: bool, force_panes: bool = False, first_lines: Sequence[str] = ()
) -> int:
    """Panes mode on a capable terminal, plain line mode otherwise or on request.

    ``first_lines`` run as if typed first (``ateam attach NAME``: ``/attach NAME``).
    ``/ui panes on|off`` ends one front end and starts the other on the same bus,
    re-attached to the agent the first one was attached to.
    """
    from ateam.console.plain import run_plain

    interactive = sys.stdin.isatty()
    possible = panes_capable() or force_panes
    panes = possible and not plain
    first: list[str] = list(first_lines)
    while True:
        if not panes:
            outcome = asyncio.run(
                run_plain(bus, interactive=interactive, first_lines=first, panes_possible=possible)
            )
            if not outcome.to_panes:
                return outcome.code
            first, panes = outcome.first_lines, True
            continue
        from ateam.console.controller import ConsoleController
        from ateam.console.panes import EXIT_ERROR, EXIT_PLAIN, ConsoleApp

        app = ConsoleApp(lambda view: ConsoleController(bus, view), first_lines=first)
        result = app.run()
        if result == EXIT_ERROR:
            error = app.startup_error
            print(
                error.one_line() if error else "error: the console could not start", file=sys.stderr
            )
            return app.return_code or 1
        if result != EXIT_PLAIN:
            return 0
        # /ui panes off: the same session continues line by line.
        first = [f"/attach {app.attached_at_exit}"] if app.attached_at_exit else []
        panes = False
