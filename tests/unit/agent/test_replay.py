"""Replayed queue items that must not run again (issue 22, points 2 and 7a).

Each test leaves the agent's state as a kill -9 would — the item recorded as started in
``queue.jsonl``, its turns in ``history.jsonl`` — with the real stores, then starts a
real agent on a real Redis and watches what its worker does with the item. The model is
the ``scripted`` one with a single turn, so a run shows up as that turn in the history.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from ateam.agent.runtime.process import Agent
from ateam.agent.state.history import History
from ateam.agent.state.queue import DurableQueue
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.codec import unpack
from ateam.client import Target, Team
from ateam.config import AgentConfig, standalone_agent
from ateam.providers.scripted import ScriptedProvider
from ateam.wire.board import BoardTask, TaskStatus
from ateam.wire.events import TaskEnd
from ateam.wire.turns import Turn
from tests._wait import async_wait_for

RERUN = "a second answer: the task ran again"
ANSWER = "the answer, written just before the kill"


@pytest.fixture
def config(tmp_path: Path) -> AgentConfig:
    config = standalone_agent("proj", "zeus", tmp_path / "zeus")
    return dataclasses.replace(config, spec=config.spec.model_copy(update={"take_tasks": True}))


@pytest.fixture
def provider(tmp_path: Path) -> ScriptedProvider:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"turns": [{"text": RERUN}]}))
    return ScriptedProvider(script)


@pytest.fixture
async def start(
    config: AgentConfig, provider: ScriptedProvider, target: Target
) -> AsyncIterator[Callable[[], Any]]:
    started: list[Agent] = []

    async def run(*, killed_before: bool = False) -> Agent:
        agent = Agent(config, target, provider, killed_before=killed_before)
        await agent.start()
        started.append(agent)
        return agent

    yield run
    for agent in started:
        await agent.stop()


def killed_mid_task(config: AgentConfig, source: str, *, answered: bool) -> QueueItem:
    """The agent's files as a kill -9 leaves them while ``source``'s item is in progress:
    with its final answer already written (``answered``), or only its input."""
    queue = DurableQueue(config.state_dir)
    queue.open()
    item = queue.append("[board task …] do the work", source=source)
    queue.take()
    queue.close()
    history = History(config.state_dir)
    history.open()
    turn = {"task_id": item.id, "trace_id": item.trace_id, "model": "script", "ts": time.time()}
    turns = [{**turn, "role": "user", "source": source, "content": item.text}]
    if answered:
        turns.append({**turn, "role": "assistant", "source": "model", "content": ANSWER})
        turns[-1]["final"] = True
    history.append_many([Turn.model_validate(t) for t in turns])
    history.close()
    return item


def turns_of(agent: Agent, item: QueueItem, role: str) -> list[dict[str, Any]]:
    return [
        t
        for t in agent.parts.history.tail(100)
        if t.get("task_id") == item.id and t["role"] == role
    ]


async def events_of(agent: Agent, item: QueueItem, until: str) -> list[dict[str, Any]]:
    """The item's events, once one of type or code ``until`` is among them."""

    async def read() -> list[dict[str, Any]] | None:
        raw = await agent.parts.client.xrange(agent.parts.keys.events(agent.id))
        bodies = [unpack(fields[b"d"]) for _, fields in raw]
        mine = [b for b in bodies if b.get("task_id") == item.id]
        return mine if any(until in (b["type"], b.get("code")) for b in mine) else None

    found: list[dict[str, Any]] = await async_wait_for(read, 10, f"the item's {until} event")
    return found


async def board_status(team: Team, task_id: str, status: TaskStatus) -> BoardTask:
    async def read() -> BoardTask | None:
        task = await team.tasks.get("proj", task_id)
        return task if task is not None and task.status is status else None

    found: BoardTask = await async_wait_for(read, 10, f"task {task_id} to be {status}")
    return found


def settled(agent: Agent) -> bool:
    return agent.parts.queue.current is None and len(agent.parts.queue) == 0


@pytest.mark.parametrize("killed_before", [False, True], ids=["crashed", "killed"])
async def test_an_item_whose_answer_is_in_the_history_is_marked_done_not_run(
    config: AgentConfig, start: Callable[..., Any], killed_before: bool
) -> None:
    item = killed_mid_task(config, "console", answered=True)

    # The supervisor says whether the process was killed; the item's attempts differ.
    agent: Agent = await start(killed_before=killed_before)

    await async_wait_for(lambda: settled(agent), 10, "the answered item to be settled")
    assert [t["content"] for t in turns_of(agent, item, "assistant")] == [ANSWER]  # no rerun
    events = await events_of(agent, item, "task.end")
    assert not [e for e in events if e["type"] == "task.start"]
    ends = [e for e in events if e["type"] == "task.end"]
    assert len(ends) == 1 and ends[0]["ok"] is True and ends[0]["recovered"] is True
    envelope = {"type", "ts", "v", "offset", "agent"}
    payload = {k: v for k, v in ends[0].items() if k not in envelope}
    assert TaskEnd.model_validate(payload, strict=True).recovered is True  # the wire model
    assert set(payload) <= set(TaskEnd.model_fields)
    # Done for good: a restart finds nothing to do either.
    await agent.stop()
    reopened = DurableQueue(config.state_dir)
    reopened.open()
    assert reopened.current is None and reopened.pending() == []
    reopened.close()


async def test_an_answered_board_task_is_marked_done_with_the_recorded_answer(
    config: AgentConfig, start: Callable[[], Any], team: Team
) -> None:
    task = await team.tasks.add("proj", title="write the parser", created_by="proj/lead")
    await team.tasks.claim("proj", task.id, agent=config.id)
    item = killed_mid_task(config, f"board:{task.id}", answered=True)

    agent: Agent = await start()

    finished = await board_status(team, task.id, TaskStatus.DONE)
    # The board hears of the end before the queue does (issue 22): wait for the queue too.
    await async_wait_for(lambda: settled(agent), 10, "the replayed item to be settled")
    assert finished.result == ANSWER and finished.assignee == config.id
    assert [t["content"] for t in turns_of(agent, item, "assistant")] == [ANSWER]


async def test_a_board_task_a_teammate_holds_now_is_dropped_with_a_notice(
    config: AgentConfig, start: Callable[[], Any], team: Team
) -> None:
    # While zeus was down its claim went back to open and a teammate took the task.
    task = await team.tasks.add("proj", title="write the lexer", created_by="proj/lead")
    await team.tasks.claim("proj", task.id, agent="proj/hera")
    item = killed_mid_task(config, f"board:{task.id}", answered=False)

    agent: Agent = await start()

    await async_wait_for(lambda: settled(agent), 10, "the replayed item to be settled")
    assert turns_of(agent, item, "assistant") == []  # the model was never asked
    notices = turns_of(agent, item, "system")
    assert len(notices) == 1 and "claimed by proj/hera" in notices[0]["content"]
    events = await events_of(agent, item, "queue.dropped")
    assert not [e for e in events if e["type"] == "task.start"]
    dropped = [e for e in events if e.get("code") == "queue.dropped"]
    assert len(dropped) == 1 and task.id in dropped[0]["msg"]
    held = await team.tasks.get("proj", task.id)
    assert held is not None and held.status is TaskStatus.CLAIMED and held.assignee == "proj/hera"


async def test_a_board_task_still_held_is_run_again(
    config: AgentConfig, start: Callable[[], Any], team: Team
) -> None:
    task = await team.tasks.add("proj", title="write the docs", created_by="proj/lead")
    await team.tasks.claim("proj", task.id, agent=config.id)
    item = killed_mid_task(config, f"board:{task.id}", answered=False)

    agent: Agent = await start()

    finished = await board_status(team, task.id, TaskStatus.DONE)
    answers = turns_of(agent, item, "assistant")
    assert [t["content"] for t in answers] == [RERUN] and answers[0]["final"] is True
    assert finished.result == RERUN and finished.assignee == config.id


async def test_a_claim_with_nothing_queued_for_it_is_given_up_at_start(
    config: AgentConfig, start: Callable[[], Any], team: Team
) -> None:
    # Killed between claiming the task and queueing it: the claim is all there is.
    task = await team.tasks.add("proj", title="write the tests", created_by="proj/lead")
    await team.tasks.claim("proj", task.id, agent=config.id)

    agent: Agent = await start()

    # Reopened, then taken again by the idle agent itself, and run once.
    finished = await board_status(team, task.id, TaskStatus.DONE)
    assert finished.assignee == config.id and finished.result == RERUN
    runs = [t for t in agent.parts.history.tail(100) if t.get("source") == f"board:{task.id}"]
    assert len(runs) == 1


async def test_the_board_hears_of_the_end_before_the_queue(
    config: AgentConfig, start: Callable[[], Any], team: Team, target: Target
) -> None:
    """Killed between the two, the item is replayed and settled (see above); the other
    order would leave a claim with nothing queued for it, given up and run again."""
    agent: Agent = await start()
    board_then: list[str] = []
    done = agent.parts.queue.done

    def spy(item_id: str, **kwargs: Any) -> None:
        item = agent.parts.queue.current
        assert item is not None
        raw = sync.hget(agent.parts.keys.board("proj"), item.source.removeprefix("board:"))
        board_then.append(unpack(raw)["status"])  # type: ignore[arg-type]
        done(item_id, **kwargs)

    sync = redis.Redis.from_url(target.url)  # the spy runs inside the sync queue call
    agent.parts.queue.done = spy  # type: ignore[method-assign]
    task = await team.tasks.add("proj", title="write the changelog", created_by="proj/lead")

    await board_status(team, task.id, TaskStatus.DONE)
    await async_wait_for(lambda: board_then, 10, "the queue to record the end")
    sync.close()
    assert board_then == ["done"]
