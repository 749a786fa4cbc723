"""The agent list of the panes console at 10 000 agents' scale (issue 28 §4).

OptionList lays out every prompt it lists to learn its height, and a row changed in
place refreshed the widget once per row, and a change of every row drew every row's
text: with thousands of agents each took from a tenth to most of a second, during which
the console took no key. These count the work instead of timing it: prompts drawn and
laid out, refreshes asked for, and what the list shows.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from ateam.bus.registry import AgentEntry
from ateam.console.panes import agent_list
from ateam.console.panes.agent_list import AgentList
from ateam.wire.registry import AgentStatus

TEAM = 3000


class ListApp(App[None]):
    CSS = "#agents { width: 34; height: 1fr; text-wrap: nowrap; text-overflow: ellipsis; }"
    """As the panes console lays the list out (ateam/console/panes/app.py)."""

    def compose(self) -> ComposeResult:
        yield AgentList(id="agents")


def views(count: int, **fields: Any) -> dict[str, AgentStatus]:
    made = {}
    for i in range(count):
        entry = AgentEntry(id=f"proj/a{i:05d}", name=f"a{i:05d}", project="proj", **fields)
        made[entry.id] = AgentStatus(entry, 0.0)
    return made


def state_of(view: AgentStatus) -> str:
    return view.state


async def listed(app: ListApp, pilot: Pilot[None]) -> AgentList:
    """The app's list, showing a team of TEAM idle agents."""
    agents = app.query_one(AgentList)
    known = views(TEAM, state="idle")
    agents.redraw(known, list(known), state_of=state_of, attached=None)
    await pilot.pause()
    return agents


def on_screen(agents: AgentList) -> list[str]:
    """The lines the list shows now."""
    return [agents.render_line(y).text for y in range(agents.size.height)]


@pytest.fixture
def laid_out(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the options whose prompt the list laid out (visualized), in order."""
    seen: list[str] = []
    visualize = AgentList._get_visual

    def counted(self: AgentList, option: Any) -> Any:
        if option._visual is None:
            seen.append(str(option.id))
        return visualize(self, option)

    monkeypatch.setattr(AgentList, "_get_visual", counted)
    return seen


async def test_a_join_to_thousands_of_agents_lays_out_only_the_rows_shown(
    laid_out: list[str],
) -> None:
    app = ListApp()
    async with app.run_test(size=(60, 30)) as pilot:
        agents = await listed(app, pilot)
        assert len(laid_out) <= 30  # a screenful at most, not the whole team

        # Every row changed in place (new prompts, none laid out yet), then one joins.
        busy = views(TEAM + 1, state="busy")
        agents.redraw(busy, list(busy)[:TEAM], state_of=state_of, attached=None)
        await pilot.pause()
        laid_out.clear()
        agents.redraw(busy, ["proj/a03000"], state_of=state_of, attached=None)
        await pilot.pause()
        assert agents.option_count == TEAM + 1
        assert len(laid_out) <= 30

        # The map of lines to rows is right all the way down: the last row, shown.
        agents.action_last()
        await pilot.pause()
        shown = on_screen(agents)
        assert any("proj/a03000 busy" in line for line in shown), shown
        assert agents.highlighted_option is not None
        assert agents.highlighted_option.id == "proj/a03000"


async def test_a_change_of_every_row_refreshes_once_and_draws_only_the_rows_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = ListApp()
    async with app.run_test(size=(60, 30)) as pilot:
        agents = await listed(app, pilot)
        refreshes: list[object] = []
        refresh = agents.refresh
        monkeypatch.setattr(agents, "refresh", lambda *a, **k: refreshes.append(a) or refresh())
        drawn: list[str] = []
        draw = agent_list.agent_prompt

        def counted(view: AgentStatus, state: str, *, attached: bool) -> Any:
            drawn.append(view.id)
            return draw(view, state, attached=attached)

        monkeypatch.setattr(agent_list, "agent_prompt", counted)
        busy = views(TEAM, state="busy")
        agents.redraw(busy, list(busy), state_of=state_of, attached=None)
        assert len(refreshes) == 1  # once, not once a row
        await pilot.pause()

        assert 0 < len(drawn) <= 30  # a screenful at most, not the whole team
        assert "busy" in str(agents.get_option("proj/a02999").prompt)
        shown = on_screen(agents)
        assert any("proj/a00000 busy" in line for line in shown), shown
        agents.action_last()
        await pilot.pause()
        shown = on_screen(agents)
        assert any("proj/a02999 busy" in line for line in shown), shown
