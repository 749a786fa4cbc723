"""``ateam mcp --as``: the tools that act do so as the agent, proven by its token.

The agent is the real echo agent ``proj/zeus`` of ``tests/unit/conftest.py``, in this
process, so the test holds its instance's identity as its coding agent's runtime would
be given it (:mod:`ateam.agent.acp.teammate`); the server is the real one, reached
through the SDK's client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ateam.agent.runtime.process import Agent
from ateam.client import Target, Team
from ateam.config import standalone_agent
from ateam.errors import Code
from ateam.mcp import TOOL_NAMES, AgentBridge, AteamServer, TeamBridge, build_server
from ateam.providers import EchoProvider
from tests._wait import async_wait_for
from tests.unit.mcp._client import call, connect, fails

ACTING = ("agent_send", "context_post", "task_add", "task_claim", "task_done")
"""The tools whose effects are attributed: each proves the identity first."""


def acting_server(team: Team, agent: Agent, token: str | None = None) -> AteamServer:
    """The server as ``ateam mcp --as zeus`` builds it, given ``token`` (default: zeus's)."""
    member = team.member(agent.id, token or agent.parts.identity.token, max_hops=4)
    bridge = TeamBridge(team, member.project)
    return build_server(bridge, AgentBridge(team, member, bridge))


@pytest.fixture
async def hera(target: Target, tmp_path: Path) -> AsyncIterator[Agent]:
    """A teammate of zeus, in this process too."""
    (tmp_path / "hera").mkdir()
    a = Agent(standalone_agent("proj", "hera", tmp_path / "hera"), target, EchoProvider())
    await a.start()
    yield a
    await a.stop()


async def test_the_tools_say_whom_they_act_as(agent: Agent, team: Team) -> None:
    async with connect(acting_server(team, agent)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert list(tools) == list(TOOL_NAMES)
    for name in ACTING:
        assert "proj/zeus" in (tools[name].description or ""), name
    assert "project" not in tools["task_claim"].input_schema["properties"]
    assert tools["task_claim"].input_schema["required"] == ["task_id"]
    assert "agent" not in tools["kb_search"].input_schema.get("required", [])


async def test_claims_tasks_and_items_are_the_agents(agent: Agent, team: Team) -> None:
    async with connect(acting_server(team, agent)) as client:
        added = await call(client, "task_add", title="write the parser")
        assert added["created_by"] == "proj/zeus"
        claimed = await call(client, "task_claim", task_id=added["id"])
        assert (claimed["status"], claimed["assignee"]) == ("claimed", "proj/zeus")
        done = await call(client, "task_done", task_id=added["id"], result="parsed")
        assert (done["status"], done["result"]) == ("done", "parsed")

        other = await call(client, "task_add", title="named the agent itself")
        claimed = await call(client, "task_claim", task_id=other["id"], agent="zeus")
        assert claimed["assignee"] == "proj/zeus"

        posted = await call(client, "context_post", type="decision", title="use two words")
        assert (posted["source_agent"], posted["source_runtime"]) == ("proj/zeus", "ateam")
    # Read back from the bus by another session, as every agent and console sees it.
    item = await team.context.get("proj", posted["id"])
    assert item is not None and item.source_agent == "proj/zeus"
    task = await team.tasks.get("proj", added["id"])
    assert task is not None and (task.assignee, task.status) == ("proj/zeus", "done")


async def test_acting_for_another_agent_is_refused(agent: Agent, team: Team) -> None:
    async with connect(acting_server(team, agent)) as client:
        task = await call(client, "task_add", title="not yours to give")
        for tool, extra in (("task_claim", {}), ("task_done", {"result": "x"})):
            error = await fails(client, tool, task_id=task["id"], agent="proj/hera", **extra)
            assert error.startswith(f"{Code.IDENTITY_REFUSED}: "), error
            assert "acts as proj/zeus only" in error
    assert (await team.tasks.get("proj", task["id"])).status == "open"  # type: ignore[union-attr]


async def test_a_wrong_token_acts_not_at_all(agent: Agent, team: Team) -> None:
    calls = {
        "agent_send": {"agent": "hera", "text": "x"},
        "context_post": {"type": "status", "title": "x"},
        "task_add": {"title": "x"},
        "task_claim": {"task_id": "t-0000000000"},
        "task_done": {"task_id": "t-0000000000"},
    }
    async with connect(acting_server(team, agent, token="0" * 64)) as client:
        for tool, arguments in calls.items():
            error = await fails(client, tool, **arguments)
            assert error.startswith(f"{Code.IDENTITY_REFUSED}: "), (tool, error)
            assert "not the one proj/zeus's running instance publishes" in error
        # Reading is anyone's, as for any MCP client.
        assert (await call(client, "tasks_list"))["tasks"] == []
    assert await team.tasks.ls("proj") == []
    assert await team.context.ls("proj") == []


async def test_a_send_is_the_agents_team_send(agent: Agent, team: Team, hera: Agent) -> None:
    async with connect(acting_server(team, agent)) as client:
        sent = await call(client, "agent_send", agent="hera", text="take the parser")
        assert (sent["to"], sent["from"], sent["hops"]) == ("proj/hera", "proj/zeus", 1)
        for to, why in (("zeus", "cannot send itself"), ("other/hera", "in project 'other'")):
            error = await fails(client, "agent_send", agent=to, text="x")
            assert error.startswith(f"{Code.BAD_REQUEST}: ") and why in error, error
        error = await fails(client, "agent_send", agent="proj/nobody", text="x")
        assert error.startswith(f"{Code.AGENT_NOT_FOUND}: "), error

    def arrived() -> dict[str, object] | None:
        turns = [t for t in hera.parts.history.tail(20) if t.get("role") == "user"]
        return turns[0] if turns else None

    turn = await async_wait_for(arrived, 10, "zeus's message in hera's history")
    assert turn["source"] == "agent:zeus"
    assert str(turn["content"]).startswith("[from teammate zeus, through team.send]\n")
    assert turn["trace_id"] == sent["trace_id"]


async def test_kb_search_means_the_agents_own_knowledge_base(
    agent: Agent, team: Team, hera: Agent, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Deploys\nRoll back with make rollback.\n")
    await team.agent("proj/zeus").kb.ingest("agent", [str(notes)])
    async with connect(acting_server(team, agent)) as client:
        own = await call(client, "kb_search", query="how do I roll back a deploy", k=3)
        assert own["agent"] == "proj/zeus"
        assert own["hits"] and "make rollback" in own["hits"][0]["text"]
        theirs = await call(client, "kb_search", query="roll back", agent="proj/hera")
        assert (theirs["agent"], theirs["hits"]) == ("proj/hera", [])


async def test_a_send_with_reply_brings_the_teammates_answer_back(
    agent: Agent, team: Team, hera: Agent
) -> None:
    async with connect(acting_server(team, agent)) as client:
        sent = await call(client, "agent_send", agent="hera", text="ping", reply=True)
    assert sent["mailbox"] is False

    def answered() -> dict[str, object] | None:
        turns = [t for t in agent.parts.history.tail(50) if t.get("source") == "agent:hera"]
        return turns[0] if turns else None

    turn = await async_wait_for(answered, 20, "hera's answer in zeus's history")
    heading = f"[reply from teammate hera to your team.send {sent['id']}]\n"
    assert str(turn["content"]).startswith(heading)
    assert turn["trace_id"] == sent["trace_id"]
