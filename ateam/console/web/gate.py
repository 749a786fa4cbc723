"""The browser console's door: the token once in the URL, then an HttpOnly cookie.

Whoever reaches the port could steer the team, so nothing is served (no page, no
script, no WebSocket, and so no console process) to a request that does not carry the
token. A browser brings it once, as ``/?token=…``; the answer sets it as a cookie and
sends the browser on to the same page without it, so the token leaves the address bar
and the history. The cookie is HttpOnly (no script reads it) and ``SameSite=Lax`` (a
link from another site may open the page; another site's script sends no cookie).

The WebSocket is also refused when its ``Origin`` is not the host it asks: cookies are
scoped by host, not port, so a page served on another port of the same host would
otherwise drive a console with them.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

__all__ = [
    "TOKEN_PARAM",
    "WS_PATH",
    "cookie_name",
    "new_token",
    "token_gate",
]

TOKEN_PARAM = "token"
WS_PATH = "/ws"
UNAUTHORIZED = (
    "error [unauthorized]: this ateam console needs its token — open the URL that "
    "`ateam console --web` printed (…/?token=…), or the token in its --token-file\n"
)
"""The body of every 401: one line, with the code a script can match."""
CROSS_ORIGIN = "error [unauthorized]: a console WebSocket from another origin is refused\n"


def new_token() -> str:
    """A fresh random token, safe in a URL."""
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    """The cookie of the server on ``port``: browsers share cookies across a host's ports."""
    return f"ateam-console-{port}"


def token_gate(token: str, cookie: str) -> Middleware:
    """An aiohttp middleware that answers 401 to every request without the token."""

    def matches(given: str | None) -> bool:
        # Constant-time: the answer's timing says nothing about how close a guess was.
        return given is not None and hmac.compare_digest(given.encode(), token.encode())

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.query.get(TOKEN_PARAM)
        if given is not None:
            if not matches(given):
                return _refused(UNAUTHORIZED)
            return _admit(request, cookie, token)
        if not matches(request.cookies.get(cookie)):
            return _refused(UNAUTHORIZED)
        if request.path == WS_PATH and not _same_origin(request):
            return _refused(CROSS_ORIGIN, status=403)
        return await handler(request)

    return gate


def _admit(request: web.Request, cookie: str, token: str) -> web.StreamResponse:
    """Set the cookie and send the browser to the same URL without the token."""
    query = [(key, value) for key, value in request.query.items() if key != TOKEN_PARAM]
    response = web.Response(
        status=303, headers={"Location": str(request.rel_url.with_query(query))}
    )
    response.set_cookie(
        cookie,
        token,
        path="/",
        httponly=True,
        samesite="Lax",
        secure=forwarded_scheme(request) == "https",
    )
    response.headers["Cache-Control"] = "no-store"
    return response


def _refused(body: str, *, status: int = 401) -> web.Response:
    return web.Response(
        status=status,
        text=body,
        content_type="text/plain",
        headers={"Cache-Control": "no-store"},
    )


def forwarded_scheme(request: web.Request) -> str:
    """``https`` behind a TLS proxy that says so (``X-Forwarded-Proto``), else the request's."""
    proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return proto if proto in ("http", "https") else request.scheme


def _same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if origin is None:
        return True  # not a browser: it has the cookie, so it has the token
    return urlsplit(origin).netloc.lower() == (request.host or "").lower()
