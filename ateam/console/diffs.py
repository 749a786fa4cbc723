"""How a branch's changes are shown, once for every front end: ``ateam diff``, ``/diff`` in
the plain console, and the pager of panes mode (issue 27).

The list of files comes first (so a long diff's point is seen before its detail), then
the unified diff highlighted by Rich's ``diff`` lexer, then what was left out. Each
front end gets one :class:`rich.text.Text`: a terminal prints its styles, a pipe its
plain characters.
"""

from __future__ import annotations

import io
from typing import Protocol, runtime_checkable

from rich.console import Console
from rich.syntax import Syntax
from rich.text import Text

from ateam.console.session import ConsoleView
from ateam.worktrees import FileChange, Landed, WorkDiff

__all__ = ["Pager", "ansi", "diff_text", "file_lines", "landed_line", "show_page", "title_of"]

DIFF_THEME = "ansi_dark"
"""The terminal's own colours: red and green as the user set them up."""

_STATUS_STYLES = {"A": "green", "D": "red", "M": "yellow", "R": "cyan"}


def title_of(diff: WorkDiff) -> str:
    """``ateam/hera/t-1a2b against main (3 files +10 -2, some not committed)``."""
    pending = ", some not committed" if diff.uncommitted else ""
    return f"{diff.branch} against {diff.base} ({diff.stat_line()}{pending})"


def _file_line(change: FileChange) -> str:
    counts = "binary" if change.binary else f"+{change.insertions} -{change.deletions}"
    return f"  {change.status}  {change.path}  {counts}"


def file_lines(diff: WorkDiff) -> list[str]:
    """The title, then one line per file changed: status letter, path, counts."""
    if not diff.files:
        return [f"{diff.branch} against {diff.base}: no changes"]
    return [title_of(diff), *(_file_line(change) for change in diff.files)]


def diff_text(diff: WorkDiff, *, stat_only: bool = False) -> Text:
    """The files, then (unless ``stat_only``) the coloured diff and what was left out."""
    shown = Text()
    for number, line in enumerate(file_lines(diff)):
        status = line[2:3] if number and diff.files else ""
        shown.append(line + "\n", style=_STATUS_STYLES.get(status, "bold" if not number else ""))
    if stat_only or not diff.files:
        return shown
    shown.append("\n")
    if diff.diff:
        shown.append_text(Syntax(diff.diff, "diff", theme=DIFF_THEME).highlight(diff.diff))
    note = diff.note()
    if note:
        shown.append(
            ("" if diff.diff.endswith("\n") or not diff.diff else "\n") + note + "\n", style="dim"
        )
    return shown


def landed_line(landed: Landed) -> str:
    """``ateam/zeus/t-1 merged into main at 1a2b3c4d5e; worktree and branch removed``."""
    how = "squashed into" if landed.squashed else "merged into"
    after = "worktree and branch removed" if landed.removed else "branch kept"
    return f"{landed.branch} {how} {landed.into} at {landed.commit[:10]}; {after}"


def ansi(text: Text, *, color: bool, width: int = 200) -> str:
    """``text`` as a terminal shows it (escapes when ``color``), without a last newline."""
    if not color:
        return text.plain.rstrip("\n")
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system="standard", width=width).print(
        text, end="", soft_wrap=True
    )
    return out.getvalue().rstrip("\n")


@runtime_checkable
class Pager(Protocol):
    """A console view that shows a long text its own way (both consoles' views do)."""

    def page(self, title: str, text: Text) -> None:
        """Printed whole in plain mode; a screen to scroll in panes mode."""


def show_page(view: ConsoleView, title: str, text: Text) -> None:
    """``text`` paged where the view can, else line by line."""
    if isinstance(view, Pager):
        view.page(title, text)
        return
    for line in text.plain.splitlines():
        view.info(line)
