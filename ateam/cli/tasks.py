"""``ateam tasks ls|add|claim|done|fail``: the project's task board."""

from __future__ import annotations

import argparse
import json

from ateam.cli._run import redaction_notice, run_in_project
from ateam.client import BoardTask, Team
from ateam.client.names import resolve_agent_on, resolve_task_on
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


# arguments: each action's own; project_verb_options come after them ---------------------------


_AS_HELP = "the agent that {what}: NAME in this project, a unique prefix, or PROJECT/NAME"


def tasks_ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--status", choices=["open", "claimed", "done", "failed"], help="only tasks in this state"
    )


def tasks_add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("title", nargs="+", metavar="WORD", help="the task's title")
    p.add_argument("--detail", default="", metavar="TEXT", help="a longer description")
    p.add_argument("--priority", type=int, default=0, metavar="N", help="higher first")
    p.add_argument("--depends-on", metavar="ID,ID", help="tasks that must be done first")
    p.add_argument(
        "--require-plan",
        action="store_true",
        help="its agent works read-only until its plan is approved (ateam plan approve)",
    )
    p.add_argument(
        "--as", dest="agent", metavar="NAME", help=_AS_HELP.format(what="adds it (default: cli)")
    )


def tasks_claim_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("task_id", metavar="ID", help="the task: its id, or a unique prefix of it")
    p.add_argument(
        "--as", dest="agent", required=True, metavar="NAME", help=_AS_HELP.format(what="holds it")
    )


def tasks_done_args(p: argparse.ArgumentParser) -> None:
    tasks_claim_args(p)
    p.add_argument("--result", default="", metavar="TEXT", help="what came of it")


def tasks_fail_args(p: argparse.ArgumentParser) -> None:
    tasks_claim_args(p)
    p.add_argument("--reason", required=True, metavar="TEXT", help="why it could not be done")
