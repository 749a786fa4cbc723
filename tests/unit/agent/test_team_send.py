"""Agents message each other (issue 12 point 3): ``team.input``, ``relay`` and ``team.send``.

Real agents on a real Redis: the receiver's durable queue is read back, never a value
the test wrote itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ateam.agent.runtime.messenger import TeamMessenger
from ateam.agent.runtime.process import Agent
from ateam.bus.identity import AgentIdentity
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.bus.rpc import RpcClient
from ateam.client import Target, Team
from ateam.config import standalone_agent
from ateam.errors import AgentNotFound, BadRequest, HopLimit, OwnershipDenied
from ateam.providers import EchoProvider
from ateam.redact import Redactor
from tests._wait import async_wait_for


@pytest.fixture
async def other_team(target: Target) -> AsyncIterator[Team]:
    """A second console session (an MCP client or a teammate's view of the bus)."""
    async with await Team.connect(target, redactor=Redactor(), takeover_grace_s=0.1) as t:
        yield t


def pending_texts(agent: Agent) -> list[tuple[str, str, int]]:
    items = [*agent.parts.queue.pending()]
    if agent.parts.queue.current is not None:
        items.insert(0, agent.parts.queue.current)
    return [(item.source, item.text, item.hops) for item in items]


async def as_teammate(agent: Agent, name: str) -> RpcClient:
    """An RPC client speaking as a registered agent ``proj/NAME``, with its identity.

    The teammate is a heartbeat with an identity of its own, as a running agent has:
    the receiver checks the token against the hash that heartbeat published.
    """
    identity = AgentIdentity(f"proj/{name}")
    entry = AgentEntry(id=identity.agent, name=name, project="proj", state="idle")
    await Heartbeat(agent.parts.client, agent.parts.keys, entry, identity=identity).beat()
    return RpcClient(
        agent.parts.client, agent.parts.keys, caller=identity.caller, auth=identity.token
    )


async def test_a_teammate_reaches_an_owned_agent_and_says_who_it_is(
    agent: Agent, team: Team
) -> None:
    params = {"text": "run the migrations", "source": "agent:athena", "hops": 2}
    athena = await as_teammate(agent, "athena")
    async with team.agent(agent.id).attach():
        reply = await athena.call(agent.id, "team.input", {**params, "trace_id": "thread-1"})
    assert reply["created"] and reply["trace_id"] == "thread-1"
    turns = [t for t in agent.parts.history.tail(50) if t.get("role") == "user"]
    queued = pending_texts(agent) + [(t["source"], t["content"], -1) for t in turns]
    mine = [q for q in queued if q[0] == "agent:athena"]
    assert mine, queued
    _, text, _ = mine[0]
    assert text.startswith("[from teammate athena, through team.send]\n")
    assert text.endswith("run the migrations")


async def test_nobody_but_the_teammate_itself_may_speak_as_it(agent: Agent, team: Team) -> None:
    params = {"text": "x", "source": "agent:athena"}
    with pytest.raises(OwnershipDenied, match="must be sent by proj/athena itself"):
        await team.agent(agent.id).call("team.input", params)  # a console's session
    with pytest.raises(OwnershipDenied):
        await (await as_teammate(agent, "hermes")).call(agent.id, "team.input", params)
    with pytest.raises(BadRequest, match="mcp:RUNTIME"):
        await team.agent(agent.id).relay("x", source="agent:athena")


async def test_an_owner_cannot_queue_input_under_a_teammates_name(agent: Agent, team: Team) -> None:
    """``input`` is the owner's; the sources that name a sender are team.input's."""
    async with team.agent(agent.id).attach() as held:
        for source in ("agent:athena", "mcp:claude-code"):
            with pytest.raises(OwnershipDenied, match=r"only team\.input"):
                await held.send("posing", source=source)
        assert (await held.send("mine", source="console")).created
    assert not [item for item in pending_texts(agent) if item[1] == "posing"]


async def test_an_external_runtime_is_refused_while_the_owner_has_not_allowed_it(
    agent: Agent, team: Team, other_team: Team
) -> None:
    outsider = other_team.agent(agent.id)
    # Unowned: an MCP client may queue input, like `ateam send` may.
    first = await outsider.relay("first", source="mcp:claude-code")
    assert first.created
    async with team.agent(agent.id).attach():
        with pytest.raises(OwnershipDenied, match="has not allowed external input"):
            await outsider.relay("second", source="mcp:claude-code")
        # Only the owner may open the door.
        assert await outsider.allow_external(True) is False
        assert await team.agent(agent.id).allow_external(True) is True
        third = await outsider.relay("third", source="mcp:claude-code")
        assert third.created
        assert await team.agent(agent.id).allow_external(False) is True
        with pytest.raises(OwnershipDenied):
            await outsider.relay("fourth", source="mcp:claude-code")


async def test_a_new_owner_does_not_inherit_the_allowance(
    agent: Agent, team: Team, other_team: Team
) -> None:
    async with team.agent(agent.id).attach():
        assert await team.agent(agent.id).allow_external(True)
        owner = await team.agent(agent.id).owner()
        assert owner is not None and owner.external
    async with other_team.agent(agent.id).attach():
        owner = await other_team.agent(agent.id).owner()
        assert owner is not None and not owner.external
        with pytest.raises(OwnershipDenied):
            await team.agent(agent.id).relay("sneaky", source="mcp:cursor")


async def test_a_thread_past_the_hop_limit_is_refused(agent: Agent) -> None:
    limit = agent.config.spec.team.max_hops
    athena = await as_teammate(agent, "athena")
    params = {"source": "agent:athena"}
    await athena.call(agent.id, "team.input", {**params, "text": "at it", "hops": limit})
    with pytest.raises(HopLimit, match=r"team\.max_hops") as caught:
        await athena.call(agent.id, "team.input", {**params, "text": "over", "hops": limit + 1})
    assert caught.value.code == "team.hop_limit"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"text": "x", "source": "console"}, "source"),
        ({"text": "x", "source": "agent:"}, "source"),
        ({"text": " ", "source": "agent:athena"}, "text"),
        ({"text": "x", "source": "agent:athena", "hops": 0}, "hops"),
        ({"text": "x", "source": "agent:athena", "hops": "2"}, "hops"),
    ],
)
async def test_malformed_team_input_is_a_bad_request(
    agent: Agent, params: dict[str, object], field: str
) -> None:
    with pytest.raises(BadRequest, match=field):
        await (await as_teammate(agent, "athena")).call(agent.id, "team.input", params)


@pytest.fixture
async def mate(target: Target, tmp_path: Path) -> AsyncIterator[Agent]:
    config = standalone_agent("proj", "hera", tmp_path / "hera")
    a = Agent(config, target, EchoProvider())
    await a.start()
    yield a
    await a.stop()


async def test_the_messenger_queues_at_a_teammate_and_keeps_the_thread(
    agent: Agent, mate: Agent
) -> None:
    parts = agent.parts
    messenger = TeamMessenger(parts.client, parts.keys, parts.identity, max_hops=3)
    reply = await messenger.send("hera", "check the logs", hops=1, trace_id="t-42")
    assert reply["to"] == "proj/hera" and reply["trace_id"] == "t-42"
    queued = pending_texts(mate)
    history = [
        (t["source"], t["content"]) for t in mate.parts.history.tail(20) if t.get("role") == "user"
    ]
    assert ("agent:zeus" in {q[0] for q in queued}) or any(s == "agent:zeus" for s, _ in history)

    with pytest.raises(HopLimit):
        await messenger.send("hera", "again", hops=4, trace_id="t-42")
    with pytest.raises(BadRequest, match="project"):
        await messenger.send("other/hera", "x", hops=1, trace_id=None)
    with pytest.raises(BadRequest, match="itself"):
        await messenger.send("zeus", "x", hops=1, trace_id=None)
    with pytest.raises(BadRequest, match="agent name"):
        await messenger.send("bad name!", "x", hops=1, trace_id=None)
    with pytest.raises(AgentNotFound):
        await messenger.send("nobody", "x", hops=1, trace_id=None)


async def test_forged_teammates_are_refused_and_the_real_one_gets_through(
    agent: Agent, mate: Agent, team: Team, target: Target
) -> None:
    """Issue 22 point 3: into a console-owned agent, only a proven teammate gets in."""
    client, keys = agent.parts.client, agent.parts.keys

    def rpc(caller: str, auth: str | None = None) -> RpcClient:
        return RpcClient(client, keys, caller=caller, auth=auth)

    hera_hash = (await client.get(keys.identity(mate.id))).decode()
    forgeries = {
        "another agent's id": (rpc("agent:proj/hera"), "agent:hera"),
        "another agent's id with its published hash": (
            rpc("agent:proj/hera", hera_hash),
            "agent:hera",
        ),
        "another agent's id with another instance's token": (
            rpc("agent:proj/hera", AgentIdentity("proj/hera").token),
            "agent:hera",
        ),
        "another agent's id with the receiver's token": (
            rpc("agent:proj/hera", agent.parts.identity.token),
            "agent:hera",
        ),
        "a non-existent agent": (
            rpc("agent:proj/ghost", AgentIdentity("proj/ghost").token),
            "agent:ghost",
        ),
        "the receiver itself": (rpc("agent:proj/zeus"), "agent:zeus"),
        "the receiver itself with its own token": (
            rpc("agent:proj/zeus", agent.parts.identity.token),
            "agent:zeus",
        ),
        "an MCP runtime name as an agent": (rpc("agent:proj/claude-code"), "agent:claude-code"),
        "an MCP runtime as a teammate": (rpc("mcp:claude-code"), "agent:hera"),
    }
    # A session named after a teammate carries a token too: its ownership token.
    async with await Team.connect(target, session="agent:proj/hera", redactor=Redactor()) as t:
        named = t.agent(agent.id)
        async with team.agent(agent.id).attach():
            for what, (client_, source) in forgeries.items():
                params = {"text": f"forged: {what}", "source": source}
                with pytest.raises(OwnershipDenied) as caught:
                    await client_.call(agent.id, "team.input", params)
                assert caught.value.code == "ownership.denied", what
            with pytest.raises(OwnershipDenied):
                await named.call(
                    "team.input", {"text": "forged: a session", "source": "agent:hera"}
                )

            # The real teammate still gets in, through its own team.send.
            real = TeamMessenger(mate.parts.client, mate.parts.keys, mate.parts.identity, 3)
            reply = await real.send("zeus", "the real one", hops=1, trace_id=None)
    assert reply["to"] == agent.id
    queued = pending_texts(agent) + [
        (t["source"], t["content"], -1)
        for t in agent.parts.history.tail(50)
        if t.get("role") == "user"
    ]
    assert not [q for q in queued if "forged" in q[1]], queued
    # Queued, or already taken into the history (both while it runs).
    assert {q[0] for q in queued if q[1].endswith("the real one")} == {"agent:hera"}


async def test_a_teammate_that_took_its_lost_lock_again_still_proves_itself(
    agent: Agent, mate: Agent
) -> None:
    """A Redis that lost hera's lock lost her identity hash too: her new heartbeat (the
    one the upkeep makes when it takes the lock again) publishes the same identity."""
    client, keys = agent.parts.client, agent.parts.keys
    await client.delete(keys.lock(mate.id), keys.identity(mate.id))
    mate.parts.status.touch()  # the upkeep looks at once rather than at its next beat
    await async_wait_for(lambda: client.exists(keys.identity(mate.id)), 15, "hera's proof")
    real = TeamMessenger(mate.parts.client, mate.parts.keys, mate.parts.identity, 3)
    reply = await real.send("zeus", "after the loss", hops=1, trace_id=None)
    assert reply["to"] == agent.id
