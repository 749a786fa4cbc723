"""The RPC contract: every method of a real agent replies what its result model declares.

Clients read replies leniently (:mod:`ateam.wire.results`). This test holds the agent
to the models: each method of the catalogue, called over the bus, answers with a map
that validates in strict mode and has no top-level field its model does not name.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from ateam.agent.runtime.process import Agent
from ateam.agent.runtime.service import build_methods
from ateam.agent.state.modes import PlanRecord
from ateam.bus.identity import AgentIdentity
from ateam.bus.rpc import RpcClient
from ateam.client import AgentHandle, Team
from ateam.wire.modes import ModesResult
from ateam.wire.results import STRICT_ROWS, Result
from tests._wait import async_wait_for


def check(model: type[Result], reply: Any) -> None:
    assert isinstance(reply, dict)
    model.model_validate(reply, strict=True, by_alias=True, context={STRICT_ROWS: True})
    named = {f.alias or name for name, f in model.model_fields.items()}
    assert set(reply) <= named, f"{model.__name__}: undeclared {set(reply) - named}"


async def test_every_method_replies_what_its_model_declares(
    agent: Agent, team: Team, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Deploys\nRoll back with make rollback.\n")
    handle: AgentHandle = team.agent(agent.id)
    catalogue = build_methods(agent.port)  # read for its result models only
    seen: set[str] = set()

    async def call(method: str, params: dict[str, Any] | None = None) -> Any:
        result = catalogue[method].result
        assert result is not None, f"{method} names no result model"
        reply = await handle.call(method, params or {}, timeout=60)
        check(result, reply)
        seen.add(method)
        return reply

    asking = asyncio.create_task(
        agent.parts.approvals.ask(
            kind="diff",
            tool="fs.patch",
            args={"path": "notes.md"},
            task_id=None,
            trace_id=None,
            timeout_s=30,
            extra={"path": "notes.md", "diff": "-old\n+new\n", "new_content": "new\n"},
        )
    )
    async with handle.attach():
        await call("status")
        await call("input", {"text": "hello"})
        assert await handle.allow_external(True)
        await call("team.input", {"text": "from a runtime", "source": "mcp:contract"})
        await async_wait_for(
            lambda: not len(agent.parts.queue) and agent.parts.queue.current is None, 10
        )
        await call("interrupt")
        await call("cancel", {"hard": True})
        await call("queue.list")
        await call("queue.current")
        await call("queue.clear", {"confirm": True})
        await call("queue.retry")
        await call("alert.ack")
        await call("history.tail", {"n": 5})
        await call("memory.stats")
        await async_wait_for(lambda: agent.parts.approvals.pending(), 10)
        await call("approval.list")
        await call("approval.list", {"full": True})
        await call("approval.answer", {"decision": "approve"})
        await call("prompt.show")
        await call("prompt.overlay")
        await call("prompt.append", {"text": "Be brief."})
        await call("prompt.set", {"text": "Be brief.\n"})
        await call("prompt.reload")
        await call("tools.list")
        current = (await call("model.list"))["current"]
        await call("model.use", {"model": current})
        await call("model.save")
        await call("model.use", {"model": None})
        await call("handoff.show")
        await call("plan.write", {"text": "- [ ] ship\n"})
        await call("plan.append", {"text": "- [ ] test"})
        await call("plan.read")
        await call("plan.delete", {"confirm": True})
        await call("kb.ingest", {"scope": "agent", "paths": [str(notes)]})
        await call("kb.search", {"scope": "agent", "query": "roll back a deploy"})
        ids = [doc["doc_id"] for doc in (await call("kb.list", {"scope": "agent"}))["documents"]]
        chunks = (await call("kb.export", {"scope": "agent", "ids": ids}))["chunks"]
        await call("kb.import", {"scope": "agent", "chunks": chunks, "copied_from": agent.id})
        await call("offload.propose", {"name": "zeus-2"})
        await call("context.summarize")
        await call("history.clear", {"confirm_id": agent.id})
        await call("plan.state")
        agent.parts.modes.store.put(PlanRecord(task="trace:contract"))  # a task waits
        await call("plan.reject", {"feedback": "smaller steps"})
        lead = AgentIdentity(f"{agent.id.split('/')[0]}/lead")  # a teammate, proven
        await agent.parts.client.set(agent.parts.keys.identity(lead.agent), lead.digest)
        rpc = RpcClient(agent.parts.client, agent.parts.keys, caller=lead.caller, auth=lead.token)
        check(
            ModesResult,
            await rpc.call(agent.id, "team.plan", {"decision": "reject", "feedback": "no"}),
        )
        seen.add("team.plan")
        await call("plan.approve", {"note": "go"})
        await call("delegate.set", {"on": True})
        await call("shutdown")
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(asking, 5)
    assert seen == set(catalogue), f"not called: {sorted(set(catalogue) - seen)}"
