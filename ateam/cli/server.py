"""``ateam server start|stop|status``: the embedded Redis, for when no other bus is given."""

from __future__ import annotations

import argparse

from ateam.cli._verb import add_json_option
from ateam.client import server_command


def cmd_server(args: argparse.Namespace) -> int:
    return server_command(args.action, as_json=args.json)


def server_args(p: argparse.ArgumentParser) -> None:
    # No --redis: this verb is about the one server ateam starts itself.
    p.add_argument(
        "action",
        choices=["start", "stop", "status"],
        help="start it (or find it running), stop it, or say how it is",
    )
    add_json_option(p, "one object: running, pid, socket, version, ... (url, started for start)")
