"""The wire contract: every event a real agent publishes fits its type's model, strictly.

The models in :mod:`ateam.wire.events` are read leniently by consumers (another
version's fields are kept, a missing one defaults). This test holds the producer to
them: a run with model text, a tool call with text and binary output, a diff waiting
for approval, its answer, a state change and a prompt edit publishes only events whose
payload validates in strict mode, with no field the model does not name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import yaml

from ateam.agent.runtime.process import Agent, AgentState
from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget
from ateam.bus.events import Event
from ateam.config import standalone_agent
from ateam.providers import ScriptedProvider
from ateam.tools.approvals import Decision
from ateam.wire.events import PAYLOADS, EventType
from tests._wait import async_wait_for

OLD_SHA = hashlib.sha256(b"old\n").hexdigest()
ENVELOPE = {"type", "ts", "v", "offset", "agent"}
"""Fields of every event that are the envelope's, not the payload's."""


def tool(name: str, **args: Any) -> dict[str, Any]:
    return {"text": "Calling.", "tool_calls": [{"name": name, "args": args}]}


@pytest.fixture
async def agent(target: RedisTarget, tmp_path: Path) -> AsyncIterator[Agent]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("old\n")
    script = tmp_path / "script.yaml"
    turns = [
        tool("os.exec", cmd="printf 'text line\\n'; printf '\\377\\376\\n'; exit 3"),
        tool("fs.patch", path="notes.txt", content="new\n", base_sha256=OLD_SHA),
        {"text": "All done."},
    ]
    script.write_text(yaml.safe_dump({"turns": turns}))
    config = standalone_agent("proj", "wire", work)
    config = dataclasses.replace(config, tools_allow=("fs.*", "os.exec"))
    a = Agent(config, target, ScriptedProvider(script))
    await a.start()
    yield a
    await a.stop()


async def published(client: aioredis.Redis, agent: Agent) -> list[dict[str, Any]]:
    return [unpack(f[b"d"]) for _, f in await client.xrange(agent.parts.keys.events(agent.id))]


async def test_every_published_event_fits_its_model_strictly(
    agent: Agent, client: aioredis.Redis
) -> None:
    agent.parts.worker.enqueue("change the notes", source="test")
    await async_wait_for(lambda: agent.parts.approvals.pending(), 10)
    (request,) = agent.parts.approvals.pending()
    agent.parts.approvals.answer(request.id, Decision.APPROVE, content=None, by="console:test")
    await async_wait_for(lambda: agent.state is AgentState.IDLE and not len(agent.parts.queue), 10)
    agent.parts.prompts.append_overlay("Be brief.")
    agent.parts.reloader.changed("overlay line added")
    await asyncio.sleep(0.3)  # the publisher writes in batches

    bodies = await published(client, agent)
    seen = {body["type"] for body in bodies}
    wanted = {
        EventType.TOKEN, EventType.TOOL_START, EventType.TOOL_OUTPUT, EventType.TOOL_END,
        EventType.TASK_START, EventType.TASK_END, EventType.STATE, EventType.DIFF_PROPOSED,
        EventType.APPROVAL_RESOLVED, EventType.PROMPT,
    }  # fmt: skip
    assert wanted <= seen, f"the run did not publish {sorted(wanted - seen)}"
    for body in bodies:
        fields = {k: v for k, v in body.items() if k not in ENVELOPE}
        model = PAYLOADS[body["type"]]
        # Strict: the producer sends the declared types, not strings that coerce.
        model.model_validate(fields, strict=True, by_alias=True)
        named = {f.alias or name for name, f in model.model_fields.items()}
        assert set(fields) <= named, f"{body['type']} sends undeclared {set(fields) - named}"
        event = Event(agent.id, int(body["offset"]), body["type"], body["ts"], dict(fields))
        assert type(event.payload) is model
