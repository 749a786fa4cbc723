"""The task board in panes mode (issue 12): F2 or ``/tasks`` opens it, it follows changes
made by anyone, and Enter leaves the next step in the command bar.

The panes console runs headless with Pilot against the test's redis-server; the board
is changed beside it through :class:`TaskBoard`, as an agent or another console would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from textual.widgets import DataTable, Input

from ateam.bus.board import TaskBoard
from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from ateam.console.panes.app import ConsoleApp
from ateam.console.panes.tasks import TasksScreen
from ateam.wire.work import WorkRecord
from tests._wait import async_wait_for
from tests.unit.console.test_panes import SIZE, make_app, started, stream_lines, type_line

P = "proj"


@pytest.fixture
def board(client: aioredis.Redis, target: RedisTarget) -> TaskBoard:
    return TaskBoard(client, Keys(target.namespace))


@pytest.fixture(autouse=True)
def in_a_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The console stands in project ``proj``: its board is the one shown."""
    root = tmp_path / "proj"
    (root / ".ateam").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text(f"name: {P}\n")
    monkeypatch.chdir(root)
    return root


def rows(app: ConsoleApp) -> dict[str, list[str]]:
    """The board screen's rows by task id, each as its cells' text; {} when not shown."""
    screen = app.screen
    if not isinstance(screen, TasksScreen):
        return {}
    table: DataTable[Any] = screen.query_one("#tasks", DataTable)
    return {str(key.value): [str(cell) for cell in table.get_row(key)] for key in table.rows}


def row_order(app: ConsoleApp) -> list[str]:
    return list(rows(app))


async def test_f2_shows_the_board_and_follows_changes_made_elsewhere(
    target: RedisTarget, board: TaskBoard
) -> None:
    first = await board.add(P, title="port the parser", priority=1, created_by="cli")
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await pilot.press("f2")
        await async_wait_for(lambda: row_order(app) == [first.id])
        assert rows(app)[first.id] == [first.id, "open", "1", "-", "-", "port the parser", "-"]
        assert app.screen.query_one("#board").border_title == "tasks · proj (1)"

        urgent = await board.add(
            P, title="fix the build", priority=5, depends_on=[first.id], created_by="proj/lead"
        )
        await async_wait_for(lambda: row_order(app) == [urgent.id, first.id])
        assert rows(app)[urgent.id][4] == first.id  # waits for the first
        await board.claim(P, first.id, agent="proj/zeus")
        await async_wait_for(lambda: rows(app)[first.id][1:4] == ["claimed", "1", "proj/zeus"])
        await board.done(P, first.id, agent="proj/zeus", result="merged in abc123")
        await async_wait_for(lambda: rows(app)[first.id][1] == "done")
        assert rows(app)[first.id][6] == "merged in abc123"

        # The cursor stayed on its task as rows moved; Enter on a finished one does nothing.
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TasksScreen)
        # Enter on the open task: its claim, left in the command bar to complete.
        await pilot.press("up", "enter")
        await async_wait_for(lambda: not isinstance(app.screen, TasksScreen))
        bar = app.query_one("#command", Input)
        assert bar.value == f"/tasks claim {urgent.id} "
        await type_line(pilot, f"{bar.value}--as proj/hera")
        await async_wait_for(lambda: any(f"claimed {urgent.id}" in s for s in stream_lines(app)))
        claimed = await board.get(P, urgent.id)
        assert claimed is not None and claimed.assignee == "proj/hera"


async def test_tasks_alone_opens_the_screen_and_escape_closes_it(
    target: RedisTarget, board: TaskBoard
) -> None:
    task = await board.add(P, title="write docs", created_by="cli")
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await type_line(pilot, "/tasks")
        await async_wait_for(lambda: row_order(app) == [task.id])
        await pilot.press("f2")  # F2 closes it again, as Escape does
        await async_wait_for(lambda: not isinstance(app.screen, TasksScreen))
        await pilot.press("f2")
        await async_wait_for(lambda: isinstance(app.screen, TasksScreen))
        await pilot.press("escape")
        await async_wait_for(lambda: not isinstance(app.screen, TasksScreen))
        assert app.query_one("#command", Input).value == ""

        # With words after it, /tasks is a command like any other: a table in the stream.
        await type_line(pilot, "/tasks ls --status open")
        await async_wait_for(
            lambda: any(task.id in line and " open " in line for line in stream_lines(app))
        )
        assert not isinstance(app.screen, TasksScreen)


async def test_the_board_shows_a_tasks_branch_once_one_has_it(
    target: RedisTarget, board: TaskBoard
) -> None:
    task = await board.add(P, title="port the parser", created_by="cli")
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await pilot.press("f2")
        await async_wait_for(lambda: len(rows(app).get(task.id, [])) == 7)  # no branch yet

        await board.claim(P, task.id, agent="proj/zeus")
        work = WorkRecord(branch=f"ateam/zeus/{task.id}", base="main", commit="ab" * 20, files=1)
        await board.record_work(P, task.id, agent="proj/zeus", work=work)
        await board.done(P, task.id, agent="proj/zeus", result="ok")

        await async_wait_for(lambda: rows(app)[task.id][1] == "done")
        assert rows(app)[task.id][7] == work.summary()
