"""Which Redis to talk to (SPEC §2 URL resolution) and how to open a client for it."""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass, field
from typing import Any, NoReturn
from urllib.parse import parse_qsl, quote, urlsplit

import redis.asyncio as aioredis
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    AuthorizationError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)

from ateam._cmdline import mask_url
from ateam.bus._tls import TLS_QUERY, check_url, tls_closed_early, tls_options, tls_refusal
from ateam.bus.topology import TOPOLOGY_SCHEMES, cluster_url, parse_topology
from ateam.constants import DEFAULT_NAMESPACE
from ateam.errors import (
    BusError,
    RedisAuthFailed,
    RedisOutOfMemory,
    RedisPermissionDenied,
    RedisReadOnly,
    RedisUnavailable,
    UsageError,
)

_SCHEMES = ("redis", "rediss", "unix")

URL_ENV = "ATEAM_REDIS_URL"
"""The bus's URL, for a process started without ``--redis`` (SPEC §2)."""
NAMESPACE_ENV = "ATEAM_NAMESPACE"
"""The key namespace, over the project's: set by ateam for a process it starts on a bus
it resolved itself (see :func:`target_environment`), like :data:`URL_ENV`."""
ALLOW_EVICTION_ENV = "ATEAM_ALLOW_EVICTION"
"""Set to ``1`` (``true``, ``yes``, ``on``) to start on a server that may evict keys
(read by :mod:`ateam.bus.guard`)."""
EMBEDDED = "embedded"
"""The :attr:`RedisTarget.source` of this user's embedded server."""


@dataclass(frozen=True)
class RedisTarget:
    """A resolved Redis endpoint plus the credentials and TLS settings to reach it."""

    url: str
    """A redis-py URL (``redis://``, ``rediss://`` or ``unix://``), or a Cluster or
    Sentinel one (``redis+cluster://``, ``redis+sentinel://``, see :mod:`ateam.bus.cluster`)."""
    source: str
    """Where the URL came from: ``--redis``, ``ATEAM_REDIS_URL``, ``tools.yaml`` or ``embedded``."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    """CA bundle that verifies a ``rediss://`` server (``ssl_ca_certs`` in the URL wins)."""
    cert_file: str | None = None
    """Client certificate for mutual TLS (``ssl_certfile`` in the URL wins)."""
    key_file: str | None = None
    """Private key of ``cert_file``, unless that file holds both (``ssl_keyfile``)."""
    namespace: str = DEFAULT_NAMESPACE
    allow_eviction: bool = False
    """``tools.yaml`` ``transport.allow_eviction``: start on a server that may evict keys."""

    def describe(self) -> str:
        """The URL with any password masked, for banners and logs."""
        return mask_url(self.url)


def validate_url(url: str) -> str:
    scheme = urlsplit(url).scheme
    if scheme not in _SCHEMES and scheme not in TOPOLOGY_SCHEMES:
        raise UsageError(
            f"unsupported Redis URL scheme {scheme!r} in {mask_url(url)!r}; use redis://, "
            "rediss:// or unix:// (or redis+cluster://, redis+sentinel://, rediss+…)"
        )
    topology = parse_topology(url)
    check_url(topology.node_url() if topology is not None else url)
    return url


def resolve_target(
    cli_url: str | None = None,
    *,
    transport: Any | None = None,
    namespace: str | None = None,
) -> RedisTarget | None:
    """The first Redis URL that is set, or ``None`` meaning "use the embedded server".

    Order (SPEC §2): ``--redis``, ``ATEAM_REDIS_URL``, ``tools.yaml`` ``transport.url``
    (a Cluster URL if ``transport.cluster`` is true).
    ``transport`` is the parsed ``tools.yaml`` transport section (duck-typed so this
    module does not depend on the config package).
    """
    ns = chosen_namespace(namespace, transport)
    extra: dict[str, Any] = {
        "username": getattr(transport, "username", None),
        "password": getattr(transport, "password", None),
        "ca_file": getattr(transport, "ca_file", None),
        "cert_file": getattr(transport, "cert_file", None),
        "key_file": getattr(transport, "key_file", None),
        "allow_eviction": getattr(transport, "allow_eviction", None) is True,
    }
    if cli_url:
        return RedisTarget(validate_url(cli_url), "--redis", namespace=ns, **extra)
    env_url = os.environ.get(URL_ENV)
    if env_url:
        return RedisTarget(validate_url(env_url), URL_ENV, namespace=ns, **extra)
    conf_url = getattr(transport, "url", None)
    if conf_url:
        if getattr(transport, "cluster", None) is True:
            conf_url = cluster_url(conf_url)  # the URL every child and front end is given
        return RedisTarget(validate_url(conf_url), "tools.yaml", namespace=ns, **extra)
    return None


def chosen_namespace(namespace: str | None, transport: Any | None = None) -> str:
    """The key namespace: ``ATEAM_NAMESPACE``, else ``namespace`` (a project's), else
    ``tools.yaml`` ``transport.namespace``, else the default.

    The environment wins, as ``ATEAM_REDIS_URL`` wins over ``tools.yaml``: it is how a
    process is handed the bus its parent resolved (:func:`target_environment`), whatever
    project its working directory happens to be in.

    Raises:
        UsageError: ``ATEAM_NAMESPACE`` is set but empty of anything but white space, or
            holds white space.
    """
    given = os.environ.get(NAMESPACE_ENV)
    if given is not None and given != "":
        if any(ch.isspace() for ch in given):
            raise UsageError(f"{NAMESPACE_ENV} must hold no white space; got {given!r}")
        # Keys are built as f"{namespace}{rest}": the separator is part of a namespace.
        return given if given.endswith(":") else f"{given}:"
    return namespace or (getattr(transport, "namespace", None) or DEFAULT_NAMESPACE)


def target_environment(target: RedisTarget) -> dict[str, str]:
    """The variables that make a process started with them resolve ``target`` again.

    For a child whose environment is not ours (a coding agent's runtime starts ateam's
    MCP server with an environment of its own), so nothing may be left to what the child
    finds around it:

    * ``ATEAM_REDIS_URL``: the URL with the credentials and TLS files of ``tools.yaml``
      folded in (user and password in its user part, the files as ``ssl_*`` query
      parameters), since the child may not find that ``tools.yaml``. A password is
      thereby in the child's environment, which only its user can read, never on a
      command line (:mod:`ateam._cmdline`). What the URL holds already wins, as it does
      in the client.
    * Nothing for the embedded server: the child finds it by the record of the same
      ateam home (``ATEAM_HOME``, the caller's to pass), so its password is never copied
      into another process's environment.
    * ``ATEAM_NAMESPACE``: the key namespace, which no URL can carry.
    * ``ATEAM_ALLOW_EVICTION=1`` when ``tools.yaml`` allowed a server that may evict.
    """
    env = {NAMESPACE_ENV: target.namespace}
    if target.source != EMBEDDED:
        env[URL_ENV] = _self_contained_url(target)
    if target.allow_eviction:
        env[ALLOW_EVICTION_ENV] = "1"
    return env


def _self_contained_url(target: RedisTarget) -> str:
    """``target.url`` with its username, password and TLS files in it, where not already."""
    parts = urlsplit(target.url)
    netloc = parts.netloc
    if "@" not in netloc and (target.username or target.password):
        user = quote(target.username or "", safe="")
        secret = f":{quote(target.password, safe='')}" if target.password else ""
        netloc = f"{user}{secret}@{netloc}"
    query = parts.query
    if parts.scheme.startswith("rediss"):  # rediss://, and rediss+cluster:// or +sentinel://
        named = {key for key, _ in parse_qsl(query, keep_blank_values=True)}
        for param, name in TLS_QUERY.items():
            path = getattr(target, name)
            if path and param not in named:
                query += f"{'&' if query else ''}{param}={quote(str(path), safe='/')}"
    # Rebuilt by hand: urlunsplit drops the "//" of an empty netloc (unix:///path).
    url = f"{parts.scheme}://{netloc}{parts.path}"
    return f"{url}?{query}" if query else url


def make_client(target: RedisTarget, **overrides: object) -> aioredis.Redis:
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
    kwargs.update(tls_options(target))
    kwargs.update(overrides)
    try:
        if parse_topology(target.url) is not None:
            # Imported here: redis-py's cluster and Sentinel clients, for those URLs only.
            from ateam.bus.cluster import make_topology_client

            topology = make_topology_client(target, kwargs)
            if topology is not None:
                return topology
        return aioredis.Redis.from_url(target.url, **kwargs)
    except ValueError as exc:
        raise RedisUnavailable(f"invalid Redis URL {target.describe()}: {exc}") from exc


async def ensure_reachable(client: aioredis.Redis, target: RedisTarget) -> None:
    """PING once; a failure becomes a :class:`BusError` naming the masked URL.

    Refused credentials and permissions get their own codes (:func:`bus_error`);
    anything else means the server cannot be used: :class:`RedisUnavailable`.
    """
    try:
        await client.ping()
        return
    except Exception as exc:  # connection, auth and protocol errors all mean "not usable"
        first = exc
    if tls_closed_early(first, target):
        # A server that wants a client certificate closes every connection; a restart
        # or a dropped link closes one. Only a second close makes the refusal final.
        await asyncio.sleep(_TLS_RECHECK_S)
        try:
            await client.ping()
            return
        except Exception as exc:
            first = exc
    _raise_unusable(first, target)


_TLS_RECHECK_S = 0.25


def _raise_unusable(exc: BaseException, target: RedisTarget) -> NoReturn:
    """Raise the :class:`BusError` for the first command's failure ``exc``."""
    tls = tls_refusal(exc, target, target.describe())
    if tls is not None:
        raise tls from exc
    refusal = _refusal(exc) if isinstance(exc, RedisError) else None
    if refusal is not None:
        raise refusal[0](f"Redis at {target.describe()} {refusal[1]}: {_text(exc)}") from exc
    raise RedisUnavailable(f"cannot reach Redis at {target.describe()}: {_text(exc)}") from exc


# What each refusal is, by redis-py's class; the message says what happened.
_REFUSALS: tuple[tuple[type[RedisError], type[BusError], str], ...] = (
    (NoPermissionError, RedisPermissionDenied, "refused the ACL user a permission"),
    (AuthenticationError, RedisAuthFailed, "refused the credentials"),
    (AuthenticationWrongNumberOfArgsError, RedisAuthFailed, "refused the credentials"),
    (AuthorizationError, RedisAuthFailed, "refused the credentials"),
    (OutOfMemoryError, RedisOutOfMemory, "is out of memory (maxmemory) and refused a write"),
    (ReadOnlyError, RedisReadOnly, "is a read-only replica and refused a write"),
)
# Inside a Lua script a refusal comes back as a plain ResponseError on Redis 6.2 (and an
# ACL one on Valkey and Redis 7 too): only the wording tells what it was.
_SCRIPT_REFUSALS: tuple[tuple[re.Pattern[str], type[BusError], str], ...] = (
    (
        re.compile(r"NOPERM|no permissions|can't run this command"),
        RedisPermissionDenied,
        "refused the ACL user a permission",
    ),
    (re.compile(r"\bREADONLY\b"), RedisReadOnly, "is a read-only replica and refused a write"),
    (
        re.compile(r"\bOOM\b|used memory > 'maxmemory'"),
        RedisOutOfMemory,
        "is out of memory (maxmemory) and refused a write",
    ),
)


def _refusal(exc: RedisError) -> tuple[type[BusError], str] | None:
    """The error class and wording of a refusal, or ``None`` for any other failure."""
    for kind, error, what in _REFUSALS:
        if isinstance(exc, kind):
            return error, what
    if type(exc) is ResponseError:
        for pattern, error, what in _SCRIPT_REFUSALS:
            if pattern.search(str(exc)):
                return error, what
    return None


def _text(exc: BaseException) -> str:
    """The exception's text on one line (a script error may hold several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def bus_error(exc: RedisError) -> BusError:
    """A redis-py error at a command boundary, as ateam's one-line error.

    NOPERM, refused credentials, OOM and READONLY each get their own code (see
    :mod:`ateam.errors`); anything else is ``redis.unavailable`` (exit 2 / 13).
    """
    refusal = _refusal(exc)
    if refusal is not None:
        return refusal[0](f"Redis {refusal[1]}: {_text(exc)}")
    failure = f"{type(exc).__name__}: {_text(exc)}"
    return RedisUnavailable(f"Redis refused or failed the request: {failure}")
