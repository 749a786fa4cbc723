"""``ateam mcp --http``: streamable HTTP on a local port, behind a bearer token.

Anyone who can reach the port could steer the team, so every request must carry
``Authorization: Bearer TOKEN``; one without it gets ``401`` before the MCP layer sees
it. The token is random per start (printed on stderr) unless read from a file that the
user keeps (``--token-file``), so a client's configuration survives restarts.
"""

from __future__ import annotations

import hmac
import json
import secrets
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ateam._net import is_loopback, listen

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["DEFAULT_PORT", "MCP_PATH", "BearerGate", "HttpOptions", "serve_http"]

DEFAULT_PORT = 8765
MCP_PATH = "/mcp"


@dataclass(frozen=True)
class HttpOptions:
    """Where ``ateam mcp --http`` listens and the token it asks for."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    """0 picks a free port (printed at start)."""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    token_from: str | None = None
    """The token file, when the token was read from one (it is then not printed)."""


class BearerGate:
    """ASGI middleware: HTTP requests without the right bearer token get 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self._app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": "unauthorized",
                "error_description": "ateam mcp needs Authorization: Bearer TOKEN "
                "(printed when it started, or kept in its --token-file)",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="ateam"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _allowed(self, scope: Scope) -> bool:
        given = [value for name, value in scope["headers"] if name == b"authorization"]
        # Constant-time: the answer's timing says nothing about how close a guess was.
        return len(given) == 1 and hmac.compare_digest(given[0], self._expected)


def _announce(options: HttpOptions, port: int) -> None:
    host = f"[{options.host}]" if ":" in options.host else options.host
    print(f"ateam mcp: serving http://{host}:{port}{MCP_PATH}", file=sys.stderr)
    if not is_loopback(options.host):
        # The token travels in clear over plain HTTP: beyond this host, TLS belongs in
        # a reverse proxy in front (docs/mcp.md shows one).
        print(
            f"ateam mcp: warning: listening on {options.host}, beyond this host; the "
            "token crosses the network in clear unless a TLS reverse proxy fronts it",
            file=sys.stderr,
        )
    if options.token_from is None:
        print(f"ateam mcp: token: {options.token}", file=sys.stderr)
    else:
        print(f"ateam mcp: token from {options.token_from}", file=sys.stderr)
    sys.stderr.flush()


async def serve_http(app: MCPServer[Any], options: HttpOptions) -> None:
    """Serve ``app`` on ``options.host:port`` at ``/mcp`` until a signal stops it."""
    import uvicorn

    sock = listen(options.host, options.port)
    asgi = BearerGate(
        app.streamable_http_app(streamable_http_path=MCP_PATH, host=options.host),
        options.token,
    )
    config = uvicorn.Config(asgi, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    _announce(options, sock.getsockname()[1])
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
