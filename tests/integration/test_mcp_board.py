"""MCP ``task_fail`` and ``task_reopen`` (issue 26 §4) on a real ``ateam mcp`` process,
through the SDK's stdio client as Claude Code or Codex starts it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import Implementation, TextContent

from .conftest import subprocess_env

pytestmark = pytest.mark.integration


async def test_fail_and_reopen_over_stdio(redis_url: str, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ateam", "mcp", "--project", "proj", "--redis", redis_url],
        env=subprocess_env(),
        cwd=tmp_path,
    )

    async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await session.call_tool(tool, arguments)
        assert not result.is_error, result.content
        assert isinstance(result.structured_content, dict)
        return result.structured_content

    info = Implementation(name="codex", version="0.1")
    with (tmp_path / "mcp.stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, client_info=info) as session,
        ):
            await session.initialize()
            first = await ok(session, "task_add", title="port the parser")
            after = await ok(session, "task_add", title="ship it", depends_on=[first["id"]])
            await ok(session, "task_claim", task_id=first["id"], agent="proj/zeus")
            failed = await ok(
                session, "task_fail", task_id=first["id"], agent="proj/zeus", reason="no grammar"
            )
            assert (failed["status"], failed["reason"]) == ("failed", "no grammar")
            listed = {t["id"]: t for t in (await ok(session, "tasks_list"))["tasks"]}
            assert listed[after["id"]]["blocked_by"] == [{"id": first["id"], "failed": True}]

            reopened = await ok(session, "task_reopen", task_id=first["id"])
            assert (reopened["status"], reopened["last_error"]) == ("open", "no grammar")
            assert reopened["reason"] == "reopened by mcp:codex"
            again = await session.call_tool("task_reopen", {"task_id": first["id"]})
            [content] = again.content
            assert again.is_error and isinstance(content, TextContent)
            assert content.text.startswith("task.claimed: ") and "is open" in content.text
    assert "Traceback" not in (tmp_path / "mcp.stderr").read_text()
