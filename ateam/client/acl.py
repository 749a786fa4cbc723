"""A least-privilege Redis user for one project (issue 13): ``ateam acl PROJECT``.

Every key and channel of a project lives under its own prefix (see
:mod:`ateam.bus.keys`), so a user of that project needs three kinds of grant:

* its project's keys and channels, ``~{ns}p:{<project>}:*`` and ``&{ns}p:{<project>}:*``;
* the few team-wide names that hold nothing a project keeps private: the project set
  (names only) and its announcement channel, the global-scope context items and their
  channel, the console sessions' channels and the session snapshot's writer seats;
* the commands ateam runs — everything except the ``@admin`` and ``@dangerous``
  categories, with ``INFO`` back (the eviction-policy check reads it). The
  ``CLIENT SETINFO`` redis-py sends on connecting is refused and, by redis-py, ignored.

With such a user, another project's agents are invisible (listings skip what the user
may not read) and unreachable (a call to one fails with the permission error).

Users live in each server and are not replicated: :func:`create_user` runs its
``ACL SETUSER`` on every master and replica of a Cluster, and on the master and each
replica a Sentinel knows of (so the user is still there after a failover).
"""

from __future__ import annotations

import secrets

import redis.asyncio as aioredis

from ateam.bus.cluster import on_every_node
from ateam.bus.keys import Keys

__all__ = ["acl_rules", "acl_setuser", "create_user"]

_COMMANDS = ("+@all", "-@admin", "-@dangerous", "+info")


def acl_rules(project: str, namespace: str) -> list[str]:
    """The ACL rules (after ``on`` and the password) of a user of ``project``."""
    keys = Keys(namespace)
    ns, prefix = keys.ns, keys.project_prefix(project)
    key_patterns = [
        f"{prefix}*",
        keys.projects,
        f"{ns}g:*",
        f"{ns}console:*",
        f"{ns}session-writer:*",
    ]
    channel_patterns = [
        f"{prefix}*",
        keys.projects_channel,
        f"{ns}g:*",
        f"{ns}console:*",
    ]
    return [
        "resetkeys",
        "resetchannels",
        *(f"~{pattern}" for pattern in key_patterns),
        *(f"&{pattern}" for pattern in channel_patterns),
        *_COMMANDS,
    ]


def acl_setuser(
    project: str, namespace: str, *, user: str | None = None, password: str | None = None
) -> tuple[str, str, str]:
    """``(command, user, password)``: the ``ACL SETUSER`` line for a user of ``project``.

    The password is drawn at random unless given; the caller shows it once.
    """
    name = user or f"ateam-{project}"
    secret = password or secrets.token_urlsafe(24)
    line = " ".join(["ACL SETUSER", name, "on", f">{secret}", *acl_rules(project, namespace)])
    return line, name, secret


async def create_user(
    client: aioredis.Redis, project: str, namespace: str, *, user: str | None, password: str | None
) -> tuple[str, str]:
    """Run the ``ACL SETUSER`` of :func:`acl_setuser` on every server; ``(user, password)``.

    Every server: each master and replica of a Cluster, the master and the replicas of
    a Sentinel-watched set (see :func:`~ateam.bus.cluster.on_every_node`). Needs a
    connection allowed to manage users (``ACL`` is an ``@admin`` command).
    """
    _, name, secret = acl_setuser(project, namespace, user=user, password=password)
    command = ["ACL", "SETUSER", name, "reset", "on", f">{secret}"]
    await on_every_node(client, *command, *acl_rules(project, namespace))
    return name, secret
