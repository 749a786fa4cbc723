"""The panes console in a browser (``ateam console --web``), served with textual-serve.

The layout::

    server.py     the HTTP server: textual-serve's page and WebSocket behind the gate
    gate.py       the token: once in the URL, then an HttpOnly cookie; 401 without it
    session.py    one tab's console process; the watch-only mode of ``--read-only``
    __main__.py   ``python -m ateam.console.web``: the command each tab runs

Needs the ``web`` extra (``pip install 'ateam[web]'``). See ``docs/console.md``.
"""

from __future__ import annotations

from ateam.console.web.gate import new_token
from ateam.console.web.server import DEFAULT_PORT, WebOptions, serve
from ateam.console.web.session import WatchOnly, WebController, run_session

__all__ = [
    "DEFAULT_PORT",
    "WatchOnly",
    "WebController",
    "WebOptions",
    "new_token",
    "run_session",
    "serve",
]
