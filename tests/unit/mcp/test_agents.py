"""The agent tools over MCP: list, status, send (by the agent's ownership rules), tail."""

from __future__ import annotations

import pytest

from ateam.agent.runtime.process import Agent
from ateam.client import Event, EventType, Target, Team
from ateam.errors import Code
from ateam.mcp import TOOL_NAMES, AteamServer
from ateam.redact import Redactor
from tests._wait import async_wait_for
from tests.unit.mcp._client import RUNTIME, call, connect, fails


async def test_the_tools_are_listed_with_spec_argument_names(server: AteamServer) -> None:
    async with connect(server) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == sorted(TOOL_NAMES)
        properties = {name: set(tool.input_schema["properties"]) for name, tool in tools.items()}
        assert {"type", "title", "content", "urgency", "scope", "tags"} <= properties[
            "context_post"
        ]
        assert {"agent", "text"} == properties["agent_send"]
        assert {"task_id", "agent"} <= properties["task_claim"]
        assert tools["agents_list"].annotations is not None
        assert tools["agents_list"].annotations.read_only_hint
        # Descriptions are for the client's model: whole lines, no code indentation.
        assert all(t.description and "\n " not in t.description for t in tools.values())


async def test_agents_list_and_status(agent: Agent, server: AteamServer) -> None:
    async with connect(server) as client:
        listed = await call(client, "agents_list")
        assert [row["id"] for row in listed["agents"]] == ["proj/zeus"]
        assert listed["agents"][0]["connected"] is True
        assert (await call(client, "agents_list", project="other"))["agents"] == []
        assert [row["id"] for row in (await call(client, "agents_list", project="*"))["agents"]]
        status = await call(client, "agent_status", agent="proj/zeus")
        assert status["id"] == "proj/zeus" and status["state"] in {"idle", "busy"}
        assert status["model"] and status["connected"] is True


async def test_an_unknown_agent_is_agent_not_found(agent: Agent, server: AteamServer) -> None:
    async with connect(server) as client:
        for tool, extra in [
            ("agent_status", {}),
            ("agent_tail", {}),
            ("agent_send", {"text": "hello"}),
            ("kb_search", {"query": "anything"}),
        ]:
            error = await fails(client, tool, agent="proj/nobody", **extra)
            assert error.startswith(f"{Code.AGENT_NOT_FOUND}: "), (tool, error)
        error = await fails(client, "agent_status", agent="zeus")
        assert error.startswith(f"{Code.BAD_REQUEST}: agent: "), error


async def _task_end(team: Team, task_id: str) -> None:
    """Wait, through the client's tail, for the end of the agent's task ``task_id``."""
    async for item in team.agent("proj/zeus").tail(1):
        if isinstance(item, Event) and item.type == EventType.TASK_END and item.task_id == task_id:
            return
    raise AssertionError("the tail ended")


async def test_send_then_tail_shows_the_answer_and_the_runtime(
    agent: Agent, team: Team, server: AteamServer
) -> None:
    async with connect(server) as client:
        sent = await call(client, "agent_send", agent="proj/zeus", text="hello from outside")
        assert sent["created"] and sent["id"].startswith("q-")

        async def ended() -> dict[str, object] | None:
            page = await call(client, "agent_tail", agent="proj/zeus", from_offset=1, limit=500)
            ends = [e for e in page["events"] if e["type"] == "task.end"]
            return page if ends and ends[-1]["data"]["task_id"] == sent["id"] else None

        page = await async_wait_for(ended, message="the relayed task to end")
        events = page["events"]
        start = next(e for e in events if e["type"] == "task.start")
        assert start["data"]["source"] == f"mcp:{RUNTIME}"
        text = "".join(e["data"]["text"] for e in events if e["type"] == "token")
        assert "hello from outside" in text and text.startswith("echo: ")
        assert page["next_offset"] == events[-1]["offset"] + 1
        assert [e["offset"] for e in events] == list(range(1, len(events) + 1))


async def test_tail_pages_by_offset_and_limit(
    agent: Agent, team: Team, server: AteamServer
) -> None:
    async with connect(server) as client:
        sent = await team.agent("proj/zeus").send("one two three")
        await _task_end(team, sent.id)
        whole = await call(client, "agent_tail", agent="proj/zeus", from_offset=1, limit=500)
        total = len(whole["events"])
        assert total >= 3
        first = await call(client, "agent_tail", agent="proj/zeus", from_offset=1, limit=2)
        assert [e["offset"] for e in first["events"]] == [1, 2] and first["next_offset"] == 3
        rest = await call(client, "agent_tail", agent="proj/zeus", from_offset=3, limit=500)
        assert [e["offset"] for e in rest["events"]] == list(range(3, total + 1))
        newest = await call(client, "agent_tail", agent="proj/zeus", limit=1)
        assert [e["offset"] for e in newest["events"]] == [total]
        beyond = await call(client, "agent_tail", agent="proj/zeus", from_offset=total + 1)
        assert beyond["events"] == [] and beyond["next_offset"] == total + 1
        for bad in ({"limit": 0}, {"limit": 501}, {"from_offset": 0}):
            error = await fails(client, "agent_tail", agent="proj/zeus", **bad)
            assert error.startswith(f"{Code.BAD_REQUEST}: "), error


async def test_an_owned_agent_refuses_external_input_until_its_owner_allows_it(
    agent: Agent, target: Target, server: AteamServer
) -> None:
    async with connect(server) as client:
        async with await Team.connect(target, redactor=Redactor()) as console:
            async with console.agent("proj/zeus").attach() as held:
                error = await fails(client, "agent_send", agent="proj/zeus", text="let me in")
                assert error.startswith(f"{Code.OWNERSHIP_DENIED}: "), error
                assert agent.parts.queue.pending() == [] and agent.parts.queue.current is None
                assert await held.handle.allow_external(True)
                sent = await call(client, "agent_send", agent="proj/zeus", text="let me in")
                assert sent["created"]


async def test_oversized_text_is_refused_and_nothing_is_queued(
    agent: Agent, server: AteamServer
) -> None:
    async with connect(server) as client:
        error = await fails(client, "agent_send", agent="proj/zeus", text="x" * 300_000)
        assert error.startswith(f"{Code.PAYLOAD_TOO_LARGE}: "), error
        assert agent.parts.queue.pending() == [] and agent.parts.queue.current is None


@pytest.mark.parametrize("name", ["", "   "])
async def test_blank_text_is_a_bad_request(agent: Agent, server: AteamServer, name: str) -> None:
    async with connect(server) as client:
        error = await fails(client, "agent_send", agent="proj/zeus", text=name)
        assert error.startswith(f"{Code.BAD_REQUEST}: "), error
