"""``/tasks``: the team's task board (issue 12) from the console.

The board is the project's of the attached agent (else of the console's directory).
Claims name an agent: ``--as PROJECT/NAME`` (or a bare name of that project), else the
attached agent. A task added from the console is created by the console's session.
Panes mode shows the same board in a screen of its own (:mod:`ateam.console.panes.tasks`).
``reopen`` and ``retry`` send a failed task back, by the console's session.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ateam.client import BoardTask, blocked_by, blocked_note, bus_errors
from ateam.client.names import resolve_agent, resolve_task_on
from ateam.console.commands.base import Call, Command, Parsed, csv, int_option
from ateam.console.projects import team_project
from ateam.errors import UsageError

__all__ = ["COMMANDS", "TASK_COLUMNS", "task_rows"]

TASK_COLUMNS = ["id", "status", "prio", "assignee", "after", "title", "note"]
"""The columns of ``/tasks`` (and of the panes' board)."""
TITLE_SHOWN = 60
NOTE_SHOWN = 60


def task_rows(
    tasks: Sequence[BoardTask], board: Sequence[BoardTask] | None = None
) -> list[dict[str, Any]]:
    """The board as table rows: the note is what an open task waits for (``blocked by``,
    judged from the whole ``board``, ``tasks`` by default), else why it failed or was
    reopened, else its result."""
    waits = blocked_by(tasks if board is None else board)
    return [
        {
            "id": task.id,
            "status": str(task.status),
            "prio": task.priority,
            "assignee": task.assignee or None,
            "after": ",".join(task.depends_on) or None,
            "title": _cut(task.title, TITLE_SHOWN),
            "note": _cut(
                blocked_note(waits.get(task.id, ())) or task.reason or task.result, NOTE_SHOWN
            )
            or None,
            # Its branch, commit and diffstat (worktree: task|agent, issue 27).
            "branch": task.work.summary() if task.work is not None else None,
        }
        for task in tasks
    ]


def shown_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """:data:`TASK_COLUMNS`, and ``branch`` when a task has one to show."""
    return [*TASK_COLUMNS, "branch"] if any(row.get("branch") for row in rows) else TASK_COLUMNS


def _cut(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


async def tasks(call: Call) -> None:
    handler = call.action(_ACTIONS, "ls")
    await handler(call, call.args[1:])


async def _project(call: Call) -> str:
    return await team_project(call.console)


async def _assignee(call: Call, parsed: Parsed, project: str) -> str:
    """``--as`` (a full id, or a name of the board's project), else the attached agent."""
    named = parsed.options.get("--as")
    if named is not None:
        # A name or a unique prefix of one, in the board's project; as typed when unknown.
        return resolve_agent(named, call.console.known, project=project)
    if call.console.attached is None:
        raise UsageError("name the agent: --as PROJECT/NAME, or /attach it first")
    return call.console.attached


async def _one_id(call: Call, parsed: Parsed, project: str) -> str:
    """The one task the line names: a full id, or a unique prefix with or without ``t-``."""
    if len(parsed.positional) != 1:
        raise call.bad("name one TASK id")
    with bus_errors():
        return await resolve_task_on(call.console.team, project, parsed.positional[0])


def _said(call: Call, verb: str, task: BoardTask) -> None:
    who = f" by {task.assignee}" if task.assignee else ""
    call.view.info(f"{verb} {task.id}{who}: {task.title}")


async def _ls(call: Call, words: list[str]) -> None:
    parsed = call.parse(words, options=("--status",))
    if parsed.positional:
        raise call.bad()
    project = await _project(call)
    board = await call.console.team.tasks.ls(project)
    status = parsed.options.get("--status")
    listed = board if status is None else await call.console.team.tasks.ls(project, status=status)
    if not listed:
        call.view.info(f"no tasks on the board of {project}")
        return
    rows = task_rows(listed, board)
    call.view.table(rows, shown_columns(rows))


async def _add(call: Call, words: list[str]) -> None:
    title_words: list[str] = []
    after: list[str] = []
    options: dict[str, str] = {}
    stream = iter(words)
    for word in stream:
        if word in ("--after", "--priority", "--detail"):
            value = next(stream, None)
            if value is None:
                raise call.bad(f"{word} needs a value")
            if word == "--after":
                after.extend(csv(value))
            else:
                options[word] = value
        elif word == "--require-plan":
            options[word] = "yes"
        elif word.startswith("--"):
            raise call.bad(f"unknown option {word}")
        else:
            title_words.append(word)
    if not title_words:
        raise call.bad("add needs a TITLE")
    console = call.console
    priority = int_option(options["--priority"], "--priority") if "--priority" in options else 0
    title, detail = console.clean(" ".join(title_words), options.get("--detail", ""))
    project = await _project(call)
    with bus_errors():
        # Each task it waits for may be cut short, as everywhere a task is named.
        after = [await resolve_task_on(console.team, project, given) for given in after]
    task = await console.team.tasks.add(
        project,
        title=title,
        detail=detail,
        priority=priority,
        depends_on=after,
        created_by=console.session,
        require_plan="--require-plan" in options,
    )
    call.view.info(f"added {task.id} to the board of {project}: {task.title}")
    if task.hook_failure:  # added all the same: the task_created hook could not judge it
        call.view.info(task.hook_failure)


async def _claim(call: Call, words: list[str]) -> None:
    parsed = call.parse(words, options=("--as",))
    project = await _project(call)
    task_id = await _one_id(call, parsed, project)
    agent = await _assignee(call, parsed, project)
    _said(call, "claimed", await call.console.team.tasks.claim(project, task_id, agent=agent))


async def _done(call: Call, words: list[str]) -> None:
    parsed = call.parse(words, options=("--as", "--result"))
    project = await _project(call)
    task_id = await _one_id(call, parsed, project)
    agent = await _assignee(call, parsed, project)
    [result] = call.console.clean(parsed.options.get("--result", ""))
    task = await call.console.team.tasks.done(project, task_id, agent=agent, result=result)
    _said(call, "done", task)


async def _fail(call: Call, words: list[str]) -> None:
    parsed = call.parse(words, options=("--as", "--reason"))
    if not parsed.options.get("--reason", "").strip():
        raise call.bad("fail needs --reason TEXT")
    project = await _project(call)
    task_id = await _one_id(call, parsed, project)
    agent = await _assignee(call, parsed, project)
    [reason] = call.console.clean(parsed.options["--reason"])
    task = await call.console.team.tasks.fail(project, task_id, agent=agent, reason=reason)
    _said(call, "failed", task)


async def _again(call: Call, words: list[str], verb: str) -> None:
    """``reopen`` / ``retry``: a failed task back to open, sent back by the console."""
    parsed = call.parse(words)
    project = await _project(call)
    task_id = await _one_id(call, parsed, project)
    task = await getattr(call.console.team.tasks, verb)(project, task_id, by=call.console.session)
    offered = f", offered to {task.offered_to} first" if task.offered_to else ""
    why = f" (it failed: {task.last_error})" if task.last_error else ""
    call.view.info(f"{_PAST[verb]} {task.id}{offered}: {task.title}{why}")


_PAST = {"reopen": "reopened", "retry": "retried"}


_ACTIONS: dict[str, Callable[[Call, list[str]], Awaitable[None]]] = {
    "ls": _ls,
    "add": _add,
    "claim": _claim,
    "done": _done,
    "fail": _fail,
    "reopen": functools.partial(_again, verb="reopen"),
    "retry": functools.partial(_again, verb="retry"),
}

COMMANDS = (
    Command(
        "tasks",
        tasks,
        "ls|add|claim|done|fail|reopen|retry … (ls [--status S]; add TITLE [--priority N] "
        "[--after T,T] [--detail TEXT] [--require-plan]; claim|done|fail TASK [--as ID] "
        "[--result TEXT] [--reason TEXT]; reopen|retry TASK)",
        "the team's task board; claims are the attached agent's unless --as names one; "
        "a failed task is reopened for anyone, or retried by the agent that failed it first",
    ),
)
