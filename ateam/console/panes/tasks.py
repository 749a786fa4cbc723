"""F2 (or ``/tasks`` alone): the team's task board as a screen of its own (issue 12).

The board is read through the session's ``team.tasks`` (which first reopens the claims
of agents that are gone) every :data:`BOARD_POLL_S`, and redrawn only when a row
changed, so a claim, a finish or a lost holder shows within a second whoever made it.
Enter on an open task leaves ``/tasks claim ID`` in the command bar, on a claimed one
``/tasks done ID``: the screen only reads, the command bar acts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from ateam.client import BoardTask, bus_errors
from ateam.console.commands.board import TASK_COLUMNS, task_rows
from ateam.console.projects import home_project
from ateam.console.session import ConsoleSession
from ateam.errors import AteamError

__all__ = ["BOARD_POLL_S", "BoardLoader", "TasksScreen", "board_loader", "opens_board"]

BOARD_POLL_S = 1.0
"""How often a screen without board news reads the board (a small read: see
``TaskBoard.reconcile``); the console's screen waits for news instead."""
STATUS_STYLES = {"open": "bold green", "claimed": "cyan", "done": "dim", "failed": "red"}
NEXT_STEP = {"open": "claim", "claimed": "done", "failed": "retry"}
"""The command Enter suggests for a task of each status."""

BoardLoader = Callable[[], Awaitable[tuple[str, list[BoardTask]]]]
"""Reads the board: its project and its tasks, in board order."""


def board_loader(console: ConsoleSession) -> BoardLoader:
    """The board of the console's project (the attached agent's, else the directory's)."""

    async def load() -> tuple[str, list[BoardTask]]:
        project = (await home_project(console)).name
        with bus_errors():
            return project, await console.team.tasks.ls(project)

    return load


def opens_board(line: str) -> bool:
    """Whether a typed line asks for the board screen: ``/tasks`` with nothing after it."""
    return line.split() == ["/tasks"]


class TasksScreen(ModalScreen[str | None]):
    """The project's task board, kept current; dismissed with a command line or ``None``."""

    DEFAULT_CSS = """
    TasksScreen { align: center middle; }
    #board { width: 90%; height: 80%; border: thick $accent; background: $surface;
             padding: 0 1; }
    #board DataTable { height: 1fr; }
    #board-note { height: 1; color: $error; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "close", show=False),
        Binding("f2", "close", "close", show=False),
    ]

    def __init__(
        self,
        load: BoardLoader,
        *,
        news: asyncio.Event | None = None,
        poll_s: float = BOARD_POLL_S,
    ) -> None:
        super().__init__()
        self._load = load
        self._news = news
        """Set by the console when a board changed: the screen reads again only then.
        Without it (a loader of its own), the screen reads every ``poll_s``."""
        self._poll_s = poll_s
        self._shown: tuple[str, list[dict[str, Any]]] | None = None
        self._status: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        with Vertical(id="board"):
            yield Label("[b]Task board[/b]  Enter: claim an open task, finish a claimed one · Esc")
            yield DataTable(id="tasks", cursor_type="row", zebra_stripes=True)
            yield Static(id="board-note")

    def on_mount(self) -> None:
        self.query_one("#board").border_title = "tasks"
        table = self.query_one("#tasks", DataTable)
        table.add_columns(*TASK_COLUMNS)
        table.focus()
        if self._news is None:
            self.set_interval(self._poll_s, self._poll)
        else:
            self.run_worker(self._follow(self._news), group="board-news", exit_on_error=False)
        self._poll()

    async def _follow(self, news: asyncio.Event) -> None:
        while True:
            await news.wait()
            news.clear()
            self._poll()

    def _poll(self) -> None:
        self.run_worker(self.reload(), exclusive=True, group="board", exit_on_error=False)

    async def reload(self) -> None:
        """Read the board once; redraw if anything changed, else leave the screen be."""
        note = self.query_one("#board-note", Static)
        try:
            project, tasks = await self._load()
        except AteamError as exc:  # the last good board stays up, the error under it
            note.update(Text(exc.one_line(), no_wrap=True, overflow="ellipsis"))
            return
        note.update("")
        shown = (project, task_rows(tasks))
        if shown != self._shown:
            self._shown = shown
            self._draw(*shown)

    def _draw(self, project: str, rows: list[dict[str, Any]]) -> None:
        table = self.query_one("#tasks", DataTable)
        keep = self._highlighted_id()
        table.clear()
        columns = TASK_COLUMNS
        if any(row.get("branch") for row in rows) or len(table.columns) > len(TASK_COLUMNS):
            # A task's branch, commit and diffstat (worktree: task|agent), once one has it.
            columns = [*TASK_COLUMNS, "branch"]
            if len(table.columns) < len(columns):
                table.add_column("branch")
        for row in rows:
            cells = [_cell(column, row.get(column)) for column in columns]
            table.add_row(*cells, key=row["id"])
        self._status = {row["id"]: row["status"] for row in rows}
        if keep in self._status:
            table.move_cursor(row=table.get_row_index(keep))
        board = self.query_one("#board")
        board.border_title = f"tasks · {project} ({len(rows)})"

    def _highlighted_id(self) -> str | None:
        table = self.query_one("#tasks", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return str(key.value) if key.value is not None else None

    @on(DataTable.RowSelected, "#tasks")
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        task_id = str(event.row_key.value)
        step = NEXT_STEP.get(self._status.get(task_id, ""))
        if step is not None:
            self.dismiss(f"/tasks {step} {task_id} ")

    def action_close(self) -> None:
        self.dismiss(None)


def _cell(column: str, value: Any) -> Text:
    if value is None or value == "":
        return Text("-", "dim")
    style = STATUS_STYLES.get(str(value), "") if column == "status" else ""
    return Text(str(value), style, no_wrap=True, overflow="ellipsis")
