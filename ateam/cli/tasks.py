"""``ateam tasks ls|add|claim|done|fail``: the project's task board (issue 12)."""

from __future__ import annotations

import argparse
import json

from ateam.cli._run import redaction_notice, run_in_project
from ateam.client import BoardTask, Team
from ateam.console.tables import table_lines

TASK_COLUMNS = ["id", "status", "priority", "assignee", "depends_on", "title"]


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

    return run_in_project(args, "tasks", work)


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
        redaction_notice(task.notice())
        return 0

    return run_in_project(args, "tasks", work)


def cmd_tasks_claim(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        task = await team.tasks.claim(project, args.task_id, agent=args.agent)
        _print_task(task, args.json, "claimed")
        return 0

    return run_in_project(args, "tasks", work)


def cmd_tasks_done(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        task = await team.tasks.done(project, args.task_id, agent=args.agent, result=args.result)
        _print_task(task, args.json, "done")
        return 0

    return run_in_project(args, "tasks", work)


def cmd_tasks_fail(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        task = await team.tasks.fail(project, args.task_id, agent=args.agent, reason=args.reason)
        _print_task(task, args.json, "failed")
        return 0

    return run_in_project(args, "tasks", work)


# arguments: each action's own; project_verb_options come after them ---------------------------


def _as_agent(value: str) -> str:
    """``--as``: a full agent id, since a claim names who holds it on the whole bus."""
    if "/" not in value:
        raise argparse.ArgumentTypeError(f"--as takes an agent id PROJECT/NAME; got {value!r}")
    return value


def tasks_ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--status", choices=["open", "claimed", "done", "failed"])


def tasks_add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("title", nargs="+", metavar="WORD")
    p.add_argument("--detail", default="", metavar="TEXT")
    p.add_argument("--priority", type=int, default=0, metavar="N", help="higher first")
    p.add_argument("--depends-on", metavar="ID,ID", help="tasks that must be done first")
    p.add_argument("--as", dest="agent", type=_as_agent, metavar="PROJECT/NAME")


def tasks_claim_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("task_id", metavar="ID")
    p.add_argument("--as", dest="agent", type=_as_agent, required=True, metavar="PROJECT/NAME")


def tasks_done_args(p: argparse.ArgumentParser) -> None:
    tasks_claim_args(p)
    p.add_argument("--result", default="", metavar="TEXT")


def tasks_fail_args(p: argparse.ArgumentParser) -> None:
    tasks_claim_args(p)
    p.add_argument("--reason", required=True, metavar="TEXT", help="why it could not be done")
