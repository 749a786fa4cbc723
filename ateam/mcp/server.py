"""The MCP server itself: the SDK's ``MCPServer`` with ateam's tools, resources and errors.

:func:`build_server` is the composition root: it takes a :class:`TeamBridge` (a team
session and a default project) and wires the tools and resources to it; with an
:class:`~ateam.mcp.acting.AgentBridge` (``--as``) the tools that act do so as that agent.
:func:`serve` runs it on stdio, or on streamable HTTP behind a bearer token
(:mod:`ateam.mcp.http`).

Errors: every failed tool call is an MCP error result whose text starts with ateam's
stable code (``task.claimed: …``, ``ownership.denied: …``, ``bad_request: …``), never a
traceback. An unknown tool is ``no_such_method``, arguments that do not fit a tool's
schema are ``bad_request`` naming the fields, and a crash is ``internal`` (its
traceback goes to the server's log on stderr, not to the client).
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

from ateam import __version__
from ateam.client import Team, TeamMember
from ateam.errors import AteamError, Code
from ateam.mcp.acting import AgentBridge
from ateam.mcp.bridge import TeamBridge
from ateam.mcp.http import HttpOptions, serve_http
from ateam.mcp.resources import register_resources
from ateam.mcp.tools import TOOL_NAMES, register_tools

__all__ = ["AteamServer", "build_server", "serve", "tool_error_text"]

log = logging.getLogger("ateam.mcp")

INSTRUCTIONS = """\
ateam runs a team of long-lived AI coding agents on one Redis bus. With these tools you
see the agents (agents_list, agent_status), give one work (agent_send) and read what it
does (agent_tail); read and post team context items (context_read, context_post,
context_search); and use the project's task board (tasks_list, task_add, task_claim,
task_done, task_fail, task_reopen). Agent ids are PROJECT/NAME. Errors start with a
stable code such as ownership.denied, agent.not_found, task.claimed or bad_request.
"""

ACTING = """\
You are agent {me} of project {project}, and these tools act as {me}: the tasks you
claim, add and finish, the context items you post and the work you give teammates with
agent_send are {me}'s own, as if its built-in tools had done them.
"""

_ERRORS_SHOWN = 5
"""Schema violations named in one ``bad_request`` line; more are counted."""


def _fields(error: ValidationError) -> str:
    """Which arguments were wrong and why, in one line (never the values: they may be big)."""
    parts = []
    for item in error.errors()[:_ERRORS_SHOWN]:
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        parts.append(f"{where}: {item['msg']}")
    more = error.error_count() - _ERRORS_SHOWN
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def tool_error_text(name: str, exc: ToolError) -> str:
    """The one line a client sees for a failed call of tool ``name``, code first.

    The SDK wraps what a tool raised (its ``__cause__``): an :class:`AteamError` keeps
    its code and message, a schema violation is ``bad_request``, anything else is a
    crash (``internal``).
    """
    cause = exc.__cause__
    if isinstance(cause, AteamError):
        return f"{cause.code}: {cause.message}"
    if isinstance(cause, ValidationError):
        return f"{Code.BAD_REQUEST}: invalid arguments for {name}: {_fields(cause)}"
    return f"{Code.INTERNAL}: {name} failed unexpectedly; the `ateam mcp` log has the details"


class AteamServer(MCPServer[Any]):
    """``MCPServer`` whose tool errors start with ateam's stable codes."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if name not in TOOL_NAMES:
            raise ToolError(
                f"{Code.NO_SUCH_METHOD}: no tool {name!r}; the tools are {', '.join(TOOL_NAMES)}"
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            text = tool_error_text(name, exc)
            if text.startswith(Code.INTERNAL):
                log.error("tool %s crashed", name, exc_info=exc.__cause__)
            raise ToolError(text) from None


def build_server(bridge: TeamBridge, acting: AgentBridge | None = None) -> AteamServer:
    """The MCP server with every tool and resource wired to ``bridge``; the tools that
    act do so as ``acting``'s agent when given (``--as``)."""
    instructions = INSTRUCTIONS
    if acting is not None:
        instructions = ACTING.format(me=acting.me, project=acting.project) + instructions
    app = AteamServer(
        "ateam",
        title="ateam" if acting is None else f"ateam (as {acting.me})",
        version=__version__,
        instructions=instructions,
        log_level="WARNING",
    )
    register_tools(app, bridge, acting)
    register_resources(app, bridge)
    return app


async def serve(
    team: Team,
    project: str | None,
    *,
    http: HttpOptions | None = None,
    acting: TeamMember | None = None,
) -> int:
    """Serve the team on stdio (default) or streamable HTTP until the client or a signal
    ends it; as the agent ``acting`` stands for, when given (its project is the default)."""
    bridge = TeamBridge(team, acting.project if acting is not None else project)
    agent = None if acting is None else AgentBridge(team, acting, bridge)
    app = build_server(bridge, agent)
    if http is None:
        await app.run_stdio_async()
    else:
        await serve_http(app, http)
    return 0
