"""``ateam mcp``: the team as a Model Context Protocol server (issue 12, SPEC §9).

External MCP clients (Claude Code, Codex CLI, Cursor, the MCP Inspector…) list the
agents, give them work and read their events, read and post team context, and use the
task board — all through :mod:`ateam.client`, never the bus. The layout::

    bridge.py     the work: one method per tool or resource, on a Team session
    acting.py     --as NAME: the tools that act, acting as agent P/NAME (its token)
    tools.py      the tools' names, arguments and descriptions (SPEC §9 field names)
    resources.py  the session snapshot, the active tasks, the newest decisions
    server.py     the SDK's MCPServer wired to the bridge; errors carry ateam's codes
    http.py       streamable HTTP on a local port behind a bearer token

Needs the ``mcp`` extra (``pip install 'ateam[mcp]'``). See ``docs/mcp.md``.
"""

from __future__ import annotations

from ateam.mcp.acting import AgentBridge
from ateam.mcp.bridge import TeamBridge, runtime_name
from ateam.mcp.http import DEFAULT_PORT, HttpOptions
from ateam.mcp.resources import DECISIONS_URI, SESSION_URI, TASKS_URI
from ateam.mcp.server import AteamServer, build_server, serve
from ateam.mcp.tools import TOOL_NAMES

__all__ = [
    "DECISIONS_URI",
    "DEFAULT_PORT",
    "SESSION_URI",
    "TASKS_URI",
    "TOOL_NAMES",
    "AgentBridge",
    "AteamServer",
    "HttpOptions",
    "TeamBridge",
    "build_server",
    "runtime_name",
    "serve",
]
