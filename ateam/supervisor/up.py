"""``ateam up``, ``start``, ``restart`` and ``down``: the command side of the supervisor.

:func:`start_agents` starts the agents of a project that are not running — under the
project's supervisor when one runs (a start request, :mod:`ateam.supervisor.control`),
else under a new one of their own — and waits, bounded, until each has registered on the
bus or ended, naming the cause of each that did not come up (its ``state/exit.json``).
An agent that runs already (under any supervisor, keeper or terminal) is left alone.
:func:`stop_agents` sends SIGTERM to the project's supervisor and to the keepers of its
console-started agents; each passes it on and waits for its agents.

Before starting anything it checks the bus itself — reachable, credentials and
permissions accepted, no eviction policy (:mod:`ateam.bus.guard`): one line, not one
failure per agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from socket import gethostname

from redis.exceptions import RedisError

from ateam._cmdline import bus_environment
from ateam._proc import pid_is_running
from ateam.bus.connection import RedisTarget, bus_error, ensure_reachable, make_client
from ateam.bus.guard import check_eviction
from ateam.bus.keys import Keys
from ateam.bus.registry import Registry
from ateam.config import AgentConfig, ProjectConfig
from ateam.config.discovery import remember_root
from ateam.errors import AteamError, SpawnFailed
from ateam.supervisor.control import (
    Request,
    project_keepers,
    request_start,
    supervised,
    supervisor_log,
    supervisor_pid,
)
from ateam.supervisor.exits import AgentExit, read_exit
from ateam.supervisor.process import STOP_TIMEOUT_S
from ateam.wire.registry import AgentStatus

__all__ = [
    "START_TIMEOUT_S",
    "AgentOutcome",
    "Outcome",
    "Started",
    "running_agents",
    "start_agents",
    "stop_agents",
]

START_TIMEOUT_S = 20.0
WAIT_ROUND_S = 0.1
"""Between two looks at the registry while agents start (they announce nothing to wait on)."""


class Outcome(StrEnum):
    """What became of one agent a command was about: the ``status`` of its JSON row."""

    STARTED = "started"
    RUNNING = "running"
    """It ran already: left alone."""
    STOPPED = "stopped"
    NOT_RUNNING = "not running"
    FAILED = "failed"


@dataclass(frozen=True)
class AgentOutcome:
    """One agent's line of ``up``, ``start``, ``restart``, ``stop`` or ``down``."""

    id: str
    status: Outcome
    pid: int | None = None
    log: Path | None = None
    error: str | None = None
    """Why it failed (or the note that goes with it)."""
    log_tail: str = ""
    """For a failure without a recorded cause: the agent log's last lines, indented."""
    how: str = ""
    """For people only, in place of the pid and log: what ran it (a console's keeper)."""

    def line(self) -> str:
        """The line people read."""
        pid = f"pid {self.pid}" if self.pid is not None else ""
        log = f"log {self.log}" if self.log is not None else ""
        details = self.how or ", ".join(part for part in (pid, log) if part)
        where = f" ({details})" if details else ""
        if self.status is Outcome.FAILED:
            tail = f"; last log lines:\n{self.log_tail}" if self.log_tail else ""
            return f"{self.id}: FAILED, {self.error}{where}{tail}"
        note = f": {self.error}" if self.error else ""
        return f"{self.id}: {self.status}{where}{note}"

    def to_json(self) -> dict[str, object]:
        """The documented JSON row: ``id``, ``status``, ``pid``, ``log``, ``error``."""
        return {
            "id": self.id,
            "status": str(self.status),
            "pid": self.pid,
            "log": None if self.log is None else str(self.log),
            "error": self.error,
        }


@dataclass(frozen=True)
class Started:
    """What :func:`start_agents` did: a row per agent, and the error if some failed."""

    outcomes: list[AgentOutcome]
    error: SpawnFailed | None


def start_agents(
    project: ProjectConfig,
    target: RedisTarget,
    *,
    names: Sequence[str] | None = None,
    redis_url: str | None = None,
) -> Started:
    """Start the project's agents that are not running, and wait until they serve.

    Args:
        project: the project; every name must be one of its configured agents.
        target: its bus.
        names: the agents to start (default: every configured one).
        redis_url: a ``--redis`` URL, passed to a new supervisor in its environment.

    Raises:
        BusError: the bus cannot be used (unreachable, refused credentials or a
            permission, a policy that may evict keys); nothing was started.
    """
    asyncio.run(_check_bus(target))
    if project.root is not None:
        remember_root(project.name, project.root)
    chosen = list(project.agents) if names is None else list(dict.fromkeys(names))
    running = asyncio.run(running_agents(target, project))
    wanted = [name for name in chosen if f"{project.name}/{name}" not in running]
    found: dict[str, int | AgentExit] = {}
    supervisor: int | None = None
    if wanted:
        since = time.time()
        supervisor, request = _ask_supervisor(project, wanted, redis_url)
        found = asyncio.run(_wait_up(target, project, wanted, supervisor, since))
        missing = [name for name in wanted if not isinstance(found.get(name), int)]
        if missing and request is not None and request.withdraw():
            # The supervisor ended before it took the request: start one of their own.
            supervisor = _start_supervisor(project, redis_url, missing)
            found |= asyncio.run(_wait_up(target, project, missing, supervisor, since))
    outcomes = []
    for name in chosen:
        agent = project.agents[name]
        agent_id = agent.id
        log = agent.state_dir / "agent.log"
        if agent_id in running:
            outcomes.append(AgentOutcome(agent_id, Outcome.RUNNING, running[agent_id], log))
            continue
        outcomes.append(_outcome(agent_id, found.get(name), log, project, supervisor))
    failed = {o.id: o.error or "" for o in outcomes if o.status is Outcome.FAILED}
    if not failed:
        return Started(outcomes, None)
    names_failed = ", ".join(sorted(failed))
    error = SpawnFailed(
        f"{len(failed)} of {len(chosen)} agents of {project.name} did not come up: {names_failed}",
        detail={"agents": failed},
    )
    return Started(outcomes, error)


def _outcome(
    agent_id: str,
    result: int | AgentExit | None,
    log: Path,
    project: ProjectConfig,
    supervisor: int | None,
) -> AgentOutcome:
    if isinstance(result, int):
        return AgentOutcome(agent_id, Outcome.STARTED, result, log)
    if isinstance(result, AgentExit) and result.stopped:
        # Someone stopped it while it started: what they asked for, not a failure.
        return AgentOutcome(agent_id, Outcome.STOPPED, None, log, "stopped while starting")
    if isinstance(result, AgentExit):
        return AgentOutcome(agent_id, Outcome.FAILED, None, log, result.describe())
    why = (
        f"did not register within {START_TIMEOUT_S:g} s"
        if supervisor is not None and pid_is_running(supervisor)
        else f"its supervisor exited (see {supervisor_log(project)})"
    )
    return AgentOutcome(agent_id, Outcome.FAILED, None, log, why, _tail(log))


def _ask_supervisor(
    project: ProjectConfig, names: list[str], redis_url: str | None
) -> tuple[int, Request | None]:
    """The running supervisor, asked to start ``names``; else a new one running them."""
    pid = supervisor_pid(project)
    if pid is not None:
        return pid, request_start(project, names)
    return _start_supervisor(project, redis_url, names), None


def _start_supervisor(project: ProjectConfig, redis_url: str | None, names: list[str]) -> int:
    root = project.root or Path.cwd()
    cmd = [sys.executable, "-m", "ateam.supervisor", str(root), *names]
    fd = os.open(supervisor_log(project), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            # The URL (and its password) in the environment: every user can read `ps`.
            env=bus_environment(redis_url),
        )
    finally:
        os.close(fd)
    return proc.pid


async def _check_bus(target: RedisTarget) -> None:
    """Refuse to start agents on a bus they would all refuse (one line, not one per agent)."""
    client = make_client(target)
    try:
        await ensure_reachable(client, target)
        await check_eviction(client, target)
    finally:
        await client.aclose()


async def running_agents(target: RedisTarget, project: ProjectConfig) -> dict[str, int]:
    """Agent id → pid of every agent of ``project`` that is connected to the bus now."""
    client = make_client(target)
    try:
        views = await Registry(client, Keys(target.namespace)).list((project.name,))
    except RedisError as exc:
        raise bus_error(exc) from exc
    finally:
        await client.aclose()
    return {view.id: view.entry.pid for view in views if _alive(view)}


def _alive(view: AgentStatus) -> bool:
    """Connected, and on this host its process still exists.

    Right after a kill -9 of everything (the server too) a heartbeat the server kept on
    disk still looks fresh for a few seconds; the process it speaks for is gone, and an
    ``up`` that believed it would leave the agent down.
    """
    if not view.connected:
        return False
    return view.entry.host != gethostname() or pid_is_running(view.entry.pid)


async def _wait_up(
    target: RedisTarget,
    project: ProjectConfig,
    names: Iterable[str],
    supervisor: int,
    since: float,
) -> dict[str, int | AgentExit]:
    """Agent name → its pid once registered, or its exit if it ended; absent: neither.

    Each of ``names`` was not running when this began, so whichever registers now is
    the process started for it. An exit recorded after ``since`` that will be restarted
    is remembered but does not end the wait, nor does a stop (exit 0, maybe the one a
    restart just asked for, which the supervisor follows with a start).
    """
    pending = {name: project.agents[name] for name in names}
    found: dict[str, int | AgentExit] = {}
    client = make_client(target)
    registry = Registry(client, Keys(target.namespace))
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while pending and time.monotonic() < deadline:
            views = await registry.list((project.name,))
            serving = {view.id: view.entry.pid for view in views if _alive(view)}
            for name, agent in list(pending.items()):
                if agent.id in serving:
                    found[name] = serving[agent.id]
                    del pending[name]
            _note_exits(pending, found, since)
            if not pid_is_running(supervisor):
                break
            await asyncio.sleep(WAIT_ROUND_S)
    except RedisError as exc:
        raise bus_error(exc) from exc
    finally:
        await client.aclose()
    # The supervisor records an exit just before it leaves: look once more.
    _note_exits(pending, found, since)
    return found


def _note_exits(
    pending: dict[str, AgentConfig], found: dict[str, int | AgentExit], since: float
) -> None:
    """Record the exits of pending agents; a final one, other than a stop, ends the wait."""
    for name, agent in list(pending.items()):
        ended = read_exit(agent.state_dir)
        if ended is not None and ended.at >= since:
            found[name] = ended
            if ended.final and not ended.stopped:
                del pending[name]


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "  (no log)"
    return "\n".join(f"  {line}" for line in text)


# down --------------------------------------------------------------------------------------


def stop_agents(project: ProjectConfig, target: RedisTarget) -> tuple[list[AgentOutcome], bool]:
    """SIGTERM the project's supervisor and its agents' keepers; wait until they are gone.

    Returns a row per agent that ran before or is configured, and whether everything
    that ``up``, ``start`` or a console started has stopped. An agent started some other
    way (``ateam agent`` in a terminal) is not signalled, and its row says so. With the
    bus out of reach the processes are still stopped; the rows then go by the processes.
    """
    before = _running_or_none(target, project)
    ok = True
    problems: dict[str, str] = {}
    pid = supervisor_pid(project)
    ran = {f"{project.name}/{name}" for name in supervised(project)}
    if pid is not None and not _terminate(pid):
        ok = False
        for agent_id in ran:
            problems[agent_id] = f"its supervisor (pid {pid}) is still running"
    kept = project_keepers(project)
    for keeper in kept.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(keeper, signal.SIGTERM)  # the keeper passes it on and waits
    for agent_id, keeper in sorted(kept.items()):
        if not _terminate(keeper, signalled=True):
            ok = False
            problems[agent_id] = f"its keeper (pid {keeper}) is still running"
    after = _running_or_none(target, project) if before is not None else None
    before = before or {}
    ids = sorted({*before, *kept, *ran, *(agent.id for agent in project.agents.values())})
    rows = []
    for agent_id in ids:
        if agent_id in problems:
            rows.append(AgentOutcome(agent_id, Outcome.FAILED, error=problems[agent_id]))
        elif after is not None and agent_id in after:
            note = f"not started by `ateam up` or a console: `ateam stop {agent_id}` stops it"
            rows.append(AgentOutcome(agent_id, Outcome.RUNNING, after[agent_id], error=note))
        elif agent_id in kept:
            how = f"started by a console, keeper pid {kept[agent_id]}"
            rows.append(AgentOutcome(agent_id, Outcome.STOPPED, before.get(agent_id), how=how))
        elif agent_id in before or agent_id in ran:
            rows.append(AgentOutcome(agent_id, Outcome.STOPPED, before.get(agent_id)))
        else:
            rows.append(AgentOutcome(agent_id, Outcome.NOT_RUNNING))
    return rows, ok


def _running_or_none(target: RedisTarget, project: ProjectConfig) -> dict[str, int | None] | None:
    try:
        return dict(asyncio.run(running_agents(target, project)))
    except AteamError:
        return None


def _terminate(pid: int, *, signalled: bool = False) -> bool:
    """SIGTERM ``pid`` (unless already sent) and wait for it to end; returns whether it did."""
    if not signalled:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S + 5
    while time.monotonic() < deadline and pid_is_running(pid):
        time.sleep(0.05)
    return not pid_is_running(pid)
