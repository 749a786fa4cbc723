"""``ateam tasks ls|add|claim|done|fail|reopen|retry``: the project's task board."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from ateam.cli._run import redaction_notice, run_in_project
from ateam.client import BoardTask, Team, blocked_by, blocked_note
from ateam.client.names import resolve_agent_on, resolve_task_on
from ateam.console.tables import table_lines
from ateam.wire.work import WorkRecord

TASK_COLUMNS = ["id", "status", "priority", "assignee", "depends_on", "title", "note"]


def _print_task(task: BoardTask, as_json: bool, verb: str) -> None:
    if as_json:
        print(json.dumps(task.to_wire(), indent=2, sort_keys=True))
    else:
        who = f" by {task.assignee}" if task.assignee else ""
        print(f"{verb} {task.id}{who}: {task.title}")


def cmd_tasks_ls(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        tasks = await team.tasks.ls(project, status=args.status)
        # What an open task waits for is judged from the whole board, whatever is shown.
        waits = blocked_by(tasks if args.status is None else await team.tasks.ls(project))
        rows = [task.to_wire() for task in tasks]
        for row in rows:
            pending = waits.get(row["id"], ())
            row["blocked_by"] = [{"id": dep, "failed": failed} for dep, failed in pending]
            row["note"] = blocked_note(pending) or row["reason"] or None
            work = row["work"]  # worktree: task|agent (issue 27): branch @commit diffstat
            row["branch"] = WorkRecord.from_wire(work).summary() if work else None
        if args.json:
            for row in rows:
                del row["note"], row["branch"]
            print(json.dumps(rows, indent=2, sort_keys=True))
        elif not rows:
            print(f"no tasks on the board of {project}")
        else:
            for row in rows:
                row["assignee"] = row["assignee"] or None
                row["depends_on"] = ",".join(row["depends_on"]) or None
            branched = any(row["branch"] for row in rows)
            for line in table_lines(rows, [*TASK_COLUMNS, "branch"] if branched else TASK_COLUMNS):
                print(line)
        return 0

    return run_in_project(args, "tasks", work)


def cmd_tasks_add(args: argparse.Namespace) -> int:
    depends = [d.strip() for d in (args.depends_on or "").split(",") if d.strip()]

    async def work(team: Team, project: str) -> int:
        by = "cli"
        if args.agent is not None:
            by = await resolve_agent_on(team, args.agent, project=project)
        # Each task it waits for may be cut short, as everywhere a task is named.
        after = [await resolve_task_on(team, project, given) for given in depends]
        task = await team.tasks.add(
            project,
            title=" ".join(args.title),
            detail=args.detail,
            priority=args.priority,
            depends_on=after,
            created_by=by,
            require_plan=args.require_plan,
        )
        if args.json:
            print(
                json.dumps({**task.to_wire(), "redacted": task.redacted}, indent=2, sort_keys=True)
            )
        else:
            _print_task(task, False, "added")
        redaction_notice(task.notice())
        return 0

    return run_in_project(args, "tasks", work)


async def _named(team: Team, project: str, args: argparse.Namespace) -> tuple[str, str]:
    """The task id and the agent ``--as`` names, each from a bare name or unique prefix."""
    task_id = await resolve_task_on(team, project, args.task_id)
    return task_id, await resolve_agent_on(team, args.agent, project=project)


def cmd_tasks_claim(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        task_id, agent = await _named(team, project, args)
        task = await team.tasks.claim(project, task_id, agent=agent)
        _print_task(task, args.json, "claimed")
        return 0

    return run_in_project(args, "tasks", work)


def cmd_tasks_done(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        task_id, agent = await _named(team, project, args)
        task = await team.tasks.done(project, task_id, agent=agent, result=args.result)
        _print_task(task, args.json, "done")
        return 0

    return run_in_project(args, "tasks", work)


def cmd_tasks_fail(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        task_id, agent = await _named(team, project, args)
        task = await team.tasks.fail(project, task_id, agent=agent, reason=args.reason)
        _print_task(task, args.json, "failed")
        return 0

    return run_in_project(args, "tasks", work)


def _again(verb: str) -> Callable[[argparse.Namespace], int]:
    """``reopen`` or ``retry``: a failed task back to open, by ``--as`` or the cli."""

    def command(args: argparse.Namespace) -> int:
        async def work(team: Team, project: str) -> int:
            task_id = await resolve_task_on(team, project, args.task_id)
            by = "cli"
            if args.agent is not None:
                by = await resolve_agent_on(team, args.agent, project=project)
            task = await getattr(team.tasks, verb)(project, task_id, by=by)
            offered = f", offered to {task.offered_to} first" if task.offered_to else ""
            why = f" (it failed: {task.last_error})" if task.last_error else ""
            if args.json:
                print(json.dumps(task.to_wire(), indent=2, sort_keys=True))
            else:
                print(f"{_DONE[verb]} {task.id}{offered}: {task.title}{why}")
            return 0

        return run_in_project(args, "tasks", work)

    return command


_DONE = {"reopen": "reopened", "retry": "retried"}
cmd_tasks_reopen = _again("reopen")
cmd_tasks_retry = _again("retry")


# arguments: each action's own; project_verb_options come after them ---------------------------
