"""``ateam server start|stop|status``: the embedded Redis, for when no other bus is given."""

from __future__ import annotations

import argparse

from ateam.client import server_command


def cmd_server(args: argparse.Namespace) -> int:
    return server_command(args.action, as_json=args.json)
