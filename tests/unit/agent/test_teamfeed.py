"""Context items reach the agents (issue 12 point 1): pushed, filtered, fed once, in budget.

Real agents on a real Redis; items are posted through the client as a console posts
them, and what is checked is what the agent holds, fed, recorded and ran.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ateam.agent.context.teamfeed import TeamFeed
from ateam.agent.native.tools import context_search
from ateam.agent.runtime.process import Agent
from ateam.client import Target, Team
from ateam.config import standalone_agent
from ateam.config.schema import ContextSubscriptionSpec
from ateam.providers import EchoProvider
from ateam.tools.registry import ToolContext
from tests._wait import async_wait_for


async def started(target: Target, config_dir: Path, name: str, **context: object) -> Agent:
    config = standalone_agent("proj", name, config_dir)
    if context:
        spec = config.spec.model_copy(update={"context": ContextSubscriptionSpec(**context)})
        config = dataclasses.replace(config, spec=spec)
    agent = Agent(config, target, EchoProvider())
    await agent.start()
    await async_wait_for(agent.parts.team.listening.is_set, 10)
    return agent


@pytest.fixture
async def agents(target: Target, tmp_path: Path) -> AsyncIterator[list[Agent]]:
    made: list[Agent] = []
    yield made
    for agent in made:
        await agent.stop()


async def make(
    agents: list[Agent], target: Target, tmp_path: Path, name: str, **ctx: object
) -> Agent:
    agent = await started(target, tmp_path / name, name, **ctx)
    agents.append(agent)
    return agent


def inbox_of(feed: TeamFeed) -> set[str]:
    return {item.title for item in feed.inbox.values()}


def inbox_titles(agent: Agent) -> set[str]:
    return {item.title for item in agent.parts.team.inbox.values()}


async def test_items_are_pushed_to_the_subscribers_that_want_them(
    agents: list[Agent], team: Team, target: Target, tmp_path: Path
) -> None:
    zeus = await make(agents, target, tmp_path, "zeus")  # default: attention and up
    hera = await make(
        agents, target, tmp_path, "hera", tags=("frontend",), min_urgency="background"
    )
    post = team.context.post
    await post("proj", type="status", title="db moved", urgency="attention", tags=["db"])
    await post("proj", type="status", title="css note", urgency="background", tags=["frontend"])
    await post("other", type="alert", title="not ours", urgency="blocking", tags=["frontend"])
    await post("other", type="alert", title="everyone", urgency="attention", scope="global")
    await post("proj", type="status", title="by zeus", urgency="attention", source_agent=zeus.id)
    # No task ran and nobody asked: the items arrived by themselves.
    await async_wait_for(lambda: inbox_titles(zeus) == {"db moved", "everyone"}, 5)
    await async_wait_for(lambda: inbox_titles(hera) == {"css note"}, 5)


async def test_an_item_is_fed_once_recorded_and_not_fed_again_after_a_restart(
    agents: list[Agent], team: Team, target: Target, tmp_path: Path
) -> None:
    zeus = await make(agents, target, tmp_path, "zeus")
    item = await team.context.post("proj", type="decision", title="use db2", urgency="attention")
    await async_wait_for(lambda: item.id in zeus.parts.team.inbox, 5)
    feed = zeus.parts.team
    await feed.begin_task(time.time())
    assert [i.id for i in feed.items] == [item.id]
    assert "use db2" in feed.render()
    await feed.begin_task(time.time())
    assert feed.items == ()
    # The agent's stream records what was fed.
    events = [e async for e in team.agent(zeus.id).tail(0, follow=False)]
    fed = [e for e in events if e.type == "team.context"]
    assert fed and fed[-1].data["items"][0]["id"] == item.id
    # A new feed (a restarted agent) catches up without the fed item.
    again = TeamFeed(feed.store, zeus.parts.client, zeus.parts.keys, "proj", zeus.id)
    await again.catch_up()
    assert item.id not in again.inbox
    assert item.id in await feed.store.fed("proj", zeus.id)


async def test_the_feed_fits_its_budget_most_urgent_first_and_keeps_the_rest(
    agents: list[Agent], team: Team, target: Target, tmp_path: Path
) -> None:
    zeus = await make(agents, target, tmp_path, "zeus")
    # A feed of its own (no worker takes from it): budget 150 tokens.
    spec = ContextSubscriptionSpec(min_urgency="background", budget_tokens=150)
    parts = zeus.parts
    feed = TeamFeed(parts.team.store, parts.client, parts.keys, "proj", "proj/athena", spec)
    body = "word " * 60  # ~75 tokens: one such item fits beside the header, not two
    post = team.context.post
    await post("proj", type="status", title="older big", content=body, urgency="attention")
    await post("proj", type="status", title="newer big", content=body, urgency="attention")
    await post("proj", type="alert", title="urgent", urgency="blocking")
    await post("proj", type="status", title="quiet", urgency="background")
    await feed.catch_up()
    assert inbox_of(feed) == {"older big", "newer big", "urgent", "quiet"}
    await feed.begin_task(time.time())
    titles = [i.title for i in feed.items]
    # Most urgent first, then the newest; the second big item does not fit and waits.
    assert titles == ["urgent", "newer big", "quiet"]
    assert inbox_of(feed) == {"older big"}
    await feed.begin_task(time.time())
    assert [i.title for i in feed.items] == ["older big"]


async def test_a_blocking_item_interrupts_an_idle_agent_with_a_task_of_its_own(
    agents: list[Agent], team: Team, target: Target, tmp_path: Path
) -> None:
    zeus = await make(agents, target, tmp_path, "zeus")
    item = await team.context.post(
        "proj", type="alert", title="prod is down", content="stop deploys", urgency="blocking"
    )

    def ran() -> list[dict[str, object]]:
        return [t for t in zeus.parts.history.tail(20) if t.get("source") == f"context:{item.id}"]

    await async_wait_for(lambda: bool(ran()), 10)
    text = str(ran()[0]["content"])
    assert text.startswith(f"[blocking team context item {item.id}")
    assert "prod is down" in text and "stop deploys" in text
    # Taken as a task, it is fed: not again in the next task's context.
    assert item.id in await zeus.parts.team.store.fed("proj", zeus.id)
    await zeus.parts.team.begin_task(time.time())
    assert item.id not in {i.id for i in zeus.parts.team.items}


async def test_search_ranks_items_by_meaning(team: Team) -> None:
    post = team.context.post
    await post("proj", type="discovery", title="staging database moved to db2.internal")
    await post("proj", type="status", title="lunch is at noon")
    await post("proj", type="alert", title="login test flaky on CI")
    found = await team.context.search("proj", "where does the staging database live now")
    assert [i.title for i in found][:1] == ["staging database moved to db2.internal"]
    assert "lunch is at noon" not in [i.title for i in found]
    flaky = await team.context.search("proj", "failing CI test for login")
    assert flaky and flaky[0].title == "login test flaky on CI"


async def test_an_idle_agent_reads_no_context_until_an_item_comes(
    agents: list[Agent], team: Team, target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zeus = await make(agents, target, tmp_path, "zeus")
    store = zeus.parts.team.store
    reads: list[str] = []
    for name in ("list", "search", "fed"):
        real = getattr(store, name)

        async def counted(*args: object, _real: Any = real, _name: str = name, **kw: object) -> Any:
            reads.append(_name)
            return await _real(*args, **kw)

        monkeypatch.setattr(store, name, counted)
    await asyncio.sleep(3)  # idle: nothing may be read meanwhile (no polling)
    assert reads == []
    item = await team.context.post("proj", type="status", title="news", urgency="attention")
    await async_wait_for(lambda: item.id in zeus.parts.team.inbox, 5)
    assert reads == []  # pushed: the notice named it, one GET fetched it


async def test_the_context_search_tool_ranks_by_meaning(
    agents: list[Agent], team: Team, target: Target, tmp_path: Path
) -> None:
    zeus = await make(agents, target, tmp_path, "zeus")
    await team.context.post("proj", type="discovery", title="the staging database moved to db2")
    await team.context.post("proj", type="status", title="lunch is at noon")
    ctx = ToolContext(agent_id=zeus.id, cwd=tmp_path, context_items=zeus.parts.team.store)
    found = await context_search.fn(ctx, query="where is the staging DB now")
    assert [item["title"] for item in found] == ["the staging database moved to db2"]


async def test_an_outsiders_blocking_item_wakes_an_owned_agent_only_if_the_owner_allows(
    agents: list[Agent], team: Team, target: Target, tmp_path: Path
) -> None:
    zeus = await make(agents, target, tmp_path, "zeus")
    post = team.context.post

    def ran(item_id: str) -> bool:
        return any(t.get("source") == f"context:{item_id}" for t in zeus.parts.history.tail(50))

    async with team.agent(zeus.id).attach():
        # As `ateam mcp` posts for a client named cursor: an external runtime.
        held = await post(
            "proj", type="alert", title="outside", urgency="blocking", source_runtime="cursor"
        )
        await async_wait_for(lambda: held.id in zeus.parts.team.inbox, 5)
        await asyncio.sleep(1)  # time enough to have woken it, had it been allowed
        assert not ran(held.id) and held.id in zeus.parts.team.inbox  # kept for the next task
        # A person's blocking item (from a console) wakes it at once.
        mine = await post(
            "proj", type="alert", title="inside", urgency="blocking", source_runtime="console"
        )
        await async_wait_for(lambda: ran(mine.id), 10)
        assert await team.agent(zeus.id).allow_external(True)
        later = await post(
            "proj", type="alert", title="outside 2", urgency="blocking", source_runtime="cursor"
        )
        await async_wait_for(lambda: ran(later.id), 10)


async def test_an_item_posted_just_before_an_input_is_in_that_task(
    agents: list[Agent],
    team: Team,
    target: Target,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zeus = await make(agents, target, tmp_path, "zeus")
    store = zeus.parts.team.store
    real_get = store.get

    async def slow_get(*args: Any, **kw: Any) -> Any:
        await asyncio.sleep(0.5)  # the notice's fetch still in flight when the task starts
        return await real_get(*args, **kw)

    monkeypatch.setattr(store, "get", slow_get)
    for round_ in range(3):
        item = await team.context.post(
            "proj", type="status", title=f"news {round_}", urgency="attention"
        )
        await team.agent(zeus.id).send(f"task {round_}")  # no wait between the two
        await async_wait_for(
            lambda: zeus.parts.queue.current is None and not len(zeus.parts.queue), 10
        )
        events = [e async for e in team.agent(zeus.id).tail(0, follow=False)]
        fed = [i["id"] for e in events if e.type == "team.context" for i in e.data["items"]]
        assert item.id in fed, f"round {round_}: fed a task late"
