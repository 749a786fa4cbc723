"""``task_fail`` and ``task_reopen`` over MCP (issue 26 §4), through the SDK's client: as a
runtime naming the holder, and as the agent itself (``--as``); ``tasks_list`` says what
an open task is blocked by.
"""

from __future__ import annotations

from ateam.agent.runtime.process import Agent
from ateam.client import Team
from ateam.errors import Code
from ateam.mcp import TASKS_URI, AteamServer
from tests.unit.mcp._client import RUNTIME, call, connect, fails, read
from tests.unit.mcp.test_acting import acting_server


async def test_fail_then_reopen_or_retry_as_a_runtime(
    agent: Agent, team: Team, server: AteamServer
) -> None:
    async with connect(server) as client:
        first = await call(client, "task_add", title="write the parser")
        later = await call(client, "task_add", title="test it", depends_on=[first["id"]])
        await call(client, "task_claim", task_id=first["id"], agent="proj/hera")

        error = await fails(
            client, "task_fail", task_id=first["id"], agent="proj/zeus", reason="not mine"
        )
        assert error.startswith(f"{Code.TASK_CLAIMED}: "), error
        failed = await call(
            client, "task_fail", task_id=first["id"], agent="proj/hera", reason="grammar unclear"
        )
        assert (failed["status"], failed["reason"]) == ("failed", "grammar unclear")
        listed = {t["id"]: t for t in (await call(client, "tasks_list"))["tasks"]}
        assert listed[later["id"]]["blocked_by"] == [{"id": first["id"], "failed": True}]
        assert listed[first["id"]]["blocked_by"] == []
        only_open = (await call(client, "tasks_list", status="open"))["tasks"]
        assert [t["id"] for t in only_open] == [later["id"]]  # judged from the whole board
        assert only_open[0]["blocked_by"] == [{"id": first["id"], "failed": True}]
        active = await read(client, TASKS_URI)
        assert active["tasks"][0]["blocked_by"] == [{"id": first["id"], "failed": True}]

        reopened = await call(client, "task_reopen", task_id=first["id"])
        assert (reopened["status"], reopened["assignee"]) == ("open", "")
        assert reopened["last_error"] == "grammar unclear"
        assert reopened["reason"] == f"reopened by mcp:{RUNTIME}"
        error = await fails(client, "task_reopen", task_id=first["id"])
        assert error.startswith(f"{Code.TASK_CLAIMED}: ") and "is open" in error, error

        # zeus (running) fails it; a retry offers it to zeus, not to hera.
        await call(client, "task_claim", task_id=first["id"], agent="proj/zeus")
        await call(client, "task_fail", task_id=first["id"], agent="proj/zeus", reason="again")
        retried = await call(client, "task_reopen", task_id=first["id"], retry=True)
        assert retried["offered_to"] == "proj/zeus" and retried["last_error"] == "again"
        error = await fails(client, "task_claim", task_id=first["id"], agent="proj/hera")
        assert error.startswith(f"{Code.TASK_CLAIMED}: ") and "offered to proj/zeus" in error
        claimed = await call(client, "task_claim", task_id=first["id"], agent="proj/zeus")
        assert claimed["assignee"] == "proj/zeus"
    assert (await team.tasks.get("proj", first["id"])).reopened == 2  # type: ignore[union-attr]


async def test_fail_and_reopen_as_the_agent(agent: Agent, team: Team) -> None:
    async with connect(acting_server(team, agent)) as client:
        task = await call(client, "task_add", title="port the lexer")
        await call(client, "task_claim", task_id=task["id"])
        error = await fails(client, "task_fail", task_id=task["id"], reason="x", agent="proj/hera")
        assert error.startswith(f"{Code.IDENTITY_REFUSED}: "), error
        failed = await call(client, "task_fail", task_id=task["id"], reason="tests red")
        assert (failed["status"], failed["assignee"]) == ("failed", "proj/zeus")
        retried = await call(client, "task_reopen", task_id=task["id"], retry=True)
        assert retried["reason"] == "retried by proj/zeus"
        assert retried["offered_to"] == "proj/zeus"  # it runs: it gets it first
