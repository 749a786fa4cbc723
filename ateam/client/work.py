"""An agent's or a board task's branch, as front ends see it (issue 27): its diff, landed,
or thrown away.

The branch is found in the git repository of the project (:func:`work_place`): the
project around the working directory, or the one ``--project`` names at the root
``ateam up`` or a started agent noted for it. Git runs in a thread, so a console's
loop never waits on it. Merging and discarding also ask the bus, through a
:class:`~ateam.client.Team`, whether anyone still works on the branch: a task still
claimed on the board, or the agent of a branch per agent while it is busy, is refused
with :class:`~ateam.errors.WorkBusy` before git is touched.

The board is left alone by a merge (the task stays done); a discard changes it only
when asked (``reopen``: the task goes back to open, to be done again).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from ateam.client.team import Team
from ateam.config import load_project
from ateam.config.discovery import remembered_root
from ateam.errors import ConfigError, UsageError, WorkBusy
from ateam.wire.board import BoardTask, TaskStatus
from ateam.worktrees import Landed, Repository, Work, WorkDiff, diff_of, find_work, land
from ateam.worktrees import discard as discard_branch
from ateam.worktrees.changes import DIFF_MAX_BYTES

__all__ = [
    "DIFF_MAX_BYTES",
    "Discarded",
    "Landed",
    "Work",
    "WorkDiff",
    "WorkPlace",
    "discard_work",
    "merge_work",
    "work_diff",
    "work_place",
]

WORKING_STATES = frozenset({"busy", "waiting"})
"""States of an agent in the middle of a task (``waiting``: for an approval)."""


@dataclass(frozen=True)
class WorkPlace:
    """A project and the git repository at its root."""

    project: str
    repo: Repository


@dataclass(frozen=True)
class Discarded:
    """What :func:`discard_work` threw away, and the task it put back, if asked."""

    work: Work
    reopened: BoardTask | None = None


def work_place(project: str | None = None, *, cwd: Path | None = None) -> WorkPlace:
    """The project around ``cwd`` (default: the working directory), or ``project``.

    A named project is taken from ``cwd`` when that is the project, else from the root
    noted for it on this host (:func:`~ateam.config.discovery.remembered_root`).

    Raises:
        UsageError: no project around ``cwd`` and none named, or a named project whose
            directory is not known here.
        ConfigError: the project around ``cwd`` does not load (and none is named).
        NotARepository, NoCommitYet: its root is not in a usable git repository.
    """
    here = cwd if cwd is not None else Path.cwd()
    config = None
    try:
        config = load_project(here)
    except ConfigError:
        if project is None:
            raise
    if config is not None and config.root is not None:
        if project is None or config.name == project:
            return WorkPlace(config.name, Repository.open(config.root))
    if project is None:
        raise UsageError(
            f"no project here: no .ateam/project.yaml in {here.resolve()} or its parents; "
            "run this inside the project or give --project NAME"
        )
    root = remembered_root(project)
    if root is None:
        raise UsageError(
            f"project {project!r} has no known directory on this host; run this inside it"
        )
    return WorkPlace(project, Repository.open(root))


async def work_diff(
    target: str,
    *,
    project: str | None = None,
    cwd: Path | None = None,
    max_bytes: int = DIFF_MAX_BYTES,
) -> WorkDiff:
    """What ``target`` (an agent's name or a task id) changed against its base:
    committed and not, the unified diff at most ``max_bytes`` (the rest counted).

    Raises:
        WorkNotFound, UsageError, NotARepository, NoCommitYet, GitError.
    """

    def read() -> WorkDiff:
        place = work_place(project, cwd=cwd)
        return diff_of(place.repo, find_work(place.repo, target), max_bytes=max_bytes)

    return await asyncio.to_thread(read)


async def _refuse_busy(team: Team, place: WorkPlace, work: Work) -> BoardTask | None:
    """Raise WorkBusy when someone still works on ``work``; the board task, if any."""
    if work.task_id is not None:
        task = await team.tasks.get(place.project, work.task_id)
        if task is not None and task.status == TaskStatus.CLAIMED:
            raise WorkBusy(
                f"task {task.id} is still claimed by {task.assignee}: its branch "
                f"{work.branch} is not finished",
                detail={"task": task.id, "assignee": task.assignee, "branch": work.branch},
            )
        return task
    status = await team.status(f"{place.project}/{work.agent}")
    if status is not None and status.state in WORKING_STATES:
        raise WorkBusy(
            f"{status.id} is {status.state}: its branch {work.branch} is still being worked on",
            detail={"agent": status.id, "state": status.state, "branch": work.branch},
        )
    return None


async def merge_work(
    team: Team,
    target: str,
    *,
    project: str | None = None,
    cwd: Path | None = None,
    squash: bool = False,
    into: str | None = None,
    keep: bool = False,
) -> Landed:
    """Merge ``target``'s branch into ``into`` (default: its base) in the main working
    tree; a task's worktree and branch are removed after (not with ``keep``). The board
    is not changed.

    Raises:
        WorkBusy: its task is still claimed, or its agent (a branch per agent) is busy.
        DetachedHead: no ``into`` and the main working tree's HEAD is detached.
        TreeDirty, MergeConflict (``detail["files"]``), DetachedHead, WorkNotFound,
        UsageError, NotARepository, GitError: nothing was changed.
    """
    place, work = await asyncio.to_thread(_locate, project, cwd, target)
    if into is None:
        # Into its base, as the main tree has it: a detached main tree has no branch to
        # show the merge in, so it is refused rather than landed out of sight.
        await asyncio.to_thread(place.repo.current_branch)
    task = await _refuse_busy(team, place, work)
    message = f"{task.title} ({task.id})" if task is not None else ""

    def merge() -> Landed:
        return land(place.repo, work, into=into, squash=squash, keep=keep, message=message)

    return await asyncio.to_thread(merge)


async def discard_work(
    team: Team,
    target: str,
    *,
    project: str | None = None,
    cwd: Path | None = None,
    reopen: bool = False,
    by: str = "cli",
) -> Discarded:
    """Remove ``target``'s worktree (its uncommitted changes are lost) and delete its
    branch. Its board task stays done or failed, unless ``reopen``: then it goes back
    to open, its result cleared, to be done again.

    Raises:
        WorkBusy: its task is still claimed, or its agent (a branch per agent) is busy.
        UsageError: ``reopen`` for a branch that belongs to no task on the board.
        WorkNotFound, NotARepository, GitError.
    """
    place, work = await asyncio.to_thread(_locate, project, cwd, target)
    task = await _refuse_busy(team, place, work)
    if reopen and task is None:
        # Checked before anything is deleted: a refused discard leaves everything as it was.
        raise UsageError(
            f"--reopen: {work.branch} belongs to no task on the board of {place.project}"
        )
    await asyncio.to_thread(discard_branch, place.repo, work)
    if not reopen or task is None or task.status == TaskStatus.OPEN:
        return Discarded(work)
    again = await team.tasks.rework(
        place.project, task.id, by=by, why=f"its work ({work.branch}) was discarded"
    )
    return Discarded(work, again)


def _locate(project: str | None, cwd: Path | None, target: str) -> tuple[WorkPlace, Work]:
    place = work_place(project, cwd=cwd)
    return place, find_work(place.repo, target)
