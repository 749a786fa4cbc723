"""The team's agents: run one (``agent``), start a project's (``up``), and the verbs on
running agents (``ps``, ``session``, ``send``, ``tail``, ``stop``, ``ack``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import uuid
from pathlib import Path
from typing import Any

from ateam.cli._run import print_table, run_verb, target
from ateam.cli._verb import add_project_option, add_redis_option
from ateam.cli.console import run_console
from ateam.client import Gap, Team, local_redactor, secrets_notice
from ateam.config import ProjectConfig, load_project
from ateam.console.tables import PS_COLUMNS, ps_rows, table_lines
from ateam.constants import RPC_DEFAULT_DEADLINE_S
from ateam.errors import (
    AgentNotFound,
    AteamError,
    ConfigError,
    Exit,
    RedisUnavailable,
    RpcTimeout,
    UsageError,
)

# agent ------------------------------------------------------------------------------------


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
    p.add_argument("--name", required=True)
    p.add_argument("--cwd")
    p.add_argument("--model")
    p.add_argument("--no-repl", action="store_true")
    p.add_argument("--bootstrap", metavar="TOKEN")


# up / down --------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    project = load_project(root)
    bus = target(args, project)
    if args.down:  # also agents a console started, configured or not
        return _down(project)
    if not project.agents:
        raise ConfigError(f"no agents configured under {root}")
    from ateam.supervisor import start_agents

    started, failed = start_agents(project, bus, redis_url=args.redis)
    for line in started:
        print(line)
    if failed is not None:  # no console: the exit status must say it
        raise failed
    if args.detach:
        return 0
    return run_console(bus, plain=args.no_ui)


def _down(project: ProjectConfig) -> int:
    from ateam.supervisor import stop_agents

    lines, ok = stop_agents(project)
    for line in lines:
        print(line)
    return 0 if ok else 1


def up_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("dir", nargs="?", default=".")
    p.add_argument("--no-ui", action="store_true")
    p.add_argument("--down", action="store_true", help="stop the project's agents instead")
    p.add_argument("--detach", action="store_true", help="start the agents, open no console")


# ps / session -----------------------------------------------------------------------------


def cmd_ps(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        rows = ps_rows(await team.agents(), table=not args.json)
        if args.json:
            print(json.dumps(rows, indent=2, sort_keys=True))
            return 0
        print_table(rows, PS_COLUMNS)
        return 0

    return run_verb(args, "ps", work)


def ps_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("--json", action="store_true")


SESSION_AGENT_COLUMNS = ["id", "state", "model", "queue_len", "current_task", "host", "last_seen"]
SESSION_TASK_COLUMNS = ["id", "status", "priority", "assignee", "title"]


def cmd_session(args: argparse.Namespace) -> int:
    """``ateam session``: the snapshot ``~/.ateam/session.json`` holds, fresh from the bus."""

    async def work(team: Team) -> int:
        document = await team.snapshot(None if args.project is None else [args.project])
        if args.json:
            print(json.dumps(document, indent=2, ensure_ascii=False))
        else:
            _print_session(document)
        return 0

    return run_verb(args, "session", work)


def _print_session(document: dict[str, Any]) -> None:
    print(f"session on {document['bus']} at {document['generated_at']}")
    if not document["projects"]:
        print("no agents")
    for name, project in document["projects"].items():
        counts = ", ".join(f"{n} {status}" for status, n in project["task_counts"].items())
        print(f"\nproject {name}: agents {len(project['agents'])}; tasks {counts}")
        for rows, columns in (
            (project["agents"], SESSION_AGENT_COLUMNS),
            (project["tasks"], SESSION_TASK_COLUMNS),
        ):
            for line in table_lines(rows, columns) if rows else []:
                print(f"  {line}")
        for item in project["attention"]:
            source = item["source_agent"] or item["source_runtime"]
            print(f"  ! [{item['urgency']}] {item['title']} ({item['id']}, from {source})")


def session_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--project", metavar="NAME", help="only this project (default: every one)")


# send -------------------------------------------------------------------------------------

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def _send_options(args: argparse.Namespace) -> tuple[str, float]:
    """The request id (one for every attempt of this send) and the timeout, checked."""
    rid = args.request_id if args.request_id is not None else uuid.uuid4().hex
    if not _REQUEST_ID.fullmatch(rid):
        raise UsageError("--request-id takes 1 to 64 letters, digits and . _ : -")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError("--timeout takes a positive number of seconds")
    return rid, float(args.timeout)


def _unconfirmed(
    exc: RpcTimeout | RedisUnavailable, agent: str, rid: str, timeout: float
) -> AteamError:
    """The error for an input whose fate is unknown: it names how to find out, and fix it."""
    what = (
        f"{agent} did not answer within {timeout:g}s"
        if isinstance(exc, RpcTimeout)
        else exc.message
    )
    message = (
        f"{what}; request {rid} may or may not have been queued — check with "
        f"`ateam tail {agent}`, or resend the same text with "
        f"`ateam send {agent} --request-id {rid} ...` (a request id is queued at most once)"
    )
    return type(exc)(message, detail={**exc.detail, "request_id": rid, "queued": None})


def cmd_send(args: argparse.Namespace) -> int:
    # One request id for every attempt, chosen before the first: the RPC client retries
    # with it, and so can the user (--request-id), without ever queueing the text twice.
    rid, timeout = _send_options(args)  # a UsageError is main()'s (exit 4)

    async def work(team: Team) -> int:
        # Started before the send, so no event of the task can pass unseen; a resend
        # (--request-id) may name a task that ended already, so it reads from the start.
        watch = team.watch(args.id) if args.wait else None
        if watch is not None:
            await watch.start(from_start=args.request_id is not None)
        # Redacted by the client, before anything reaches Redis (its request stream, its
        # AOF), with the patterns of this project and of the agent's, if it runs here.
        try:
            sent = await team.agent(args.id).send(
                " ".join(args.text),
                source="cli",
                request_id=rid,
                timeout=timeout,
                takeover=args.takeover,
            )
        except (RpcTimeout, RedisUnavailable) as exc:
            # The request may have reached the agent before the reply was lost.
            raise _unconfirmed(exc, args.id, rid, timeout) from exc
        notice = secrets_notice(sent.redacted)
        if notice:
            print(notice, file=sys.stderr)
        if watch is None:
            print(sent.id)
            return 0
        # The answer alone on stdout, for `answer=$(ateam send --wait ...)`.
        print(f"task {sent.id} queued on {args.id}; waiting for its end", file=sys.stderr)
        result = await watch.result(sent.id)
        if result.answer:
            print(result.answer.rstrip("\n"))
        failure = result.failure()
        if failure is not None:
            raise failure
        return 0

    return run_verb(args, "send", work, redactor=local_redactor())


def send_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("id")
    add_project_option(p)
    p.add_argument("text", nargs="+")
    p.add_argument("--takeover", action="store_true")
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


# tail / stop / ack ------------------------------------------------------------------------


def cmd_tail(args: argparse.Namespace) -> int:
    from ateam.console.plain import PlainView

    async def work(team: Team) -> int:
        # A stopped agent's retained events are still worth reading; an id with
        # neither a stream nor a registry entry is a typo.
        if not (await team.has_events(args.id) or await team.status(args.id)):
            raise AgentNotFound(f"no agent {args.id!r} and no events for it on this bus")
        view = PlainView(asyncio.Queue())
        async for item in team.agent(args.id).tail(args.from_offset, follow=args.follow):
            view.gap(item) if isinstance(item, Gap) else view.event(item)
        view.flush()  # the start of a line that is still being streamed
        return 0

    return run_verb(args, "tail", work)


def tail_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("id")
    add_project_option(p)
    p.add_argument("--from", dest="from_offset", type=int, metavar="OFFSET")
    p.add_argument("--follow", "-f", action="store_true")


def cmd_stop(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        if not await team.agent(args.id).stop(wait=args.wait, takeover=args.takeover):
            print(f"{args.id} was asked to stop but is still registered", file=sys.stderr)
            return Exit.FAILED
        print(f"stopped {args.id}")
        return 0

    return run_verb(args, "stop", work)


def stop_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("id")
    add_project_option(p)
    p.add_argument("--takeover", action="store_true")
    p.add_argument("--wait", type=float, default=10.0)


def cmd_ack(args: argparse.Namespace) -> int:
    """``ateam ack NAME``: a person has seen the agent's ALERT in ``ps``; clear it."""

    async def work(team: Team) -> int:
        print((await team.acknowledge(args.id, takeover=args.takeover)).line())
        return 0

    return run_verb(args, "ack", work)


def ack_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("id")
    add_project_option(p)
    p.add_argument("--takeover", action="store_true")
