"""Each verb's arguments, kept apart from its handler so that building them is cheap.

``ateam VERB --help`` and the parse before a verb runs build one verb's arguments; the
handlers' modules import the client, the bus and the console, which take longer to
import (redis-py, pydantic) than the whole rest of a help. So this module imports
argparse, the option helpers of :mod:`ateam.cli._verb` and constants, nothing heavier:
``tests/unit/cli/test_imports.py`` holds it to that.

Here so far: the agents family (:mod:`ateam.cli.agents`).
"""

from __future__ import annotations

import argparse

from ateam.cli._verb import add_json_option, add_project_option, add_redis_option
from ateam.constants import RPC_DEFAULT_DEADLINE_S


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


def ps_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    add_json_option(p, "the registry entries, with heartbeat_age_s")
    p.add_argument(
        "--project",
        nargs="?",
        const="",
        metavar="NAME",
        help="only the agents of project NAME (alone: of the project here)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every project in id order (default: the project here first, then the others)",
    )


def session_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    add_json_option(p, "the snapshot document")
    p.add_argument("--project", metavar="NAME", help="only this project (default: every one)")


_AGENT_HELP = "the agent: NAME in the project here, a unique prefix of it, or PROJECT/NAME"


_TAKEOVER_HELP = "{what} even while a console owns the agent (that console turns read-only)"


def send_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("id", metavar="NAME", help=_AGENT_HELP)
    add_project_option(p)
    p.add_argument("text", nargs="+", metavar="TEXT", help="the words to queue, as one input")
    p.add_argument("--takeover", action="store_true", help=_TAKEOVER_HELP.format(what="send"))
    add_json_option(p, "the queued item: id (the task id), agent, queued, created, redacted")
    p.add_argument(
        "--wait-for-start",
        action="store_true",
        help="if the agent is not running, keep the text in its mailbox: it is queued when "
        "the agent starts",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=RPC_DEFAULT_DEADLINE_S,
        metavar="SECONDS",
        help=f"how long to wait for the agent's answer (default {RPC_DEFAULT_DEADLINE_S:g})",
    )
    p.add_argument(
        "--request-id",
        metavar="ID",
        help="resend a send that timed out: an id the agent has seen is never queued twice",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help=(
            "wait for the task to end and print its answer instead of its id; exit 5 "
            "(task.failed) if it fails"
        ),
    )


def tail_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("id", metavar="NAME", help=_AGENT_HELP)
    add_project_option(p)
    p.add_argument(
        "--from",
        dest="from_offset",
        type=int,
        metavar="OFFSET",
        help="start at this event offset; 1 replays all that is kept (default: the newest 100)",
    )
    p.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new events until Ctrl+C"
    )
    add_json_option(
        p, "JSON Lines: one event a line (offset, type, ts, data; text chunks as data.text)"
    )


def stop_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("ids", nargs="+", metavar="NAME", help=_AGENT_HELP)
    add_project_option(p)
    p.add_argument("--takeover", action="store_true", help=_TAKEOVER_HELP.format(what="stop it"))
    p.add_argument(
        "--wait",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for each agent to leave the registry (default 10)",
    )
    add_json_option(p, "one row per agent: id, status (stopped or failed), pid, error")


def ack_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("id", metavar="NAME", help=_AGENT_HELP)
    add_project_option(p)
    p.add_argument(
        "--takeover", action="store_true", help=_TAKEOVER_HELP.format(what="clear its alerts")
    )
    add_json_option(p, "agent, alerts_cleared, exit_cleared (the exit record, or null)")
