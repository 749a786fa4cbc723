"""Team context and the resources over MCP: posts carry the runtime, reads filter."""

from __future__ import annotations

from ateam.agent.runtime.process import Agent
from ateam.client import Team
from ateam.errors import Code
from ateam.mcp import DECISIONS_URI, SESSION_URI, AteamServer
from tests.unit.mcp._client import RUNTIME, call, connect, fails, read


async def test_post_read_search(team: Team, server: AteamServer) -> None:
    async with connect(server) as client:
        posted = await call(
            client,
            "context_post",
            type="discovery",
            title="the cache is cold after deploys",
            content="warm it with make warm",
            urgency="attention",
            tags=["Deploy", "cache"],
        )
        assert posted["source_runtime"] == RUNTIME and posted["source_agent"] == ""
        assert (posted["project"], posted["scope"], posted["tags"]) == (
            "proj",
            "project",
            ["deploy", "cache"],
        )
        other = await call(client, "context_post", type="status", title="lunch", scope="global")
        # Stored for every front end: the console and the agents read the same items.
        [stored] = [i for i in await team.context.ls("proj") if i.id == posted["id"]]
        assert stored.source_runtime == RUNTIME

        everything = await call(client, "context_read")
        assert [i["id"] for i in everything["items"]] == [other["id"], posted["id"]]
        urgent = await call(client, "context_read", min_urgency="attention")
        assert [i["id"] for i in urgent["items"]] == [posted["id"]]
        tagged = await call(client, "context_read", tags=["deploy"])
        assert [i["id"] for i in tagged["items"]] == [posted["id"]]
        by_type = await call(client, "context_read", type="status", scope="global")
        assert [i["id"] for i in by_type["items"]] == [other["id"]]
        assert len((await call(client, "context_read", limit=1))["items"]) == 1
        found = await call(client, "context_search", query="make warm")
        assert [i["id"] for i in found["items"]] == [posted["id"]]
        assert (await call(client, "context_search", query="nothing like it"))["items"] == []


async def test_decisions_resource_lists_decisions_only(server: AteamServer) -> None:
    async with connect(server) as client:
        await call(client, "context_post", type="discovery", title="found a bug")
        older = await call(client, "context_post", type="decision", title="use postgres")
        newer = await call(client, "context_post", type="decision", title="ship on friday")
        document = await read(client, DECISIONS_URI)
        assert document["project"] == "proj"
        assert [d["id"] for d in document["decisions"]] == [newer["id"], older["id"]]
        assert (await read(client, f"{DECISIONS_URI}/other"))["decisions"] == []


async def test_session_resource_is_the_snapshot(agent: Agent, server: AteamServer) -> None:
    async with connect(server) as client:
        task = await call(client, "task_add", title="on the board")
        alert = await call(
            client, "context_post", type="alert", title="disk full", urgency="blocking"
        )
        snapshot = await read(client, SESSION_URI)
        proj = snapshot["projects"]["proj"]
        assert [a["id"] for a in proj["agents"]] == ["proj/zeus"]
        assert [t["id"] for t in proj["tasks"]] == [task["id"]]
        assert [i["id"] for i in proj["attention"]] == [alert["id"]]
        resources = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {SESSION_URI, "ateam://tasks", DECISIONS_URI} <= resources


async def test_bad_context_input_changes_nothing(team: Team, server: AteamServer) -> None:
    async with connect(server) as client:
        cases = [
            {"type": "rumour", "title": "x"},  # not a type the schema knows
            {"type": "status"},  # no title
            {"type": "status", "title": "x", "urgency": "now"},
            {"type": "status", "title": "x", "tags": ["no spaces please"]},
            {"type": "status", "title": "x", "content": "y" * 17_000},  # over 16 KiB
            {"type": "status", "title": "t" * 201},
            {"type": "status", "title": "x", "project": "../etc"},
        ]
        for arguments in cases:
            error = await fails(client, "context_post", **arguments)
            assert error.startswith(f"{Code.BAD_REQUEST}: "), (arguments, error)
            assert "\n" not in error and "Traceback" not in error
        for arguments in [{"limit": 0}, {"limit": 101}, {"min_urgency": "loud"}]:
            error = await fails(client, "context_read", **arguments)
            assert error.startswith(f"{Code.BAD_REQUEST}: "), (arguments, error)
    assert await team.context.ls("proj") == []
