"""The resources ``ateam mcp`` offers: the session snapshot, active tasks, newest decisions.

Each is a JSON document read fresh on every ``resources/read``. The fixed URIs mean the
server's project (``--project``); the templates name a project.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from ateam.client import bus_errors
from ateam.errors import AteamError
from ateam.mcp.bridge import TeamBridge

__all__ = ["DECISIONS_URI", "SESSION_URI", "TASKS_URI", "register_resources"]

SESSION_URI = "ateam://session"
TASKS_URI = "ateam://tasks"
DECISIONS_URI = "ateam://decisions"
JSON = "application/json"


async def _document(work: Awaitable[dict[str, Any]]) -> str:
    """The bridge's answer as JSON text; a failure as a resource error with its code."""
    try:
        with bus_errors():
            return json.dumps(await work, indent=2, sort_keys=True)
    except AteamError as exc:
        raise ResourceError(f"{exc.code}: {exc.message}") from None


def register_resources(app: MCPServer[Any], bridge: TeamBridge) -> None:
    """Add the snapshot, tasks and decisions resources (and per-project templates)."""

    @app.resource(SESSION_URI, name="session", mime_type=JSON)
    async def session() -> str:
        """Who is doing what: per project, the agents (state, current task, model, host),
        the open and claimed board tasks, and the newest attention items."""
        return await _document(bridge.snapshot())

    @app.resource(TASKS_URI, name="tasks", mime_type=JSON)
    async def tasks() -> str:
        """The open and claimed tasks of the project's board."""
        return await _document(bridge.active_tasks(None))

    @app.resource(DECISIONS_URI, name="decisions", mime_type=JSON)
    async def decisions() -> str:
        """The newest decisions posted to the project's context, newest first."""
        return await _document(bridge.decisions(None))

    @app.resource(TASKS_URI + "/{project}", name="project_tasks", mime_type=JSON)
    async def project_tasks(project: str) -> str:
        """The open and claimed tasks of another project's board."""
        return await _document(bridge.active_tasks(project))

    @app.resource(DECISIONS_URI + "/{project}", name="project_decisions", mime_type=JSON)
    async def project_decisions(project: str) -> str:
        """The newest decisions of another project."""
        return await _document(bridge.decisions(project))
