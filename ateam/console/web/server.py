"""``ateam console --web``: the panes console served over HTTP and a WebSocket.

textual-serve does the work: its page draws a terminal with xterm.js, and for every
WebSocket it starts a command whose screen it relays (here ``python -m
ateam.console.web``, one console per tab, see :mod:`.session`). This module puts
ateam's parts around it: the token gate (:mod:`.gate`) in front of every route, URLs
built from each request (so the page works behind a reverse proxy and on port 0),
sessions ended with the server, and errors as one line.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shlex
import signal
import socket
import sys
from dataclasses import dataclass, field
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.server import Server, to_int

from ateam._net import is_loopback, listen
from ateam.client import Target, Team, session_id
from ateam.console.web.gate import (
    WS_PATH,
    cookie_name,
    forwarded_scheme,
    new_token,
    token_gate,
)

__all__ = ["DEFAULT_PORT", "ConsoleServer", "WebOptions", "serve", "session_command"]

DEFAULT_PORT = 8765
TITLE = "ateam console"


@dataclass(frozen=True)
class WebOptions:
    """Where ``ateam console --web`` listens, the token it asks for, what tabs may do."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    """0 picks a free port (printed at start)."""
    token: str = field(default_factory=new_token, repr=False)
    """What a browser must bring once (``--token-file`` gives it; else a new one)."""
    read_only: bool = False
    """Every tab is a watch-only console (a shared screen)."""
    redis_url: str | None = None
    """``--redis`` as given: handed to the tabs' consoles through their environment."""


def session_command(*, read_only: bool) -> str:
    """The shell command textual-serve runs for each tab."""
    words = [sys.executable, "-m", "ateam.console.web", *(["--read-only"] if read_only else [])]
    return shlex.join(words)


class ConsoleServer(Server):
    """textual-serve's server behind ateam's token gate, with URLs built per request."""

    def __init__(self, options: WebOptions) -> None:
        super().__init__(session_command(read_only=options.read_only), title=TITLE)
        self.options = options
        self._sessions: set[asyncio.Task[Any]] = set()

    def make_app(self, port: int) -> web.Application:
        """The aiohttp app for a server listening on ``port``: every route behind the gate."""
        app = web.Application(middlewares=[token_gate(self.options.token, cookie_name(port))])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes(
            [
                web.get("/", self.index, name="index"),
                web.get(WS_PATH, self.websocket, name="websocket"),
                web.get("/download/{key}", self.handle_download, name="download"),
                web.static("/static", self.statics_path, name="static"),
            ]
        )
        app.on_shutdown.append(self._end_sessions)
        return app

    async def index(self, request: web.Request) -> web.StreamResponse:
        # The page's own address, as the browser sees it (behind a TLS proxy too), not the
        # address this server bound: the page must reach the WebSocket it names.
        scheme = forwarded_scheme(request)
        base = f"{scheme}://{request.host}"
        context = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": f"{'wss' if scheme == 'https' else 'ws'}://{request.host}{WS_PATH}",
            "config": {"static": {"url": f"{base}/static/"}},
            "application": {"name": TITLE + (" (read-only)" if self.options.read_only else "")},
        }
        response = aiohttp_jinja2.render_template("app_index.html", request, context)
        response.headers["Cache-Control"] = "no-store"
        return response

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        """One tab: textual-serve starts its console and relays it until either side ends."""
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        try:
            response: web.StreamResponse = await self.handle_websocket(request)
            return response
        finally:
            self._sessions.discard(task)

    async def _end_sessions(self, app: web.Application) -> None:
        # Cancelled, textual-serve closes the socket and asks the console to quit, and the
        # console releases what it owns; without this, shutdown would wait on open tabs.
        sessions = list(self._sessions)
        for task in sessions:
            task.cancel()
        await asyncio.gather(*sessions, return_exceptions=True)


def _shown_host(host: str) -> str:
    """The host to put in the printed URL: this machine's name for "every address"."""
    try:
        if ipaddress.ip_address(host).is_unspecified:
            return socket.gethostname()
    except ValueError:
        pass
    return f"[{host}]" if ":" in host else host


def _announce(options: WebOptions, port: int) -> None:
    host = _shown_host(options.host)
    mode = " (read-only)" if options.read_only else ""
    print(f"ateam console: serving the console{mode} on http://{host}:{port}/", flush=True)
    print(f"ateam console: open http://{host}:{port}/?token={options.token}", flush=True)
    if not is_loopback(options.host):
        # The token and everything typed cross the network in clear over plain HTTP:
        # beyond this host, TLS belongs in a reverse proxy (docs/console.md shows one).
        print(
            f"ateam console: warning: listening on {options.host}, beyond this host; the "
            "token and the console cross the network in clear unless a TLS reverse proxy "
            "fronts it (docs/console.md)",
            file=sys.stderr,
            flush=True,
        )


async def _check_bus(target: Target) -> None:
    """Fail at start, in one line, when the bus cannot be used, not in every tab later."""
    team = await Team.connect(target, session=session_id("console"))
    await team.aclose()


async def serve(options: WebOptions, target: Target) -> None:
    """Serve the console on ``options.host:port`` until SIGINT or SIGTERM.

    Raises:
        UsageError: the address cannot be listened on.
        BusError: the bus cannot be used.
    """
    await _check_bus(target)
    if options.redis_url is not None:
        # Each tab's console is a child of this process and inherits its environment.
        os.environ["ATEAM_REDIS_URL"] = options.redis_url
    sock = listen(options.host, options.port)
    port = sock.getsockname()[1]
    server = ConsoleServer(options)
    runner = web.AppRunner(
        server.make_app(port), handle_signals=False, access_log=None, shutdown_timeout=5.0
    )
    try:
        await runner.setup()
        await web.SockSite(runner, sock).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        # Announced once a signal stops it gracefully: whoever reads the URL may stop it.
        _announce(options, port)
        await stop.wait()
    finally:
        await runner.cleanup()
        sock.close()
