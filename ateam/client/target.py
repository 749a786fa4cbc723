"""Which bus to talk to, and the few calls made before a team session exists.

A front end resolves a :class:`Target` once (``--redis``, ``ATEAM_REDIS_URL``,
``tools.yaml``, else the embedded server started on demand) and hands it to
:meth:`Team.connect <ateam.client.Team.connect>`. Errors of the Redis library never
reach a front end as such: :func:`bus_errors` turns them into ateam's one-line
:class:`~ateam.errors.RedisUnavailable`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from ateam._json import JsonObject
from ateam.bus import bootstrap
from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.connection import RedisTarget, bus_error
from ateam.bus.connection import resolve_target as configured_target

if TYPE_CHECKING:
    from ateam.config import ProjectConfig

__all__ = [
    "CONNECTION_ERRORS",
    "Target",
    "bus_errors",
    "redeem_bootstrap",
    "resolve_target",
    "running_target",
]

Target = RedisTarget
"""A resolved Redis endpoint with its credentials, TLS settings and key namespace."""


def resolve_target(redis_url: str | None, project: ProjectConfig | None) -> Target:
    """``redis_url`` (``--redis``), ATEAM_REDIS_URL, tools.yaml, else the embedded server.

    The embedded server is started on demand; a project's namespace applies to it too.
    """
    transport = project.transport if project else None
    namespace = project.namespace if project else None
    # A bus that is configured (the same order bus_target follows) needs nothing of the
    # embedded server's module, its file locks and binary lookup: asked first.
    found = configured_target(redis_url, transport=transport, namespace=namespace)
    if found is not None:
        return found
    # Imported here: finding or starting the server is the only use of that module.
    from ateam.bus.embedded import bus_target

    return bus_target(redis_url, transport=transport, namespace=namespace)


@contextlib.contextmanager
def bus_errors() -> Iterator[None]:
    """Turn an error of the Redis library into :class:`~ateam.errors.RedisUnavailable`.

    For front ends: a refused command (NOPERM, LOADING) or a dropped link becomes one
    line with an exit code, not a traceback.
    """
    try:
        yield
    except RedisError as exc:
        raise bus_error(exc) from exc


async def redeem_bootstrap(target: Target, token: str, agent_id: str) -> JsonObject:
    """Use up a one-time bootstrap token for ``agent_id`` and return its record.

    Raises:
        BootstrapRefused: the token is unknown, expired, used, or for another agent.
        RedisUnavailable: the bus cannot be reached or refused the request.
    """
    return await bootstrap.redeem_at(target, token, agent_id=agent_id)


def running_target(redis_url: str | None, project: ProjectConfig | None) -> Target | None:
    """:func:`resolve_target`, except that it never starts the embedded server.

    For what must have no lasting effect, such as shell completion: ``None`` when no bus
    is configured and the embedded server is not running.
    """
    from ateam.bus.embedded import EmbeddedServer

    transport = project.transport if project else None
    namespace = project.namespace if project else None
    if configured_target(redis_url, transport=transport, namespace=namespace) is None:
        if not EmbeddedServer().is_running():
            return None
    return resolve_target(redis_url, project)
