"""``/diff``, ``/merge``, ``/discard``: an agent's or a task's branch, seen, landed or thrown
away (issue 27), as ``ateam diff|merge|discard`` do (:mod:`ateam.client.work` under both).

The branch is looked for in the repository of the console's project (the attached
agent's, else the directory's); ``/diff`` alone shows the attached agent's own branch.
"""

from __future__ import annotations

from ateam.client import discard_work, merge_work, work_diff
from ateam.console.commands.base import Call, Command
from ateam.console.diffs import diff_text, landed_line, show_page, title_of
from ateam.console.projects import home_project
from ateam.errors import UsageError

__all__ = ["COMMANDS"]


async def diff(call: Call) -> None:
    parsed = call.parse()
    if len(parsed.positional) > 1:
        raise call.bad()
    attached = call.console.attached
    if parsed.positional:
        target = parsed.positional[0]
    elif attached is not None:
        target = attached.partition("/")[2]
    else:
        raise UsageError(f"nothing attached: name the agent or task; usage: {call.command.usage}")
    project = await home_project(call.console)
    found = await work_diff(target, project=project.name, cwd=project.root)
    show_page(call.view, title_of(found), diff_text(found))


async def merge(call: Call) -> None:
    parsed = call.parse(options=("--into",), flags=("--squash", "--keep"))
    if len(parsed.positional) != 1:
        raise call.bad()
    project = await home_project(call.console)
    landed = await merge_work(
        call.console.team,
        parsed.positional[0],
        project=project.name,
        cwd=project.root,
        squash="--squash" in parsed.flags,
        into=parsed.options.get("--into"),
        keep="--keep" in parsed.flags,
    )
    call.view.info(landed_line(landed))


async def discard(call: Call) -> None:
    parsed = call.parse(flags=("--reopen",))
    if len(parsed.positional) != 1:
        raise call.bad()
    target = parsed.positional[0]
    reopen = "--reopen" in parsed.flags
    then = " and put its task back to open" if reopen else ""
    question = f"discard {target}: delete its worktree and branch (uncommitted changes too){then}?"
    if not await call.console.confirm(question):
        call.view.info("discard cancelled")
        return
    project = await home_project(call.console)
    done = await discard_work(
        call.console.team,
        target,
        project=project.name,
        cwd=project.root,
        reopen=reopen,
        by=call.console.session,
    )
    call.view.info(f"discarded {done.work.branch}")
    if done.reopened is not None:
        call.view.info(f"reopened {done.reopened.id}: {done.reopened.title}")


COMMANDS = (
    Command(
        "diff",
        diff,
        "[NAME|TASK]",
        "what an agent or a task changed on its branch (default: the attached agent)",
    ),
    Command(
        "merge",
        merge,
        "NAME|TASK [--squash] [--into B] [--keep]",
        "land a branch in its base; refused, changing nothing, if unsafe",
    ),
    Command(
        "discard",
        discard,
        "NAME|TASK [--reopen]",
        "delete a branch and its worktree (asks); --reopen: its task back to open",
    ),
)
