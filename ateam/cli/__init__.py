"""Every ``ateam …`` command: parse, call, print. The work lives in the packages.

Longer than most modules on purpose: each verb is a short handler on
:mod:`ateam.client` beside its own arguments, and one file read top to bottom is the
whole command line. Nothing here talks to Redis; ``tests/unit/test_layers.py`` checks it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ateam import __version__
from ateam._cmdline import mask_own_title
from ateam.client import (
    BoardTask,
    ContextItem,
    Gap,
    KbProgress,
    Target,
    Team,
    bus_errors,
    local_redactor,
    resolve_target,
    server_command,
    session_id,
)
from ateam.client.acl import acl_setuser
from ateam.config import ProjectConfig, load_project, project_name
from ateam.config.schema import checked_name
from ateam.console.tables import (
    KB_HIT_COLUMNS,
    PS_COLUMNS,
    kb_hit_rows,
    kb_progress_line,
    ps_rows,
    table_lines,
)
from ateam.constants import (
    DEFAULT_NAMESPACE,
    RPC_DEFAULT_DEADLINE_S,
)
from ateam.errors import (
    AgentNotFound,
    AteamError,
    ConfigError,
    Exit,
    RedisUnavailable,
    RpcTimeout,
    UsageError,
    cli_exit_code,
)
from ateam.kb.scopes import DEFAULT_SCOPE, SCOPES
from ateam.redact import Redactor


def _target(args: argparse.Namespace, project: ProjectConfig | None) -> Target:
    """``--redis``, ATEAM_REDIS_URL, tools.yaml, else the embedded server (started on demand)."""
    return resolve_target(args.redis, project)


def _project(start: Path | None = None) -> ProjectConfig:
    return load_project(start or Path.cwd())


# agent ------------------------------------------------------------------------------


def cmd_agent(args: argparse.Namespace) -> int:
    from ateam.agent.main import AgentOptions, run_agent

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


# console ------------------------------------------------------------------------------


def cmd_console(args: argparse.Namespace) -> int:
    web_only = (args.host, args.port, args.token_file) != (None, None, None) or args.read_only
    if web_only and not args.web:
        raise UsageError("--host, --port, --token-file and --read-only go with --web")
    if args.web and (args.no_ui or args.panes):
        raise UsageError("--web serves the panes console; --no-ui and --panes do not go with it")
    target = _target(args, _project_or_none())
    if args.web:
        return _console_web(args, target)
    return run_console(target, plain=args.no_ui, force_panes=args.panes)


def _console_web(args: argparse.Namespace, target: Target) -> int:
    """``ateam console --web``: the panes console in a browser, one console per tab."""
    try:
        from ateam.console.web import DEFAULT_PORT, WebOptions, serve
    except ImportError as exc:  # textual-serve is an extra
        need = f"ateam console --web needs the web extra: pip install 'ateam[web]' ({exc})"
        raise UsageError(need) from None
    try:
        port = DEFAULT_PORT if args.port is None else _port(args.port)
    except (ValueError, argparse.ArgumentTypeError):
        raise UsageError(f"--port {args.port}: a port is a number from 0 to 65535") from None
    options = WebOptions(
        host=args.host or "127.0.0.1",
        port=port,
        token_file=args.token_file,
        read_only=args.read_only,
        redis_url=args.redis,
    )
    asyncio.run(serve(options, target))
    return 0


def panes_capable() -> bool:
    """A terminal a full-screen UI can use: both ends a TTY, and a TERM that is not dumb."""
    term = os.environ.get("TERM", "")
    return sys.stdin.isatty() and sys.stdout.isatty() and term not in ("", "dumb")


def run_console(target: Target, *, plain: bool, force_panes: bool = False) -> int:
    """Panes mode on a capable terminal (SPEC §6), plain line mode otherwise or on request.

    ``/ui panes on|off`` ends one front end and starts the other on the same bus,
    re-attached to the agent the first one was attached to.
    """
    from ateam.console.plain import run_plain

    interactive = sys.stdin.isatty()
    possible = panes_capable() or force_panes
    panes = possible and not plain
    first: list[str] = []
    while True:
        if not panes:
            outcome = asyncio.run(
                run_plain(
                    target, interactive=interactive, first_lines=first, panes_possible=possible
                )
            )
            if not outcome.to_panes:
                return outcome.code
            first, panes = outcome.first_lines, True
            continue
        from ateam.console.controller import ConsoleController
        from ateam.console.panes import EXIT_ERROR, EXIT_PLAIN, ConsoleApp

        app = ConsoleApp(lambda view: ConsoleController(target, view), first_lines=first)
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


def _project_or_none() -> ProjectConfig | None:
    try:
        return _project()
    except ConfigError as exc:
        print(f"warning: ignoring configuration: {exc.message}", file=sys.stderr)
        return None


# scriptable verbs ---------------------------------------------------------------------


Work = Callable[[Team], Awaitable[int]]
"""A verb's part that runs on the team: returns the exit code."""


async def _with_team(target: Target, verb: str, redactor: Redactor, work: Work) -> int:
    # Host, pid and a random part in the session id (see session_id): two verbs with
    # one id would take each other's one-call claims for their own.
    team = await Team.connect(target, session=session_id(verb), redactor=redactor)
    try:
        with bus_errors():
            return await work(team)
    finally:
        await team.aclose()


def cmd_ps(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        rows = ps_rows(await team.agents())
        if args.json:
            print(json.dumps(rows, indent=2, sort_keys=True))
            return 0
        _print_table(rows, PS_COLUMNS)
        return 0

    return _run_verb(args, "ps", work)


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

    return _run_verb(args, "session", work)


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
        print(sent.id)
        notice = sent.notice()
        if notice:
            print(notice, file=sys.stderr)
        return 0

    return _run_verb(args, "send", work, redactor=local_redactor())


def cmd_stop(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        if not await team.agent(args.id).stop(wait=args.wait, takeover=args.takeover):
            print(f"{args.id} was asked to stop but is still registered", file=sys.stderr)
            return Exit.FAILED
        print(f"stopped {args.id}")
        return 0

    return _run_verb(args, "stop", work)


def cmd_ack(args: argparse.Namespace) -> int:
    """``ateam ack NAME``: a person has seen the agent's ALERT in ``ps``; clear it."""

    async def work(team: Team) -> int:
        print((await team.acknowledge(args.id, takeover=args.takeover)).line())
        return 0

    return _run_verb(args, "ack", work)


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

    return _run_verb(args, "tail", work)


def _run_verb(
    args: argparse.Namespace, verb: str, work: Work, *, redactor: Redactor | None = None
) -> int:
    """Resolve the id and the bus, run ``work`` on a team session, print any error."""
    try:
        _resolve_id(args)
        target = _target(args, _project_or_none())
        return asyncio.run(_with_team(target, verb, redactor or Redactor(), work))
    except KeyboardInterrupt:
        return Exit.INTERRUPTED


# project inference --------------------------------------------------------------------


def _resolve_id(args: argparse.Namespace) -> None:
    """Turn a bare agent name (``zeus``) into ``project/zeus``; a full id stays as it is."""
    given = getattr(args, "id", None)
    if isinstance(given, str) and "/" not in given:
        args.id = f"{project_name(getattr(args, 'project', None))}/{given}"


# init ---------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    from ateam.config.scaffold import init_project

    made = init_project(Path(args.dir), name=args.name, agent=args.agent)
    print(f"created project {made.project} in {made.root}:")
    for path in made.files:
        print(f"  {path}")
    print(f'start it with `ateam up {args.dir}`; then `ateam send {made.agent} "hello"`')
    return 0


# kb -------------------------------------------------------------------------------------


class _PlainProgress:
    """Ingest progress for a pipe or a file: one ``kb agent: 3/10 path`` line per file."""

    def __init__(self, scope: str) -> None:
        self.scope = scope

    def seen(self, progress: KbProgress) -> None:
        print(kb_progress_line(progress))

    def __enter__(self) -> _PlainProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


class _BarProgress(_PlainProgress):
    """Ingest progress on a terminal: a bar that fills as files are read, redrawn in place."""

    def __init__(self, scope: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        super().__init__(scope)
        self._bar = Progress(
            TextColumn(f"kb {scope}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
        )
        self._task = self._bar.add_task("", total=None)

    def __enter__(self) -> _PlainProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._bar.stop()

    def seen(self, progress: KbProgress) -> None:
        self._bar.update(
            self._task,
            completed=progress.done,
            total=progress.total,
            description=Path(progress.path).name,
        )


_PROGRESS: dict[bool, type[_PlainProgress]] = {True: _BarProgress, False: _PlainProgress}
"""Whether stdout is a terminal → how ingest progress is shown."""


def cmd_kb_add(args: argparse.Namespace) -> int:
    # A path that exists here is sent absolute (the CLI and the agent usually share a
    # host); anything else is the agent's to resolve against its cwd.
    paths = [str(Path(p).expanduser().resolve()) if Path(p).exists() else p for p in args.paths]

    async def work(team: Team) -> int:
        with _PROGRESS[sys.stdout.isatty()](args.scope) as show:
            report = await team.agent(args.id).kb.ingest(
                args.scope, paths, on_progress=show.seen, takeover=args.takeover
            )
        print(
            f"kb {args.scope} of {args.id}: {len(report.ingested)} document(s) ingested, "
            f"{report.chunks} chunk(s), {len(report.skipped)} skipped"
        )
        for doc in report.ingested:
            print(f"  + {doc.doc_id} {doc.path} ({doc.chunks} chunks)")
        for skipped in report.skipped:
            dup = f" (duplicate of {skipped.duplicate_of})" if skipped.duplicate_of else ""
            print(f"  - {skipped.path}: {skipped.reason}{dup}")
        return 0

    return _run_verb(args, "kb", work)


def cmd_kb_search(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        hits = await team.agent(args.id).kb.search(args.scope, " ".join(args.query), args.k)
        if args.json:
            print(json.dumps(hits, indent=2, sort_keys=True))
        elif not hits:
            print(f"no passage in the {args.scope} kb of {args.id} scores above the minimum")
        else:
            _print_table(kb_hit_rows(hits), KB_HIT_COLUMNS)
        return 0

    return _run_verb(args, "kb", work)


def cmd_kb_ls(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        docs = await team.agent(args.id).kb.list(args.scope)
        if args.json:
            print(json.dumps(docs, indent=2, sort_keys=True))
        elif not docs:
            print(f"the {args.scope} kb of {args.id} is empty")
        else:
            _print_table(docs, ["doc_id", "path", "chunks", "source_agent"])
        return 0

    return _run_verb(args, "kb", work)


def _print_table(rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    if not rows:
        print("no agents")
        return
    for line in table_lines(rows, columns):
        print(line)


def _kb_add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--takeover", action="store_true")


def _kb_search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", nargs="+", metavar="WORD")
    p.add_argument("--k", type=int, help="at most this many passages (default 8)")
    p.add_argument("--json", action="store_true")


def _kb_ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")


ArgsAdder = Callable[[argparse.ArgumentParser], None]
Action = tuple[str, Callable[[argparse.Namespace], int], ArgsAdder, str]
"""A verb's action: name, handler, its own arguments, help."""


def _add_actions(
    sub: Any,
    verb: str,
    text: str,
    table: list[Action],
    *,
    common: ArgsAdder,
    first: ArgsAdder | None = None,
) -> None:
    """``ateam VERB ACTION …``: one subparser per action of ``table``.

    ``first`` adds what comes before the action's own arguments (positionals keep that
    order), ``common`` what every action takes after them.
    """
    parser = sub.add_parser(verb, help=text, description=text)
    actions = parser.add_subparsers(dest=f"{verb}_action", required=True)
    for name, handler, own_args, help_text in table:
        p = actions.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        if first is not None:
            first(p)
        own_args(p)
        common(p)


def _add_redis_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis",
        metavar="URL",
        help="redis://, rediss://, unix://, redis+cluster:// or redis+sentinel:// URL",
    )


_KB_ACTIONS: list[Action] = [
    ("add", cmd_kb_add, _kb_add_args, "ingest files and directories (the agent's sandbox only)"),
    ("search", cmd_kb_search, _kb_search_args, "the passages most like a query, best first"),
    ("ls", cmd_kb_ls, _kb_ls_args, "the documents of a scope"),
]
"""``ateam kb`` actions."""


def _kb_agent(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="agent id PROJECT/NAME, or NAME within the current project")


def _kb_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scope", choices=SCOPES, default=DEFAULT_SCOPE)
    _add_redis_option(p)
    _add_project_option(p)


def _add_kb_parser(sub: Any) -> None:
    """``ateam kb add|search|ls``: every action takes every option after its words."""
    text = "knowledge-base operations on an agent's scopes (SPEC §10)"
    _add_actions(sub, "kb", text, _KB_ACTIONS, first=_kb_agent, common=_kb_common)


# tasks ----------------------------------------------------------------------------------

TaskWork = Callable[[Team, str], Awaitable[int]]
"""A ``tasks`` action's part that runs on the team, given the project: returns the exit code."""
TASK_COLUMNS = ["id", "status", "priority", "assignee", "depends_on", "title"]


def _run_tasks(args: argparse.Namespace, work: TaskWork, verb: str = "tasks") -> int:
    """The project (``--project`` or the nearest one), then ``work`` on a team session."""
    project = project_name(args.project)

    async def on_team(team: Team) -> int:
        return await work(team, project)

    # The project's redact.yaml patterns too, as for `ateam send`: items and tasks are
    # read by every agent and console of the project.
    return _run_verb(args, verb, on_team, redactor=local_redactor())


def _as_agent(value: str) -> str:
    """``--as``: a full agent id, since a claim names who holds it on the whole bus."""
    if "/" not in value:
        raise argparse.ArgumentTypeError(f"--as takes an agent id PROJECT/NAME; got {value!r}")
    return value


def _redaction_notice(notice: str | None) -> None:
    """Tell the sender that secrets were masked (on stderr, as ``ateam send`` does)."""
    if notice:
        print(notice, file=sys.stderr)


def _print_task(task: BoardTask, as_json: bool, verb: str) -> None:
    if as_json:
        print(json.dumps(task.to_wire(), indent=2, sort_keys=True))
    else:
        who = f" by {task.assignee}" if task.assignee else ""
        print(f"{verb} {task.id}{who}: {task.title}")


def cmd_tasks_ls(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        tasks = await team.tasks.ls(project, status=args.status)
        rows = [task.to_wire() for task in tasks]
        if args.json:
            print(json.dumps(rows, indent=2, sort_keys=True))
        elif not rows:
            print(f"no tasks on the board of {project}")
        else:
            for row in rows:
                row["assignee"] = row["assignee"] or None
                row["depends_on"] = ",".join(row["depends_on"]) or None
            for line in table_lines(rows, TASK_COLUMNS):
                print(line)
        return 0

    return _run_tasks(args, work)


def cmd_tasks_add(args: argparse.Namespace) -> int:
    depends = [d.strip() for d in (args.depends_on or "").split(",") if d.strip()]

    async def work(team: Team, project: str) -> int:
        task = await team.tasks.add(
            project,
            title=" ".join(args.title),
            detail=args.detail,
            priority=args.priority,
            depends_on=depends,
            created_by=args.agent or "cli",
        )
        if args.json:
            print(
                json.dumps({**task.to_wire(), "redacted": task.redacted}, indent=2, sort_keys=True)
            )
        else:
            _print_task(task, False, "added")
        _redaction_notice(task.notice())
        return 0

    return _run_tasks(args, work)


def cmd_tasks_claim(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        task = await team.tasks.claim(project, args.task_id, agent=args.agent)
        _print_task(task, args.json, "claimed")
        return 0

    return _run_tasks(args, work)


def cmd_tasks_done(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        task = await team.tasks.done(project, args.task_id, agent=args.agent, result=args.result)
        _print_task(task, args.json, "done")
        return 0

    return _run_tasks(args, work)


def cmd_tasks_fail(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        task = await team.tasks.fail(project, args.task_id, agent=args.agent, reason=args.reason)
        _print_task(task, args.json, "failed")
        return 0

    return _run_tasks(args, work)


def _tasks_ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--status", choices=["open", "claimed", "done", "failed"])


def _tasks_add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("title", nargs="+", metavar="WORD")
    p.add_argument("--detail", default="", metavar="TEXT")
    p.add_argument("--priority", type=int, default=0, metavar="N", help="higher first")
    p.add_argument("--depends-on", metavar="ID,ID", help="tasks that must be done first")
    p.add_argument("--as", dest="agent", type=_as_agent, metavar="PROJECT/NAME")


def _tasks_claim_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("task_id", metavar="ID")
    p.add_argument("--as", dest="agent", type=_as_agent, required=True, metavar="PROJECT/NAME")


def _tasks_done_args(p: argparse.ArgumentParser) -> None:
    _tasks_claim_args(p)
    p.add_argument("--result", default="", metavar="TEXT")


def _tasks_fail_args(p: argparse.ArgumentParser) -> None:
    _tasks_claim_args(p)
    p.add_argument("--reason", required=True, metavar="TEXT", help="why it could not be done")


_TASKS_ACTIONS: list[Action] = [
    ("ls", cmd_tasks_ls, _tasks_ls_args, "the project's tasks, highest priority first"),
    ("add", cmd_tasks_add, _tasks_add_args, "put an open task on the board"),
    ("claim", cmd_tasks_claim, _tasks_claim_args, "take a task: exits 0 only for the winner"),
    ("done", cmd_tasks_done, _tasks_done_args, "finish a task you hold"),
    ("fail", cmd_tasks_fail, _tasks_fail_args, "give up a task you hold, saying why"),
]
"""``ateam tasks`` actions."""


def _tasks_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")
    _add_redis_option(p)
    p.add_argument(
        "--project",
        metavar="NAME",
        help="the project (default: the nearest .ateam/project.yaml)",
    )


def _add_tasks_parser(sub: Any) -> None:
    """``ateam tasks ls|add|claim|done|fail``: the project's task board (issue 12)."""
    text = "the project's task board: tasks agents claim one at a time"
    _add_actions(sub, "tasks", text, _TASKS_ACTIONS, common=_tasks_common)


# context --------------------------------------------------------------------------------

CONTEXT_COLUMNS = ["id", "urgency", "type", "scope", "source", "title"]


def _print_items(items: list[ContextItem], as_json: bool, empty: str) -> None:
    rows = [item.to_wire() for item in items]
    if as_json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    elif not rows:
        print(empty)
    else:
        for row in rows:
            row["source"] = row["source_agent"] or row["source_runtime"]
        for line in table_lines(rows, CONTEXT_COLUMNS):
            print(line)


def cmd_context_ls(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        items = await team.context.ls(project, min_urgency=args.urgency, limit=args.limit)
        _print_items(items, args.json, f"no context items in {project}")
        return 0

    return _run_tasks(args, work, "context")


def cmd_context_search(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        query = " ".join(args.query)
        items = await team.context.search(project, query, limit=args.limit)
        _print_items(items, args.json, f"no context item in {project} matches {query!r}")
        return 0

    return _run_tasks(args, work, "context")


def cmd_context_post(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        item = await team.context.post(
            project,
            type=args.type,
            title=" ".join(args.title),
            content=args.content,
            urgency=args.urgency or "background",
            scope=args.scope,
            tags=[t.strip() for t in (args.tags or "").split(",") if t.strip()],
            source_runtime="cli",
        )
        if args.json:
            print(
                json.dumps({**item.to_wire(), "redacted": item.redacted}, indent=2, sort_keys=True)
            )
        else:
            print(f"posted {item.id} to {project} ({item.scope}, {item.urgency})")
        _redaction_notice(item.notice())
        return 0

    return _run_tasks(args, work, "context")


def _context_ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--urgency", choices=["background", "attention", "blocking"])
    p.add_argument("--limit", type=int, default=50, metavar="N")


def _context_search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", nargs="+", metavar="WORD")
    p.add_argument("--limit", type=int, default=20, metavar="N")


def _context_post_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("title", nargs="+", metavar="WORD")
    p.add_argument("--type", default="status", choices=CONTEXT_TYPES)
    p.add_argument("--urgency", choices=["background", "attention", "blocking"])
    p.add_argument("--scope", default="project", choices=["task", "project", "global"])
    p.add_argument("--tags", metavar="A,B")
    p.add_argument("--content", default="", metavar="TEXT")


CONTEXT_TYPES = ["discovery", "decision", "status", "request", "alert"]

_CONTEXT_ACTIONS: list[Action] = [
    ("ls", cmd_context_ls, _context_ls_args, "the project's live items, newest first"),
    ("search", cmd_context_search, _context_search_args, "items ranked by meaning"),
    ("post", cmd_context_post, _context_post_args, "share an item with the team"),
]
"""``ateam context`` actions."""


def _add_context_parser(sub: Any) -> None:
    """``ateam context ls|search|post``: the team's context items (SPEC §9)."""
    text = "the team's context items: what agents and people share (SPEC §9)"
    _add_actions(sub, "context", text, _CONTEXT_ACTIONS, common=_tasks_common)


# acl ------------------------------------------------------------------------------------


def cmd_acl(args: argparse.Namespace) -> int:
    """``ateam acl PROJECT``: the least-privilege Redis user of one project."""
    project = checked_name(args.project_name)
    config = _project_or_none()
    namespace = (config.namespace if config else None) or DEFAULT_NAMESPACE
    password = None
    if args.password_file is not None:
        password = _read_secret(args.password_file)
    if not args.apply:
        line, user, secret = acl_setuser(project, namespace, user=args.user, password=password)
        print(line)
        print(
            f"# run it as an admin (redis-cli, then paste), then connect as {user}: "
            f"redis://{user}:{'<password>' if password else secret}@HOST:PORT",
            file=sys.stderr,
        )
        return 0

    async def work(team: Team) -> int:
        user, secret = await team.create_project_user(project, user=args.user, password=password)
        shown = "<the password in the file>" if password else secret
        print(f"created Redis user {user} for project {project}")
        print(f"connect as: redis://{user}:{shown}@HOST:PORT (the password is shown only once)")
        return 0

    return _run_verb(args, "acl", work)


def _read_secret(path: str) -> str:
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    if len(secret) < 16 or any(ch.isspace() for ch in secret):
        raise UsageError(f"{path}: the password must be at least 16 characters, no spaces")
    return secret


def _add_acl_parser(sub: Any) -> None:
    text = (
        "print (or, with --apply, create) a Redis user that can reach one project only "
        "(issue 13: keys, channels and commands of that project)"
    )
    p = sub.add_parser("acl", help=text, description=text)
    p.set_defaults(handler=cmd_acl)
    p.add_argument("project_name", metavar="PROJECT")
    p.add_argument("--user", metavar="NAME", help="the user's name (default ateam-PROJECT)")
    p.add_argument("--password-file", metavar="FILE", help="use this password, not a random one")
    p.add_argument("--apply", action="store_true", help="run ACL SETUSER on the server now")
    _add_redis_option(p)


def _add_project_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--project",
        metavar="NAME",
        help="the project of a bare agent name (default: the nearest .ateam/project.yaml)",
    )


def _add_init_parser(sub: Any) -> None:
    text = "create a new project: .ateam/ with one agent on the offline echo model"
    p = sub.add_parser("init", help=text, description=text)
    p.set_defaults(handler=cmd_init)
    p.add_argument("dir", nargs="?", default=".")
    p.add_argument("--name", help="the project's name (default: the directory's name)")
    p.add_argument("--agent", default="zeus", help="the first agent's name (default: zeus)")


# mcp ------------------------------------------------------------------------------------


def cmd_mcp(args: argparse.Namespace) -> int:
    """``ateam mcp``: the team as a Model Context Protocol server (stdio, or HTTP + token)."""
    try:
        from ateam.mcp import DEFAULT_PORT, HttpOptions, read_token, serve
    except ImportError as exc:  # the SDK is an extra
        need = f"ateam mcp needs the mcp extra: pip install 'ateam[mcp]' ({exc})"
        raise UsageError(need) from None
    if not args.http and (args.host, args.port, args.token_file) != (None, None, None):
        raise UsageError("--host, --port and --token-file go with --http")
    http = None
    if args.http:
        token = {} if args.token_file is None else {"token": read_token(args.token_file)}
        http = HttpOptions(
            host=args.host or "127.0.0.1",
            port=DEFAULT_PORT if args.port is None else args.port,
            token_from=args.token_file,
            **token,
        )
    try:  # the default project: --project, else the nearest one, else each call names one
        project: str | None = project_name(args.project)
    except UsageError:
        project = None

    async def work(team: Team) -> int:
        return await serve(team, project, http=http)

    return _run_verb(args, "mcp", work, redactor=local_redactor())


def _port(value: str) -> int:
    port = int(value)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535; got {port}")
    return port


def _add_mcp_parser(sub: Any) -> None:
    text = "serve the team to MCP clients (Claude Code, Codex CLI, Cursor) on stdio"
    p = sub.add_parser("mcp", help=text, description=text)
    p.set_defaults(handler=cmd_mcp)
    _add_redis_option(p)
    p.add_argument(
        "--project",
        metavar="NAME",
        help="the project tools mean when they name none (default: the nearest .ateam/)",
    )
    p.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    p.add_argument("--host", metavar="ADDR", help="with --http (default 127.0.0.1)")
    p.add_argument("--port", type=_port, metavar="N", help="with --http (default 8765; 0: any)")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --http: the bearer token clients send (default: a new one, printed)",
    )


# up / down ------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    project = load_project(root)
    target = _target(args, project)
    if args.down:  # also agents a console started, configured or not
        return _down(project)
    if not project.agents:
        raise ConfigError(f"no agents configured under {root}")
    from ateam.supervisor import start_agents

    started, failed = start_agents(project, target, redis_url=args.redis)
    for line in started:
        print(line)
    if failed is not None:  # no console: the exit status must say it
        raise failed
    if args.detach:
        return 0
    return run_console(target, plain=args.no_ui)


def _down(project: ProjectConfig) -> int:
    from ateam.supervisor import stop_agents

    lines, ok = stop_agents(project)
    for line in lines:
        print(line)
    return 0 if ok else 1


def cmd_server(args: argparse.Namespace) -> int:
    return server_command(args.action)


# parser ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ateam", description="A team of AI coding agents steered from a console over Redis."
    )
    parser.add_argument("--version", action="version", version=f"ateam {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, handler: Callable[[argparse.Namespace], int], text: str) -> Any:
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(handler=handler)
        if name != "server":
            _add_redis_option(p)
        return p

    p = add("agent", cmd_agent, "run one agent in the foreground")
    _add_project_option(p)
    p.add_argument("--name", required=True)
    p.add_argument("--cwd")
    p.add_argument("--model")
    p.add_argument("--no-repl", action="store_true")
    p.add_argument("--bootstrap", metavar="TOKEN")

    p = add("console", cmd_console, "the interactive console")
    p.add_argument("--no-ui", action="store_true", help="plain line mode")
    p.add_argument("--panes", action="store_true", help="full-screen panes (when available)")
    p.add_argument("--web", action="store_true", help="serve the console to browsers (one per tab)")
    p.add_argument("--host", metavar="ADDR", help="with --web (default 127.0.0.1)")
    # A string, checked by the handler: a bad port is a one-line error with a code.
    p.add_argument("--port", metavar="N", help="with --web (default 8765; 0: any free port)")
    p.add_argument("--token-file", metavar="FILE", help="with --web: also write the token here")
    p.add_argument("--read-only", action="store_true", help="with --web: tabs only watch")

    p = add("up", cmd_up, "start every agent of a project in the background, then a console")
    p.add_argument("dir", nargs="?", default=".")
    p.add_argument("--no-ui", action="store_true")
    p.add_argument("--down", action="store_true", help="stop the project's agents instead")
    p.add_argument("--detach", action="store_true", help="start the agents, open no console")

    p = add("ps", cmd_ps, "list agents")
    p.add_argument("--json", action="store_true")

    p = add("session", cmd_session, "the team snapshot (~/.ateam/session.json), fresh")
    p.add_argument("--json", action="store_true")
    p.add_argument("--project", metavar="NAME", help="only this project (default: every one)")

    p = add("send", cmd_send, "queue text for an agent")
    p.add_argument("id")
    _add_project_option(p)
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

    p = add("tail", cmd_tail, "print an agent's events")
    p.add_argument("id")
    _add_project_option(p)
    p.add_argument("--from", dest="from_offset", type=int, metavar="OFFSET")
    p.add_argument("--follow", "-f", action="store_true")

    p = add("stop", cmd_stop, "stop an agent gracefully")
    p.add_argument("id")
    _add_project_option(p)
    p.add_argument("--takeover", action="store_true")
    p.add_argument("--wait", type=float, default=10.0)

    p = add("ack", cmd_ack, "clear an agent's ALERT in ps: damage found, or a final exit")
    p.add_argument("id")
    _add_project_option(p)
    p.add_argument("--takeover", action="store_true")

    p = add("server", cmd_server, "manage the embedded Redis")
    p.add_argument("action", choices=["start", "stop", "status"])

    _add_init_parser(sub)
    _add_kb_parser(sub)
    _add_tasks_parser(sub)
    _add_context_parser(sub)
    _add_acl_parser(sub)
    _add_mcp_parser(sub)
    return parser


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
    handler: Callable[[argparse.Namespace], int] = args.handler
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
