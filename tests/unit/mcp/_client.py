"""Calls through the SDK's client, as the tests make them: answers, errors, documents."""

from __future__ import annotations

import json
from typing import Any

import mcp
from mcp.types import Implementation, TextContent, TextResourceContents

from ateam.mcp import AteamServer

RUNTIME = "tester"
"""The name the test client gives in its clientInfo."""


def connect(server: AteamServer, *, name: str = RUNTIME) -> mcp.Client:
    """``async with connect(server) as client``: the SDK's client, in process.

    Over the SDK's in-memory JSON-RPC streams, with the ``initialize`` handshake every
    MCP client makes. Entered inside the test, not in a fixture: the SDK's task group
    must be left by the task that entered it.
    """
    info = Implementation(name=name, version="1.0")
    return mcp.Client(server, client_info=info, mode="legacy", cache=None)


def _text(result: Any) -> str:
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


async def call(client: mcp.Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """The tool's answer; fails the test if the call failed."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, _text(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def fails(client: mcp.Client, tool: str, **arguments: Any) -> str:
    """The error text of a call that must fail (an MCP error result, not an exception)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return _text(result)


async def read(client: mcp.Client, uri: str) -> Any:
    """A resource's JSON document."""
    result = await client.read_resource(uri)
    [content] = result.contents
    assert isinstance(content, TextResourceContents)
    assert content.mime_type == "application/json"
    return json.loads(content.text)
