"""Where a board task of an agent with ``worktree: task`` works (issue 27), on a real git
repository and a real Redis board: its worktree, and never a directory a task id climbs to."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from ateam.agent.loop.task import TaskOutcome
from ateam.agent.loop.workspaces import Workspaces, start_workspace
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.board import TaskBoard
from ateam.bus.keys import Keys
from ateam.config import standalone_agent
from ateam.errors import AteamError
from tests._gitwork import git, init_repo


class Events:
    """What Workspaces uses of an EventPublisher: emit (a warning is a failure here)."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, object]]] = []

    def emit(self, etype: str, **fields: object) -> int:
        self.emitted.append((etype, fields))
        return len(self.emitted)


def item(task_id: str) -> QueueItem:
    return QueueItem(id="q-1-000", text="x", source=f"board:{task_id}", enqueued_at=0.0)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "p").resolve()


async def test_a_task_id_that_climbs_out_of_the_worktrees_is_no_place_to_work(
    root: Path, client: aioredis.Redis, namespace: str
) -> None:
    base = standalone_agent("p", "bob", root)
    config = dataclasses.replace(base, spec=base.spec.model_copy(update={"worktree": "task"}))
    board = TaskBoard(client, Keys(namespace))
    task = await board.add("p", title="write the parser", created_by="cli")
    await board.claim("p", task.id, agent=config.id)
    events = Events()
    spaces = Workspaces(config, root, board, events)  # type: ignore[arg-type]

    await spaces.prepare(item(task.id))
    tree = root / ".ateam" / "worktrees" / "bob" / task.id
    assert spaces.task_cwd(task.id) == tree and events.emitted == []

    # A task id is the model's to give (tasks.done) or an owner's (input source board:…):
    # the task_done hook must not run in the main tree or above it because of one.
    for climbing in ("../../..", "../../../..", "..", f"{task.id}/../../.."):
        assert spaces.task_cwd(climbing) is None, climbing
    # A task id that is no board's id makes no branch that diff and merge cannot see.
    with pytest.raises(AteamError):
        await spaces.prepare(item("not-a-task"))
    assert "not-a-task" not in git(root, "branch", "--list", "-a")


async def test_a_task_goes_on_in_its_worktree_while_the_main_tree_is_detached(
    root: Path, client: aioredis.Redis, namespace: str
) -> None:
    # A person rebasing in the main tree detaches its HEAD; an agent restarted then
    # replays its task, whose worktree and base are there already.
    base = standalone_agent("p", "bob", root)
    config = dataclasses.replace(base, spec=base.spec.model_copy(update={"worktree": "task"}))
    board = TaskBoard(client, Keys(namespace))
    task = await board.add("p", title="write the parser", created_by="cli")
    await board.claim("p", task.id, agent=config.id)
    await Workspaces(config, root, board, Events()).prepare(item(task.id))  # type: ignore[arg-type]
    git(root, "checkout", "-q", "--detach")

    again = Workspaces(config, root, board, Events())  # type: ignore[arg-type]
    await again.prepare(item(task.id))

    assert again.task_cwd(task.id) == root / ".ateam" / "worktrees" / "bob" / task.id


async def test_an_unreachable_board_at_the_tasks_end_loses_neither_the_commit_nor_the_end(
    root: Path, client: aioredis.Redis, namespace: str
) -> None:
    base = standalone_agent("p", "bob", root)
    config = dataclasses.replace(base, spec=base.spec.model_copy(update={"worktree": "task"}))
    board = TaskBoard(client, Keys(namespace))
    task = await board.add("p", title="write the parser", created_by="cli")
    await board.claim("p", task.id, agent=config.id)
    await Workspaces(config, root, board, Events()).prepare(item(task.id))  # type: ignore[arg-type]
    tree = root / ".ateam" / "worktrees" / "bob" / task.id
    (tree / "parser.py").write_text("x = 1\n")

    gone = aioredis.Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.5)
    events = Events()
    spaces = Workspaces(config, root, TaskBoard(gone, Keys(namespace)), events)  # type: ignore[arg-type]
    try:
        await spaces.finish(item(task.id), TaskOutcome(True, None, "Wrote it.", 0, 0))
    finally:
        await gone.aclose()

    assert git(tree, "status", "--porcelain") == ""
    # The title falls back to the input's first line; the answer is the body.
    assert git(tree, "log", "-1", "--format=%B").startswith("x\n\nWrote it.\n")
    assert [fields["code"] for _, fields in events.emitted] == ["work.not_recorded"]


def test_an_agent_started_in_its_own_worktree_stays_there(root: Path) -> None:
    # `/spawn --worktree` of an agent with `worktree: agent`, or `ateam agent --cwd` of
    # its worktree: its cwd was already inside .ateam/worktrees/NAME, and became
    # .ateam/worktrees/NAME/.ateam/worktrees/NAME (no such directory).
    (root / "src").mkdir()
    base = standalone_agent("p", "bob", root / "src")
    config = dataclasses.replace(base, spec=base.spec.model_copy(update={"worktree": "agent"}))
    tree = root / ".ateam" / "worktrees" / "bob"

    first = start_workspace(config, root)
    assert first.cwd == tree / "src"
    (tree / "src").mkdir()
    assert start_workspace(dataclasses.replace(config, cwd=first.cwd), root).cwd == tree / "src"
    assert start_workspace(dataclasses.replace(config, cwd=tree), root).cwd == tree


async def test_a_replayed_task_records_the_commit_its_first_run_made(
    root: Path, client: aioredis.Redis, namespace: str
) -> None:
    # Killed after the commit and before its record reached the board: the replay finds
    # nothing new to commit, and still records the task's commit, not none.
    base = standalone_agent("p", "bob", root)
    config = dataclasses.replace(base, spec=base.spec.model_copy(update={"worktree": "task"}))
    board = TaskBoard(client, Keys(namespace))
    task = await board.add("p", title="write the parser", created_by="cli")
    await board.claim("p", task.id, agent=config.id)
    spaces = Workspaces(config, root, board, Events())  # type: ignore[arg-type]
    await spaces.prepare(item(task.id))
    tree = root / ".ateam" / "worktrees" / "bob" / task.id
    (tree / "parser.py").write_text("print('parsed')\n")
    outcome = TaskOutcome(True, None, "wrote the parser", 1, 1)
    await spaces.finish(item(task.id), outcome)
    first = await board.get("p", task.id)
    assert first is not None and first.work is not None and first.work.commit

    replayed = Workspaces(config, root, board, Events())  # type: ignore[arg-type]
    await replayed.prepare(item(task.id))
    await replayed.finish(item(task.id), outcome)
    again = await board.get("p", task.id)
    assert again is not None and again.work is not None
    assert again.work.commit == first.work.commit
    assert again.work.files == 1 and again.work.insertions == 1
