"""The team's agents: run one (``agent``), and the verbs on running agents (``ps``,
``session``, ``send``, ``tail``, ``stop``, ``ack``). Starting a project's agents is
:mod:`ateam.cli.lifecycle`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import uuid
from typing import Any

from ateam.cli._hints import cli_line
from ateam.cli._run import print_table, run_verb
from ateam.client import Team, local_redactor, secrets_notice
from ateam.config.discovery import find_project_root
from ateam.console.tables import PS_COLUMNS, ps_rows, table_lines
from ateam.errors import (
    AgentNotFound,
    AteamError,
    OwnershipDenied,
    RedisUnavailable,
    RpcTimeout,
    UsageError,
)
from ateam.exits import Exit, cli_exit_code

# agent ------------------------------------------------------------------------------------


# ps / session -----------------------------------------------------------------------------


def cmd_ps(args: argparse.Namespace) -> int:
    """``ateam ps``: the project here first; ``--project`` only one, ``--all`` in id order."""
    only = _ps_project(args)
    here = None if args.all or only is not None else _project_here()

    async def work(team: Team) -> int:
        views = await team.agents()
        if only is not None:
            views = [view for view in views if view.entry.project == only]
        # Sorted by id already; a stable sort puts the project here in front.
        views.sort(key=lambda view: view.entry.project != here)
        rows = ps_rows(views, table=not args.json)
        if args.json:
            print(json.dumps(rows, indent=2, sort_keys=True))
            return 0
        if not rows and only is not None:
            print(f"no agents of {only}")
            return 0
        print_table(rows, PS_COLUMNS)
        return 0

    return run_verb(args, "ps", work)


def _ps_project(args: argparse.Namespace) -> str | None:
    """The one project ``--project`` asks for (bare: the one here), else ``None``."""
    if args.project is None:
        return None
    if args.all:
        raise UsageError("--all lists every project; --project only one: give one of them")
    from ateam.config.loader import project_name

    return args.project or project_name(None)


def _project_here() -> str | None:
    """:func:`~ateam.config.loader.project_here`; its loader (YAML, the schemas) is
    imported only when a project is around the cwd to be named."""
    if find_project_root() is None:
        return None
    from ateam.config.loader import project_here

    return project_here()


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
        if args.wait_for_start and await _kept_for_start(team, args, rid):
            return 0  # kept in its mailbox: the agent queues it when it starts
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
        row: dict[str, object] = {"agent": args.id, **sent.model_dump(mode="json")}
        if watch is None:
            print(json.dumps(row, indent=2, sort_keys=True) if args.json else sent.id)
            return 0
        print(f"task {sent.id} queued on {args.id}; waiting for its end", file=sys.stderr)
        result = await watch.result(sent.id)
        failure = result.failure()
        if args.json:
            # With --wait the row also holds the end: whether it went well, the answer,
            # the error's code (None: it went well, or its end was never seen).
            row.update(ok=result.ok, answer=result.answer, code=result.code)
            print(json.dumps(row, indent=2, sort_keys=True))
        elif result.answer:
            # The answer alone on stdout, for `answer=$(ateam send --wait ...)`.
            print(result.answer.rstrip("\n"))
        if failure is not None:
            raise failure
        return 0

    return run_verb(args, "send", work, redactor=local_redactor())


async def _kept_for_start(team: Team, args: argparse.Namespace, rid: str) -> bool:
    """:func:`~ateam.cli.mail.keep_for_start`: whether the text was left in a mailbox.

    Imported here: the mailbox verbs' module is only for ``--wait-for-start``.
    """
    from ateam.cli.mail import keep_for_start

    return await keep_for_start(team, args, rid) is not None


# tail / stop / ack ------------------------------------------------------------------------


def cmd_tail(args: argparse.Namespace) -> int:
    from ateam.client import Gap
    from ateam.client.tail import event_json
    from ateam.console.plain import PlainView

    async def work(team: Team) -> int:
        # A stopped agent's retained events are still worth reading; an id with
        # neither a stream nor a registry entry is a typo.
        if not (await team.has_events(args.id) or await team.status(args.id)):
            raise AgentNotFound(f"no agent {args.id!r} and no events for it on this bus")
        stream = team.agent(args.id).tail(args.from_offset, follow=args.follow)
        if args.json:
            # JSON Lines, one event (or gap) a line, flushed: a pipe sees each at once.
            async for item in stream:
                row = (
                    {"gap": {"first": item.first, "last": item.last}}
                    if isinstance(item, Gap)
                    else event_json(item)
                )
                print(json.dumps(row, sort_keys=True), flush=True)
            return 0
        view = PlainView(asyncio.Queue())
        async for item in stream:
            view.gap(item) if isinstance(item, Gap) else view.event(item)
        view.flush()  # the start of a line that is still being streamed
        return 0

    return run_verb(args, "tail", work)


def cmd_stop(args: argparse.Namespace) -> int:
    """``ateam stop NAME…``: each agent shuts down gracefully; a supervisor leaves it down."""

    async def work(team: Team) -> int:

        rows: list[dict[str, object]] = []
        code = 0
        for agent in args.ids:
            view = await team.status(agent)
            pid = view.entry.pid if view is not None else None
            try:
                gone = await team.agent(agent).stop(wait=args.wait, takeover=args.takeover)
            except (OwnershipDenied, AgentNotFound) as exc:
                # One refusal (a console owns it) stops neither the others nor the report.
                rows.append({"id": agent, "status": "failed", "pid": pid, "log": None,
                             "error": exc.one_line()})  # fmt: skip
                code = code or cli_exit_code(exc)
                if not args.json:
                    print(cli_line(exc, argparse.Namespace(id=agent)), file=sys.stderr)
                continue
            error = None if gone else f"asked to stop, still registered after {args.wait:g} s"
            status = "stopped" if gone else "failed"
            rows.append({"id": agent, "status": status, "pid": pid, "log": None, "error": error})
            code = code or (0 if gone else Exit.FAILED)
            if not args.json:
                line = f"stopped {agent}" if gone else f"{agent} was {error}"
                print(line, file=sys.stdout if gone else sys.stderr)
        if args.json:
            print(json.dumps(rows, indent=2, sort_keys=True))
        return code

    return run_verb(args, "stop", work)


def cmd_ack(args: argparse.Namespace) -> int:
    """``ateam ack NAME``: a person has seen the agent's ALERT in ``ps``; clear it."""

    async def work(team: Team) -> int:
        done = await team.acknowledge(args.id, takeover=args.takeover)
        if args.json:
            final = None if done.exit is None else done.exit.to_wire()
            row = {"agent": done.agent, "alerts_cleared": done.alerts, "exit_cleared": final}
            print(json.dumps(row, indent=2, sort_keys=True))
        else:
            print(done.line())
        return 0

    return run_verb(args, "ack", work)
