"""The panes board and failed tasks (issue 26 §4): a task waiting on a failed one says so,
and Enter on a failed task leaves its retry in the command bar."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable, Input

from ateam.bus.board import TaskBoard
from ateam.bus.connection import RedisTarget
from ateam.console.panes.tasks import TasksScreen
from tests._wait import async_wait_for
from tests.unit.console.test_board_panes import P, board, in_a_project, row_order, rows
from tests.unit.console.test_panes import SIZE, make_app, started

__all__ = ["board", "in_a_project"]  # fixtures, shared with the board screen's tests


async def test_a_failed_task_blocks_its_dependent_and_enter_offers_its_retry(
    target: RedisTarget, board: TaskBoard
) -> None:
    first = await board.add(P, title="port the parser", created_by="cli")
    after = await board.add(P, title="ship it", depends_on=[first.id], created_by="cli")
    await board.claim(P, first.id, agent="proj/zeus")
    await board.fail(P, first.id, agent="proj/zeus", reason="grammar unclear")
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await pilot.press("f2")
        await async_wait_for(lambda: set(row_order(app)) == {first.id, after.id})
        assert rows(app)[after.id][6] == f"blocked by {first.id} (failed)"
        assert rows(app)[first.id][1] == "failed"

        table: DataTable[Any] = app.screen.query_one("#tasks", DataTable)
        table.move_cursor(row=row_order(app).index(first.id))
        await pilot.press("enter")
        await async_wait_for(lambda: not isinstance(app.screen, TasksScreen))
        assert app.query_one("#command", Input).value == f"/tasks retry {first.id} "
