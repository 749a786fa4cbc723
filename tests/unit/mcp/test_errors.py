"""Errors over MCP carry ateam's stable codes; the runtime's name; no default project."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp.types import Implementation

from ateam.agent.runtime.process import Agent
from ateam.client import Target, Team
from ateam.errors import Code
from ateam.mcp import AteamServer, TeamBridge, build_server, runtime_name
from ateam.redact import Redactor
from tests.conftest import RedisProcess
from tests.unit.mcp._client import call, connect, fails


async def test_an_unknown_tool_is_no_such_method(server: AteamServer) -> None:
    async with connect(server) as client:
        error = await fails(client, "agents_delete_all")
    assert error.startswith(f"{Code.NO_SUCH_METHOD}: no tool 'agents_delete_all'"), error
    assert "agents_list" in error


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("agent_send", {"agent": "proj/zeus"}, "text"),  # missing
        ("agent_send", {"agent": ["proj/zeus"], "text": "hi"}, "agent"),  # wrong type
        ("agent_tail", {"agent": "proj/zeus", "limit": "lots"}, "limit"),
        ("task_claim", {"task_id": 7, "agent": "proj/zeus"}, "task_id"),
        ("context_post", {"type": "status", "title": "x", "tags": "one"}, "tags"),
    ],
)
async def test_malformed_arguments_are_bad_requests_naming_the_field(
    agent: Agent, server: AteamServer, tool: str, arguments: dict[str, Any], field: str
) -> None:
    async with connect(server) as client:
        error = await fails(client, tool, **arguments)
    assert error.startswith(f"{Code.BAD_REQUEST}: invalid arguments for {tool}: {field}"), error
    assert "\n" not in error and "pydantic" not in error
    assert agent.parts.queue.pending() == [] and agent.parts.queue.current is None


class CrashingBridge(TeamBridge):
    """A bridge with a bug in it: what a crash looks like to a client."""

    async def agents_list(self, project: str | None) -> dict[str, Any]:
        raise RuntimeError("secret internals")


async def test_a_crash_is_internal_without_its_details(team: Team) -> None:
    async with connect(build_server(CrashingBridge(team, "proj"))) as client:
        error = await fails(client, "agents_list")
    assert error.startswith(f"{Code.INTERNAL}: agents_list failed"), error
    assert "secret internals" not in error and "Traceback" not in error


async def test_redis_away_is_redis_unavailable(own_redis: RedisProcess) -> None:
    target = Target(own_redis.url, "test", namespace="mcp-down:")
    async with await Team.connect(target, redactor=Redactor()) as team:
        server = build_server(TeamBridge(team, "proj"))
        async with connect(server) as client:
            await call(client, "tasks_list")
            own_redis.stop()
            error = await fails(client, "tasks_list")
            assert error.startswith(f"{Code.REDIS_UNAVAILABLE}: "), error


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_runtime_is_the_clients_name(team: Team, server: AteamServer, mode: str) -> None:
    info = Implementation(name="Claude Code (beta)", version="2.0")
    async with mcp.Client(server, client_info=info, mode=mode, cache=None) as client:
        item = await call(client, "context_post", type="status", title="hello")
        task = await call(client, "task_add", title="from outside")
    assert item["source_runtime"] == "Claude-Code-beta"
    assert task["created_by"] == "mcp:Claude-Code-beta"


def test_runtime_names_are_safe() -> None:
    assert runtime_name(None) == "mcp"
    assert runtime_name("  ") == "mcp"
    assert runtime_name("cursor") == "cursor"
    assert runtime_name("a/b:c d") == "a-b-c-d"
    assert len(runtime_name("x" * 500)) == 60


async def test_without_a_default_project_calls_name_one(agent: Agent, team: Team) -> None:
    async with connect(build_server(TeamBridge(team, None))) as client:
        error = await fails(client, "tasks_list")
        assert error.startswith(f"{Code.BAD_REQUEST}: project: "), error
        assert [a["id"] for a in (await call(client, "agents_list"))["agents"]] == ["proj/zeus"]
        task = await call(client, "task_add", title="here", project="proj")
        # A claim's project defaults to the claiming agent's.
        claimed = await call(client, "task_claim", task_id=task["id"], agent="proj/zeus")
        assert claimed["status"] == "claimed"


async def test_kb_search_reads_an_agents_knowledge_base(
    agent: Agent, team: Team, server: AteamServer, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Deploys\nRoll back with make rollback.\n")
    await team.agent("proj/zeus").kb.ingest("agent", [str(notes)])
    async with connect(server) as client:
        found = await call(
            client, "kb_search", agent="proj/zeus", query="how do I roll back a deploy", k=3
        )
        assert found["hits"] and "make rollback" in found["hits"][0]["text"]
        error = await fails(client, "kb_search", agent="proj/zeus", query="x", scope="team")
        assert error.startswith(f"{Code.BAD_REQUEST}: "), error
