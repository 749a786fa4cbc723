"""``/diff`` in panes mode (issue 27): the files stay in the stream, the whole diff opens on
a screen of its own that scrolls and closes with Escape.

The panes console runs headless with Pilot against the test's redis-server, in a project
that is a real git repository with a task's branch made as an agent makes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from ateam.bus.connection import RedisTarget
from ateam.console.panes.pager import PagerScreen
from tests._gitwork import init_repo, task_work
from tests._wait import async_wait_for
from tests.unit.console.test_panes import SIZE, make_app, started, stream_lines, type_line

TASK = "t-0123456789"


@pytest.fixture(autouse=True)
def in_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    (root / ".ateam").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: proj\n")
    init_repo(root, {"a.txt": "a\n"})
    task_work(root, "zeus", TASK, {"b.py": "".join(f"x{n} = {n}\n" for n in range(200))})
    monkeypatch.chdir(root)
    return root


async def test_diff_opens_a_pager_and_escape_closes_it(target: RedisTarget) -> None:
    app = make_app(target)
    async with app.run_test(size=SIZE) as pilot:
        await started(app)
        await type_line(pilot, f"/diff {TASK}")
        await async_wait_for(lambda: isinstance(app.screen, PagerScreen))
        screen = app.screen
        assert isinstance(screen, PagerScreen)
        shown = screen.text.plain
        assert shown.startswith(f"ateam/zeus/{TASK} against main (1 file +200 -0)")
        assert "  A  b.py  +200 -0" in shown and "+x199 = 199" in shown
        assert screen.query_one("#pager-text", Static) is not None
        await pilot.press("end")
        await pilot.press("escape")
        await async_wait_for(lambda: not isinstance(app.screen, PagerScreen))
        lines = stream_lines(app)
        assert any(f"ateam/zeus/{TASK} against main" in line for line in lines)
