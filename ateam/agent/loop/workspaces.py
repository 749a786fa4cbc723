"""Where an agent's work happens in git (issue 27): ``worktree: none | agent | task``.

``agent.yaml`` picks one:

=========  ==============================================================================
``none``   the agent works in its configured cwd, as always
``agent``  it works in its own worktree and branch ``ateam/NAME``, made (or found again)
           at start: its cwd *is* that worktree, at the same relative place as the
           configured cwd (:func:`start_workspace` moves the configuration there), so
           tools, sandbox, PTY, hooks and an ACP runtime all follow without knowing
``task``   each board task it takes runs in a worktree of its own, ``ateam/NAME/TASK-ID``,
           made just before the task runs (:class:`WorkspaceTasks`); a replay after a
           kill finds the same worktree and reuses it. Other inputs (a person's prompt)
           run in the configured cwd
=========  ==============================================================================

At start the project must be a git repository with a commit and a base branch
(:func:`start_workspace`): a refusal is one line and a final exit, so a supervisor does
not restart an agent whose repository cannot change by itself. At the end of each task
that ran in a worktree :meth:`Workspaces.finish` commits it (``commit: on_task_done``) and
records the branch, the commit and the diffstat on the board task, before the board hears
the task is done. Git failing then is a warning, never the task's end lost.

Git is slow next to the loop and synchronous: once the agent runs, every git call is made
in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from redis.exceptions import RedisError

from ateam.agent.loop.board_puller import SOURCE_PREFIX as BOARD_SOURCE
from ateam.agent.loop.control import TaskControl
from ateam.agent.loop.task import TaskOutcome, TaskRunner, end_task
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.board import TaskBoard
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.config import AgentConfig
from ateam.errors import AteamError, ConfigError, NotARepository, UsageError, WorkNotFound
from ateam.wire.work import WorkRecord

# git and the worktrees are imported where a worktree is made or used: an agent on
# ``worktree: none`` (the default) never loads them (issue 28 §2).
if TYPE_CHECKING:
    from ateam.worktrees import Repository

__all__ = ["WorkspaceTasks", "Workspaces", "commit_message", "start_workspace"]

log = logging.getLogger(__name__)

SUBJECT_MAX: Final = 72
"""Characters of a commit's first line (git's own advice for a subject)."""
ANSWER_MAX: Final = 4000
"""Characters of the final answer kept in a commit message's body."""
STAT_DIFF_BYTES: Final = 4096
"""The diff read for a record's stat: only its counts are kept."""
BOARD_WAIT_S: Final = 5.0
"""How long a record on the board may take before it is given up (the task goes on)."""

_BOARD_ERRORS: tuple[type[BaseException], ...] = (
    *CONNECTION_ERRORS,
    RedisError,
    TimeoutError,
    AteamError,
)


def start_workspace(config: AgentConfig, project_root: Path | None) -> AgentConfig:
    """Check the repository at start; with ``worktree: agent``, the configuration moved
    into the agent's worktree (made, or found again). ``config`` as it is for ``none``.

    Raises:
        ConfigError: no project, no git repository, a cwd outside it, or a configured
            ``base_branch`` that does not exist.
        NoCommitYet, DetachedHead: the repository has nothing to branch from.
        GitError: git refused to make the worktree.
    """
    spec = config.spec
    if spec.worktree == "none":
        return config
    from ateam.worktrees import Repository, agent_branch, ensure_worktree

    what = f"worktree: {spec.worktree}"
    if project_root is None:
        raise ConfigError(f"{what} needs the agent's project directory (.ateam/)")
    try:
        repo = Repository.open(project_root)
        base = repo.base_branch(spec.base_branch)
    except NotARepository as exc:
        raise ConfigError(f"{what} needs a git repository: {exc.message}") from None
    except WorkNotFound:
        raise ConfigError(f"base_branch {spec.base_branch!r} is not a branch") from None
    inside = _inside(config.cwd, repo.root, what)
    if spec.worktree != "agent":
        return config
    tree = ensure_worktree(repo, agent_branch(config.name), base)
    log.info("working in %s (branch %s)", tree.path, tree.branch)
    return replace(config, cwd=tree.path / inside)


def _inside(cwd: Path, root: Path, what: str) -> Path:
    """``cwd`` relative to the top of its checkout, where it is in every worktree too.

    A cwd already in one of ateam's worktrees (``/spawn --worktree``, ``--cwd`` of the
    agent's own worktree) counts from that worktree's top, not the main tree's.
    """
    from ateam.worktrees._git import git
    from ateam.worktrees.trees import worktrees_root

    real, top = cwd.resolve(), root.resolve()
    if not real.is_relative_to(top):
        where = f"the agent's cwd {cwd} is outside the repository {root}"
        raise ConfigError(f"{what}: {where}")
    if real.is_relative_to(worktrees_root(top)):
        found = git(real, "rev-parse", "--show-toplevel", check=False)
        checkout = Path(found.stdout.strip()).resolve() if found.returncode == 0 else top
        if checkout != top and real.is_relative_to(checkout):
            return real.relative_to(checkout)
    return real.relative_to(top)


def board_task_of(item: QueueItem) -> str | None:
    """The board task ``item`` carries, if it is one."""
    return item.source.removeprefix(BOARD_SOURCE) if item.source.startswith(BOARD_SOURCE) else None


def commit_message(title: str, answer: str) -> str:
    """A commit's message: the task's title as its subject, the final answer below."""
    title = " ".join(title.split()) or "(untitled task)"
    if len(title) > SUBJECT_MAX:
        title = title[: SUBJECT_MAX - 1] + "…"
    body = answer.strip()
    if len(body) > ANSWER_MAX:
        body = body[:ANSWER_MAX] + " …"
    return f"{title}\n\n{body}\n" if body else f"{title}\n"


class Workspaces:
    """The worktrees of one agent with ``worktree: agent`` or ``task``.

    Args:
        config: The agent (with ``worktree: agent``, already moved into its worktree).
        project_root: Where the repository is opened.
        board: Where a board task's branch is recorded.
        events: Where a git failure is told (``warn``).
    """

    def __init__(
        self,
        config: AgentConfig,
        project_root: Path,
        board: TaskBoard,
        events: EventPublisher,
    ) -> None:
        self._config = config
        self._project_root = project_root
        self._board = board
        self._events = events
        self._repo: Repository | None = None
        self._inside: Path | None = None
        """The agent's cwd relative to the repository's top (``task`` mode)."""

    @property
    def per_task(self) -> bool:
        return self._config.spec.worktree == "task"

    def _repository(self) -> Repository:
        if self._repo is None:
            from ateam.worktrees import Repository

            self._repo = Repository.open(self._project_root)
            if self.per_task:
                self._inside = _inside(self._config.cwd, self._repo.root, "worktree: task")
        return self._repo

    def branch_of(self, item: QueueItem) -> str | None:
        """The branch ``item`` runs on; ``None``: the configured cwd, no branch of ours."""
        from ateam.worktrees import agent_branch, task_branch

        if not self.per_task:
            return agent_branch(self._config.name)
        task_id = board_task_of(item)
        return None if task_id is None else task_branch(self._config.name, task_id)

    def task_tree(self, task_id: str) -> Path | None:
        """The worktree board task ``task_id`` runs in, if it is there (``task`` mode)."""
        from ateam.worktrees import task_branch, worktree_path
        from ateam.worktrees.find import TASK_ID_PATTERN

        if not self.per_task or self._repo is None or not TASK_ID_PATTERN.fullmatch(task_id):
            return None  # an id the model gave (tasks.done) is no path to climb out along
        tree = worktree_path(self._repo.root, task_branch(self._config.name, task_id))
        return tree if tree.is_dir() else None

    def task_cwd(self, task_id: str) -> Path | None:
        """Where board task ``task_id`` works (its tools, its ``task_done`` hook): its
        worktree, at the configured cwd's place in it; ``None``: the configured cwd."""
        tree = self.task_tree(task_id)
        if tree is None or self._inside is None:
            return None
        return tree / self._inside

    def cwd_for(self, item: QueueItem) -> Path | None:
        """Where ``item``'s tools run when that is not the configured cwd."""
        task_id = board_task_of(item)
        return None if task_id is None else self.task_cwd(task_id)

    # a task's start and end ------------------------------------------------------------

    async def prepare(self, item: QueueItem) -> None:
        """Make (or find again) the worktree of a board task about to run (``task`` mode),
        and record its branch on the board.

        Raises:
            GitError: the worktree could not be made (the task fails with it).
            UsageError: the item's ``board:`` source names no board task id (``t-…``).
        """
        task_id = board_task_of(item) if self.per_task else None
        if task_id is None:
            return
        from ateam.worktrees import ensure_worktree, task_branch
        from ateam.worktrees.find import TASK_ID_PATTERN
        from ateam.worktrees.trees import recorded_base

        if not TASK_ID_PATTERN.fullmatch(task_id):
            # An owner's input may say `board:…` of anything: no branch diff and merge miss.
            raise UsageError(f"{task_id!r} is not a board task's id: it gets no worktree")
        branch = task_branch(self._config.name, task_id)

        def make() -> WorkRecord:
            repo = self._repository()
            # A worktree made before (a replay) has its base: the main tree's HEAD, which a
            # person's rebase may have detached meanwhile, is not asked then.
            base = recorded_base(repo, branch) or repo.base_branch(self._config.spec.base_branch)
            tree = ensure_worktree(repo, branch, base)
            if tree.reused:
                log.info("board task %s goes on in its worktree %s", task_id, tree.path)
            return WorkRecord(branch=tree.branch, base=tree.base, worktree=str(tree.path))

        record = await asyncio.to_thread(make)
        await self._record(item, task_id, record)

    async def finish(self, item: QueueItem, outcome: TaskOutcome) -> None:
        """Commit what ``item`` changed in its worktree and record it on its board task.
        Never raises: a failure is a ``warn``, and the task ends all the same."""
        branch = self.branch_of(item)
        if branch is None:
            return
        task_id = board_task_of(item)
        message = commit_message(await self._title(item, task_id), outcome.text)
        # Whatever git does here, the task's end must not be lost: each step is caught.
        try:
            record = await asyncio.to_thread(self._commit, branch, message)
        except Exception as exc:
            self._warn(item, f"the work of {item.id} on {branch} was not committed: {_why(exc)}")
            return
        if record is None:
            return  # its worktree was removed meanwhile (discarded, merged)
        try:
            record = await asyncio.to_thread(self._counted, record, task_id)
        except Exception as exc:
            self._warn(item, f"the changes on {branch} were not counted: {_why(exc)}")
        if task_id is not None:
            await self._record(item, task_id, record)

    async def _title(self, item: QueueItem, task_id: str | None) -> str:
        """A board task's title (its input may be a plan's answer, not the task), else the
        input's first line."""
        if task_id is not None:
            try:
                async with asyncio.timeout(BOARD_WAIT_S):
                    task = await self._board.get(self._config.project, task_id)
                if task is not None:
                    return task.title
            except _BOARD_ERRORS as exc:
                log.warning("board task %s: title not read (%r)", task_id, exc)
        lines = item.text.strip().splitlines()
        return lines[0] if lines else item.id

    def _commit(self, branch: str, message: str) -> WorkRecord | None:
        """Commit everything in ``branch``'s worktree (unless ``commit: never``): its record
        without the stat; ``None`` when the worktree is gone."""
        from ateam.worktrees import commit_all, worktree_path
        from ateam.worktrees.trees import recorded_base

        repo = self._repository()
        tree = worktree_path(repo.root, branch)
        if not tree.is_dir():
            return None
        commit = None
        if self._config.spec.commit == "on_task_done":
            name, project = self._config.name, self._config.project
            author, email = f"{name} (ateam)", f"{name}@{project}.ateam.invalid"
            commit = commit_all(tree, message, author=author, email=email)
        base = recorded_base(repo, branch) or repo.base_branch(self._config.spec.base_branch)
        return WorkRecord(branch=branch, base=base, worktree=str(tree), commit=commit or "")

    def _counted(self, record: WorkRecord, task_id: str | None) -> WorkRecord:
        """``record`` with the diffstat of its branch against its base."""
        from ateam.worktrees import Work, diff_of

        repo = self._repository()
        tree = Path(record.worktree)
        work = Work(record.branch, record.base, self._config.name, task_id, tree)
        diff = diff_of(repo, work, max_bytes=STAT_DIFF_BYTES)
        commit = record.commit
        if not commit and task_id is not None:
            # Nothing new to commit, yet a task's branch ahead of its base: a replay after
            # a kill that came between the commit and its record; the tip is that commit.
            tip = repo.tip(record.branch)
            commit = "" if tip == diff.merge_base else tip
        return replace(
            record,
            commit=commit,
            files=len(diff.files),
            insertions=diff.insertions,
            deletions=diff.deletions,
        )

    async def _record(self, item: QueueItem, task_id: str, record: WorkRecord) -> None:
        try:
            async with asyncio.timeout(BOARD_WAIT_S):
                await self._board.record_work(
                    self._config.project, task_id, agent=self._config.id, work=record
                )
        except _BOARD_ERRORS as exc:
            why = exc.one_line() if isinstance(exc, AteamError) else repr(exc)
            message = f"board task {task_id}: its branch {record.branch} not recorded: {why}"
            self._warn(item, message)

    def _warn(self, item: QueueItem, message: str) -> None:
        log.warning("%s", message)
        self._events.emit(EventType.WARN, msg=message, code="work.not_recorded", **item.ids())


def _why(exc: Exception) -> str:
    return exc.one_line() if isinstance(exc, AteamError) else repr(exc)


class WorkspaceTasks:
    """A task runner whose board tasks run in their worktree (``worktree: task``).

    Outermost around the runner: the worktree is there before the task runs and while
    its ``task_done`` hook judges it. One that cannot be made fails the task, with git's
    reason, before the model is asked anything.
    """

    def __init__(self, inner: TaskRunner, spaces: Workspaces, events: EventPublisher) -> None:
        self.inner = inner
        self._spaces = spaces
        self._events = events

    async def run(self, item: QueueItem, control: TaskControl) -> TaskOutcome:
        started = time.monotonic()
        try:
            await self._spaces.prepare(item)
        except (AteamError, OSError) as exc:
            error = exc if isinstance(exc, AteamError) else AteamError(str(exc))
            log.warning("board task of %s has no worktree: %s", item.id, error.one_line())
            return end_task(
                self._events,
                control,
                item.ids(),
                started=started,
                error=error.one_line(),
                text="",
                tokens_in=0,
                tokens_out=0,
                iterations=0,
                scrub=lambda text: text,
                code=str(error.code),
            )
        return await self.inner.run(item, control)
