"""``ateam server start|stop|status``: the embedded Redis, for people and scripts.

What the verbs print (lines, or one JSON object with ``--json``) and the exit codes they
return; the server itself, its record and the rule that no client stops a live server
are :mod:`ateam.bus.embedded`'s.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ateam._json import JsonObject
from ateam.errors import AteamError, UsageError
from ateam.exits import Exit, cli_exit_code

if TYPE_CHECKING:  # imported when a verb runs: most front ends never manage the server
    from ateam.bus.embedded import EmbeddedServer

__all__ = ["server_command"]


Report = tuple[int, JsonObject, list[str]]
"""An action's exit status, its JSON object and its lines for people."""


def _cmd_start(server: EmbeddedServer) -> Report:
    was_running = server.is_running()
    server.ensure()
    info = server.status()
    verb = "already running" if was_running else "started"
    # The URL carries no password (that travels separately), so it is safe to print.
    line = (
        f"embedded redis {verb} at {server.url} "
        f"(pid {info['pid']}, {info['server']} {info['version']})"
    )
    return 0, {**info, "url": server.url, "started": not was_running}, [line]


def _cmd_stop(server: EmbeddedServer) -> Report:
    stopped = server.stop()
    line = "embedded redis stopped" if stopped else "embedded redis not running"
    return 0, {"running": False, "stopped": stopped}, [line]


def _cmd_status(server: EmbeddedServer) -> Report:
    info = server.status()
    if info.get("elsewhere"):
        lines = [f"embedded redis runs on another host: {info['host']}"]
        lines += [f"{key}: {info[key]}" for key in ("pid", "socket", "data_dir", "started_by")]
        lines += [f"started_at: {info['started_at']}", f"note: {info['elsewhere']}"]
        return Exit.FAILED, info, lines
    if not info["running"]:
        lines = [
            "embedded redis not running",
            f"socket: {info['socket']}",
            f"data_dir: {info['data_dir']}",
        ]
        return Exit.FAILED, info, lines
    lines = ["running: yes"] + [
        f"{key}: {value}" for key, value in info.items() if key != "running"
    ]
    return 0, info, lines


_ACTIONS: dict[str, Callable[[EmbeddedServer], Report]] = {
    "start": _cmd_start,
    "stop": _cmd_stop,
    "status": _cmd_status,
}


def server_command(action: str, *, as_json: bool = False) -> int:
    """Run ``ateam server start|stop|status``, printing results to stdout.

    With ``as_json`` the result is one JSON object: ``status``'s fields (``running``,
    ``pid``, ``socket``, ``data_dir``, ``server``, ``version``, ...), and for ``start``
    also ``url`` and ``started`` (false when it was running already); ``stop`` prints
    ``{"running": false, "stopped": BOOL}``. The exit codes are the same.

    Exit codes:

    * ``0``: ``start`` found or started the server; ``stop`` stopped it or found
      nothing to stop (stopping is idempotent, like ``systemctl stop``); ``status``
      found it running (the output is ``key: value`` lines).
    * ``1``: ``status`` found no server running (the first line says "not running").
    * ``2``: the server could not be started, stopped or reached; a one-line error goes
      to stderr. This matches the CLI's "Redis unavailable" code.
    * ``4``: an unknown action.

    Args:
        action: ``start``, ``stop`` or ``status``.
        as_json: print one JSON object instead of lines.

    Returns:
        The process exit code.
    """
    handler = _ACTIONS.get(action)
    try:
        if handler is None:
            raise UsageError(f"unknown server action {action!r}; use one of: {', '.join(_ACTIONS)}")
        from ateam.bus.embedded import EmbeddedServer

        code, data, lines = handler(EmbeddedServer())
    except AteamError as exc:
        print(exc.one_line(), file=sys.stderr)
        return cli_exit_code(exc)
    if as_json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        for line in lines:
            print(line)
    return code
