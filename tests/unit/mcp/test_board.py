"""The task board over MCP: add as the runtime, claim as an agent id, finish, race."""

from __future__ import annotations

import asyncio

from ateam.agent.runtime.process import Agent
from ateam.client import Team
from ateam.errors import Code
from ateam.mcp import TASKS_URI, AteamServer
from tests.unit.mcp._client import RUNTIME, call, connect, fails, read


async def test_add_claim_done_and_the_tasks_resource(
    agent: Agent, team: Team, server: AteamServer
) -> None:
    async with connect(server) as client:
        first = await call(client, "task_add", title="write the parser", priority=2)
        assert first["status"] == "open" and first["created_by"] == f"mcp:{RUNTIME}"
        second = await call(client, "task_add", title="test it", depends_on=[first["id"]])
        listed = await call(client, "tasks_list")
        assert [t["id"] for t in listed["tasks"]] == [first["id"], second["id"]]

        error = await fails(client, "task_claim", task_id=second["id"], agent="proj/zeus")
        assert error.startswith(f"{Code.TASK_BLOCKED}: "), error
        claimed = await call(client, "task_claim", task_id=first["id"], agent="proj/zeus")
        assert (claimed["status"], claimed["assignee"]) == ("claimed", "proj/zeus")
        error = await fails(client, "task_claim", task_id=first["id"], agent="proj/hera")
        assert error.startswith(f"{Code.TASK_CLAIMED}: "), error
        error = await fails(client, "task_done", task_id=first["id"], agent="proj/hera")
        assert error.startswith(f"{Code.TASK_CLAIMED}: "), error

        active = await read(client, TASKS_URI)
        assert active["project"] == "proj"
        assert {t["id"]: t["status"] for t in active["tasks"]} == {
            first["id"]: "claimed",
            second["id"]: "open",
        }
        done = await call(
            client, "task_done", task_id=first["id"], agent="proj/zeus", result="parsed"
        )
        assert (done["status"], done["result"]) == ("done", "parsed")
        assert [t["id"] for t in (await read(client, TASKS_URI))["tasks"]] == [second["id"]]
        only_done = await call(client, "tasks_list", status="done")
        assert [t["id"] for t in only_done["tasks"]] == [first["id"]]
        # The board is the same one the verbs and agents use.
        assert (await team.tasks.get("proj", first["id"])).status == "done"  # type: ignore[union-attr]


async def test_ten_concurrent_claims_one_wins(agent: Agent, server: AteamServer) -> None:
    async with connect(server) as client:
        task = await call(client, "task_add", title="only one of you")
        results = await asyncio.gather(
            *(
                client.call_tool("task_claim", {"task_id": task["id"], "agent": f"proj/a{n}"})
                for n in range(10)
            )
        )
    winners = [r for r in results if not r.is_error]
    assert len(winners) == 1
    losers = [r.content[0].text for r in results if r.is_error]  # type: ignore[union-attr]
    assert len(losers) == 9
    assert all(text.startswith(f"{Code.TASK_CLAIMED}: ") for text in losers), losers


async def test_bad_task_input_changes_nothing(team: Team, server: AteamServer) -> None:
    async with connect(server) as client:
        error = await fails(client, "task_add", title="needs a ghost", depends_on=["t-00000000"])
        assert error.startswith(f"{Code.BAD_REQUEST}: "), error
        assert "t-00000000" in error
        error = await fails(client, "task_add", title="   ")
        assert error.startswith(f"{Code.BAD_REQUEST}: "), error
        error = await fails(client, "task_add", title="x", priority="high")
        assert error.startswith(f"{Code.BAD_REQUEST}: invalid arguments for task_add: "), error
        assert "priority" in error
        error = await fails(client, "tasks_list", status="sleeping")
        assert error.startswith(f"{Code.BAD_REQUEST}: "), error
        error = await fails(client, "task_claim", task_id="t-0123456789", agent="proj/zeus")
        assert error.startswith(f"{Code.TASK_NOT_FOUND}: "), error
        error = await fails(client, "task_claim", task_id="t-0123456789", agent="zeus")
        assert error.startswith(f"{Code.BAD_REQUEST}: agent: "), error
    assert await team.tasks.ls("proj") == []


async def test_a_project_argument_picks_another_board(team: Team, server: AteamServer) -> None:
    async with connect(server) as client:
        task = await call(client, "task_add", title="elsewhere", project="other")
        assert task["project"] == "other"
        assert (await call(client, "tasks_list"))["tasks"] == []
        listed = await call(client, "tasks_list", project="other")
        assert [t["id"] for t in listed["tasks"]] == [task["id"]]
        claimed = await call(
            client, "task_claim", task_id=task["id"], agent="other/zeus", project="other"
        )
        assert claimed["assignee"] == "other/zeus"
        error = await fails(client, "tasks_list", project="no such project!")
        assert error.startswith(f"{Code.BAD_REQUEST}: project: "), error
        resource = await read(client, f"{TASKS_URI}/other")
        assert [t["id"] for t in resource["tasks"]] == [task["id"]]
