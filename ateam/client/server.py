"""``ateam server start|stop|status``: the embedded Redis, for people (SPEC §2.1).

What the verbs print and the exit codes they return; the server itself, its record and
the rule that no client stops a live server are :mod:`ateam.bus.embedded`'s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ateam.errors import AteamError, Exit, UsageError, cli_exit_code

if TYPE_CHECKING:  # imported when a verb runs: most front ends never manage the server
    from ateam.bus.embedded import EmbeddedServer

__all__ = ["server_command"]


def _cmd_start(server: EmbeddedServer) -> int:
    was_running = server.is_running()
    server.ensure()
    info = server.status()
    verb = "already running" if was_running else "started"
    # The URL carries no password (that travels separately), so it is safe to print.
    print(
        f"embedded redis {verb} at {server.url} "
        f"(pid {info['pid']}, {info['server']} {info['version']})"
    )
    return 0


def _cmd_stop(server: EmbeddedServer) -> int:
    print("embedded redis stopped" if server.stop() else "embedded redis not running")
    return 0


def _cmd_status(server: EmbeddedServer) -> int:
    info = server.status()
    if info.get("elsewhere"):
        print(f"embedded redis runs on another host: {info['host']}")
        for key in ("pid", "socket", "data_dir", "started_by", "started_at"):
            print(f"{key}: {info[key]}")
        print(f"note: {info['elsewhere']}")
        return Exit.FAILED
    if not info["running"]:
        print("embedded redis not running")
        print(f"socket: {info['socket']}")
        print(f"data_dir: {info['data_dir']}")
        return Exit.FAILED
    print("running: yes")
    for key, value in info.items():
        if key != "running":
            print(f"{key}: {value}")
    return 0


_ACTIONS: dict[str, Callable[[EmbeddedServer], int]] = {
    "start": _cmd_start,
    "stop": _cmd_stop,
    "status": _cmd_status,
}


def server_command(action: str) -> int:
    """Run ``ateam server start|stop|status``, printing results to stdout.

    Exit codes:

    * ``0``: ``start`` found or started the server; ``stop`` stopped it or found
      nothing to stop (stopping is idempotent, like ``systemctl stop``); ``status``
      found it running (the output is ``key: value`` lines).
    * ``1``: ``status`` found no server running (the first line says "not running").
    * ``2``: the server could not be started, stopped or reached; a one-line error goes
      to stderr. This matches the CLI's "Redis unavailable" code (SPEC §2).
    * ``4``: an unknown action.

    Args:
        action: ``start``, ``stop`` or ``status``.

    Returns:
        The process exit code.
    """
    handler = _ACTIONS.get(action)
    try:
        if handler is None:
            raise UsageError(f"unknown server action {action!r}; use one of: {', '.join(_ACTIONS)}")
        from ateam.bus.embedded import EmbeddedServer

        return handler(EmbeddedServer())
    except AteamError as exc:
        print(exc.one_line(), file=sys.stderr)
        return cli_exit_code(exc)
