"""How an agent's process ended, and whether it is started again.

Shared by the project supervisor and the keepers of console-started agents
(:mod:`ateam.fleet`): the restart backoff, the exits after which nothing is restarted
(:data:`FINAL_EXITS`), the record of the last exit in the agent's ``state/exit.json``,
and the same record on the bus for ``ps`` (:class:`~ateam.wire.registry.FinalExit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from redis.exceptions import RedisError

from ateam._fs import atomic_write
from ateam.bus.connection import RedisTarget, make_client, resolve_target
from ateam.bus.keys import Keys
from ateam.bus.registry import Registry
from ateam.config import ProjectConfig
from ateam.constants import PREVIOUS_EXIT_ENV
from ateam.errors import AteamError, file_to_move_aside
from ateam.exits import Exit
from ateam.wire.registry import FinalExit

__all__ = [
    "EXIT_FILE",
    "FINAL_EXITS",
    "HEALTHY_AFTER_S",
    "NOTE",
    "RESTART_BACKOFF_S",
    "UNLISTED_EXITS",
    "AgentExit",
    "last_error_line",
    "publish_final_exit",
    "read_exit",
    "record_exit",
    "restart_delay",
    "restart_env",
]

RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
HEALTHY_AFTER_S = 60.0
"""An agent that ran this long has its restart backoff reset."""


def restart_delay(failures: int, ran_s: float) -> tuple[float, int]:
    """The wait before restarting an agent that ran ``ran_s`` seconds, and the new count.

    ``failures`` counts the runs that ended since the last healthy one: each adds a
    step of :data:`RESTART_BACKOFF_S`. A run of :data:`HEALTHY_AFTER_S` or more was
    healthy, so what failed before it (a partition, a Redis restart) is forgotten and
    the backoff starts over at its first step.
    """
    if ran_s >= HEALTHY_AFTER_S:
        failures = 0
    return RESTART_BACKOFF_S[min(failures, len(RESTART_BACKOFF_S) - 1)], failures + 1


FINAL_EXITS: dict[int, str] = {
    Exit.OK: "stopped",
    Exit.DUPLICATE_INSTANCE: "another instance holds its identity",
    Exit.CONFIG_INVALID: "its configuration is invalid",
    Exit.BOOTSTRAP_REFUSED: "its bootstrap token was refused (tokens work once)",
    Exit.REDIS_PERMISSION_DENIED: "Redis refused its ACL user a permission",
    Exit.REDIS_AUTH_FAILED: "Redis refused its credentials",
    Exit.EVICTION_POLICY: "the Redis may evict its keys (maxmemory-policy)",
    Exit.STORAGE_CORRUPT: "a state file is damaged beyond automatic repair",
}
"""Exit codes after which restarting would be wrong or pointless: the agent stopped on
purpose, or cannot run until someone changes its configuration or the server's.
``ateam start`` and ``ateam up`` start such an agent again when asked."""

UNLISTED_EXITS = frozenset({Exit.OK, Exit.DUPLICATE_INSTANCE})
"""Final exits ``ps`` need not list: stopped on purpose, or another instance runs (and
is listed itself)."""
PUBLISH_EXIT_TIMEOUT_S = 5.0
"""How long the supervisor tries to record a final exit on the bus before giving up."""

EXIT_FILE = "exit.json"
"""In an agent's ``state/``: how its last process under the supervisor ended."""

NOTE = " supervisor: "
"""What marks the supervisor's own lines in an agent log."""


@dataclass(frozen=True)
class AgentExit:
    """How an agent's process under a supervisor ended (its ``state/exit.json``)."""

    code: int
    """Its exit status."""
    at: float
    """When, in seconds since the epoch."""
    final: str | None
    """Why it is not restarted (see :data:`FINAL_EXITS`); ``None``: it will be."""
    cause: str
    """The agent's last error line (its one-line error, usually)."""
    file: str | None = None
    """The damaged file to move aside (``storage.corrupt``), if that is the cure."""

    @property
    def stopped(self) -> bool:
        """It stopped because someone asked it to (``ateam stop``, ``/stop``): no failure."""
        return self.code == Exit.OK

    def describe(self) -> str:
        what = f"not restarted: {self.final}" if self.final else "restarting"
        return f"exited with {self.code} ({what}): {self.cause}"


def record_exit(state_dir: Path, code: int, cause: str) -> AgentExit:
    """Write how an agent's process ended, for ``ateam up`` to report."""
    damaged = file_to_move_aside(cause) if code == Exit.STORAGE_CORRUPT else None
    record = AgentExit(code, time.time(), FINAL_EXITS.get(code), cause, damaged)
    data = {"code": code, "at": record.at, "final": record.final, "cause": cause}
    if damaged is not None:
        data["file"] = damaged
    with contextlib.suppress(OSError):
        atomic_write(state_dir / EXIT_FILE, json.dumps(data).encode(), mode=0o600)
    return record


def read_exit(state_dir: Path) -> AgentExit | None:
    """The agent's last recorded exit, if its latest process has ended."""
    try:
        data = json.loads((state_dir / EXIT_FILE).read_text())
        return AgentExit(
            int(data["code"]),
            float(data["at"]),
            str(data["final"]) if data.get("final") else None,
            str(data.get("cause", "")),
            str(data["file"]) if data.get("file") else None,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def last_error_line(log: Path) -> str:
    """The newest line of an agent log that reports an error, else its newest line.

    An agent that cannot run ends with its one-line error (``error [code]: ...``);
    timestamped log lines may follow it, so the error is looked for first. Only lines
    after the supervisor's last note count: earlier ones are about an earlier process.
    """
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - 8192))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return "no log"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    notes = [i for i, line in enumerate(lines) if NOTE in line]
    if notes:
        lines = lines[notes[-1] + 1 :]
    errors = [line for line in lines if line.startswith("error [")]
    return (errors or lines or ["no output"])[-1]


def restart_env(last_exit: int | None) -> dict[str, str]:
    """The environment of an agent (re)started by a supervisor or a keeper.

    After an exit it names how the previous process ended, so the agent can tell a kill
    from a crash when it recovers the item that was in progress.
    """
    env = dict(os.environ)
    if last_exit is not None:
        env[PREVIOUS_EXIT_ENV] = str(last_exit)
    return env


def publish_final_exit(
    agent: str, ended: AgentExit, *, redis_url: str | None, project: ProjectConfig | None
) -> str | None:
    """Record a final exit on the bus, for ``ps`` (supervisor and keeper alike).

    Args:
        agent: the agent's id.
        ended: how its process ended (:func:`record_exit`).
        redis_url: the ``--redis`` its command line gave, if any (else ``ATEAM_REDIS_URL``,
            ``tools.yaml``, the embedded server, as for every client).
        project: the project configuration around it (its ``tools.yaml`` transport and
            namespace), if there is a readable one.

    Returns:
        ``None``, or a line saying why it could not be recorded: a bus out of reach
        costs ``ps`` the listing, never the caller its loop.
    """
    final = FinalExit(
        agent,
        ended.code,
        ended.final or "",
        ended.cause,
        ended.file,
        socket.gethostname(),
        ended.at,
    )
    try:
        asyncio.run(_record_final(project, redis_url, final))
    except (AteamError, RedisError, OSError, TimeoutError) as exc:
        return f"could not record its exit on the bus for ps: {exc}"
    return None


async def _record_final(
    project: ProjectConfig | None, redis_url: str | None, final: FinalExit
) -> None:
    """Write ``final`` where ``ps`` reads, on the bus the agent used."""
    namespace = project.namespace if project else None
    transport = project.transport if project else None
    target = resolve_target(redis_url, transport=transport, namespace=namespace)
    if target is None:
        from ateam.bus.embedded import EmbeddedServer

        server = EmbeddedServer()
        if not server.is_running():
            return  # no bus, so nobody to show it to; exit.json and the log still say it
        target = server.ensure()
        if namespace:
            target = RedisTarget(
                target.url, target.source, password=target.password, namespace=namespace
            )
    client = make_client(target)
    try:
        async with asyncio.timeout(PUBLISH_EXIT_TIMEOUT_S):
            await Registry(client, Keys(target.namespace)).record_exit(final)
    finally:
        await client.aclose()
