"""Which Redis to talk to (SPEC §2 URL resolution) and how to open a client for it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ateam.constants import DEFAULT_NAMESPACE
from ateam.errors import RedisUnavailable, UsageError

_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class RedisTarget:
    """A resolved Redis endpoint plus the credentials and TLS settings to reach it."""

    url: str
    """A redis-py URL (``redis://``, ``rediss://`` or ``unix://``)."""
    source: str
    """Where the URL came from: ``--redis``, ``ATEAM_REDIS_URL``, ``tools.yaml`` or ``embedded``."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    namespace: str = DEFAULT_NAMESPACE

    def describe(self) -> str:
        """The URL with any password masked, for banners and logs."""
        return _mask(self.url)


def _mask(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:****@{netloc.rsplit('@', 1)[1]}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = "&".join(f"{k}=****" if k == "password" else f"{k}={v}" for k, v in pairs)
    if netloc == parts.netloc and "password" not in dict(pairs):
        return url
    # Rebuilt by hand: urlunsplit drops the "//" of an empty netloc (unix:///path).
    rebuilt = f"{parts.scheme}://{netloc}{parts.path}"
    return f"{rebuilt}?{query}" if query else rebuilt


def validate_url(url: str) -> str:
    scheme = urlsplit(url).scheme
    if scheme not in _SCHEMES:
        raise UsageError(
            f"unsupported Redis URL scheme {scheme!r} in {_mask(url)!r}; use redis://, rediss:// or unix://"
        )
    return url


def resolve_target(
    cli_url: str | None = None,
    *,
    transport: Any | None = None,
    namespace: str | None = None,
) -> RedisTarget | None:
    """The first Redis URL that is set, or ``None`` meaning "use the embedded server".

    Order (SPEC §2): ``--redis``, ``ATEAM_REDIS_URL``, ``tools.yaml`` ``transport.url``.
    ``transport`` is the parsed ``tools.yaml`` transport section (duck-typed so this
    module does not depend on the config package).
    """
    ns = namespace or (getattr(transport, "namespace", None) or DEFAULT_NAMESPACE)
    extra: dict[str, Any] = {
        "username": getattr(transport, "username", None),
        "password": getattr(transport, "password", None),
        "ca_file": getattr(transport, "ca_file", None),
    }
    if cli_url:
        return RedisTarget(validate_url(cli_url), "--redis", namespace=ns, **extra)
    env_url = os.environ.get("ATEAM_REDIS_URL")
    if env_url:
        return RedisTarget(validate_url(env_url), "ATEAM_REDIS_URL", namespace=ns, **extra)
    conf_url = getattr(transport, "url", None)
    if conf_url:
        return RedisTarget(validate_url(conf_url), "tools.yaml", namespace=ns, **extra)
    return None


def make_client(target: RedisTarget, **overrides: Any) -> aioredis.Redis:
    """An asyncio client for ``target``. Reconnection policy is ateam's own (§4.6)."""
    # No socket_timeout (redis-py >= 8 defaults to 5 s): it would cut blocking reads
    # (BLPOP/XREAD BLOCK) short, and on Python 3.11 the asyncio.wait_for it wraps every
    # send in can swallow a task's cancellation, so loops cancelled at shutdown never end.
    # Blocking reads each hold a pooled connection; a console following and calling many
    # agents needs more than redis-py's default pool of 100.
    kwargs: dict[str, Any] = {
        "socket_connect_timeout": 3.0,
        "socket_timeout": None,
        "max_connections": 1000,
    }
    if not target.url.startswith("unix://"):
        # Unix-socket connections take no keepalive option; TCP ones should notice a
        # silently vanished peer.
        kwargs["socket_keepalive"] = True
    if target.username:
        kwargs["username"] = target.username
    if target.password:
        kwargs["password"] = target.password
    if target.url.startswith("rediss://"):
        if target.ca_file:
            kwargs["ssl_ca_certs"] = target.ca_file
    kwargs.update(overrides)
    try:
        return aioredis.Redis.from_url(target.url, **kwargs)
    except ValueError as exc:
        raise RedisUnavailable(f"invalid Redis URL {target.describe()}: {exc}") from exc


async def ensure_reachable(client: aioredis.Redis, target: RedisTarget) -> None:
    """PING once; any failure becomes :class:`RedisUnavailable` with the masked URL."""
    try:
        await client.ping()
    except Exception as exc:  # connection, auth and protocol errors all mean "not usable"
        raise RedisUnavailable(f"cannot reach Redis at {target.describe()}: {exc}") from exc


def bus_error(exc: RedisError) -> RedisUnavailable:
    """A redis-py error at a command boundary, as ateam's one-line error (exit 2 / 13)."""
    return RedisUnavailable(f"Redis refused or failed the request: {type(exc).__name__}: {exc}")
