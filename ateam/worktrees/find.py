"""Which branch a ``NAME`` or a ``TASK-ID`` names, found in the repository alone."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ateam.config.names import NAME_PATTERN
from ateam.errors import AmbiguousName, UsageError, WorkNotFound
from ateam.worktrees._git import git, output, worktrees
from ateam.worktrees.repo import Repository
from ateam.worktrees.trees import BASE_KEY, BRANCH_PREFIX, agent_branch

__all__ = ["TASK_ID_PATTERN", "Work", "find_work", "list_work"]

TASK_ID_PATTERN = re.compile(r"t-[0-9a-f]+")
"""A board task's id (``t-`` and hex, as the board makes them)."""


@dataclass(frozen=True)
class Work:
    """An ateam branch: whose, which task, where its worktree is."""

    branch: str
    base: str
    agent: str
    """The agent's name (``NAME`` of ``ateam/NAME[/TASK-ID]``)."""
    task_id: str | None
    """The board task, for a branch per task."""
    worktree: Path | None
    """Its worktree, ``None`` when it has none (removed, or kept with the branch only)."""


def list_work(repo: Repository) -> list[Work]:
    """Every branch ateam made in ``repo`` (those with an ``ateambase``), sorted by name."""
    bases = _recorded_bases(repo)
    where = {w.branch: w.path for w in worktrees(repo.root) if w.branch}
    names = output(repo.root, "for-each-ref", "--format=%(refname)", f"refs/heads/{BRANCH_PREFIX}")
    found: list[Work] = []
    for branch in sorted(n.removeprefix("refs/heads/") for n in names.splitlines() if n):
        owner = _owner(branch)
        if owner is None or branch not in bases:
            continue
        found.append(
            Work(
                branch=branch,
                base=bases[branch],
                agent=owner[0],
                task_id=owner[1],
                worktree=where.get(branch),
            )
        )
    return found


def _recorded_bases(repo: Repository) -> dict[str, str]:
    """``branch.<branch>.ateambase`` of every branch, read in one call."""
    pattern = rf"^branch\..*\.{BASE_KEY}$"
    # Exit 1 when there is none: that is an empty answer, not a failure.
    text = git(
        repo.root, "config", "--local", "--null", "--get-regexp", pattern, check=False
    ).stdout
    bases: dict[str, str] = {}
    for item in text.split("\0"):
        key, _, value = item.partition("\n")  # --null: the key, a newline, the value
        if key and value:
            bases[key.removeprefix("branch.").removesuffix(f".{BASE_KEY}")] = value
    return bases


def _owner(branch: str) -> tuple[str, str | None] | None:
    """(agent, task id) of ``ateam/NAME`` or ``ateam/NAME/TASK-ID``; ``None`` for another shape."""
    parts = branch.removeprefix(BRANCH_PREFIX).split("/")
    if not NAME_PATTERN.fullmatch(parts[0]):
        return None
    if len(parts) == 1:
        return parts[0], None
    if len(parts) == 2 and TASK_ID_PATTERN.fullmatch(parts[1]):
        return parts[0], parts[1]
    return None


def find_work(repo: Repository, target: str) -> Work:
    """The branch ``target`` names: a task id (``t-…``, its branch ``ateam/*/t-…``) or an
    agent name (its branch ``ateam/NAME``).

    Raises:
        WorkNotFound: no such branch; for an agent that works a branch per task, the
            message lists its task branches to choose from.
        UsageError: ``target`` is not a valid agent name or task id.
    """
    target = target.strip()
    every = list_work(repo)
    # A branch named in full (``ateam/NAME/TASK-ID``, or without ``ateam/``) is taken as is:
    # the way to pick one when a task left branches with two agents.
    named = {w.branch: w for w in every}
    for branch in (target, f"{BRANCH_PREFIX}{target}"):
        if "/" in target and branch in named:
            return named[branch]
    if not NAME_PATTERN.fullmatch(target):
        raise UsageError(f"{target!r} is neither an agent name nor a task id (t-…)")
    if TASK_ID_PATTERN.fullmatch(target):
        found = _by_task(every, target)
        if found is not None:
            return found
    if agent_branch(target) in named:
        return named[agent_branch(target)]
    tasks = [w.task_id for w in every if w.agent == target and w.task_id]
    if tasks:
        raise WorkNotFound(
            f"{target} works a branch per task; name one: {', '.join(tasks)}",
            detail={"agent": target, "tasks": tasks},
        )
    what = "task" if TASK_ID_PATTERN.fullmatch(target) else "agent"
    raise WorkNotFound(f"no branch of ateam's for {what} {target}", detail={"target": target})


def _by_task(every: list[Work], target: str) -> Work | None:
    """The branch of task ``target``, or of the one task whose id starts so."""
    exact = [w for w in every if w.task_id == target]
    if len(exact) == 1:
        return exact[0]
    if exact:
        # The task moved from one agent to another, each leaving a branch.
        branches = ", ".join(w.branch for w in exact)
        raise AmbiguousName(f"task {target} has several branches; name one: {branches}")
    started = [w for w in every if w.task_id and w.task_id.startswith(target)]
    if len(started) > 1:
        ids = ", ".join(sorted({w.task_id or "" for w in started}))
        raise AmbiguousName(f"{target} starts several task ids: {ids}")
    return started[0] if started else None
