"""``ateam up``: start a project's agents as background processes, and stop them again.

Each agent runs detached in its own session (so closing the console or the terminal
does not stop it) with its output appended to ``state/agent.log``. The pids are kept in
``~/.ateam/run/<project>.json`` so ``ateam up --down`` can stop exactly what ``up``
started, with SIGTERM — the agent's graceful shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ateam._fs import atomic_write
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.lock import pid_is_running
from ateam.bus.registry import Registry
from ateam.config import ProjectConfig
from ateam.errors import AteamError
from ateam.paths import ateam_home, private_dir

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def _pid_file(project: ProjectConfig) -> Path:
    return private_dir(ateam_home() / "run") / f"{project.name}.json"


def _read_pids(project: ProjectConfig) -> dict[str, int]:
    try:
        data = json.loads(_pid_file(project).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in data.items() if isinstance(v, int)}


def start_agents(
    project: ProjectConfig, target: RedisTarget, *, redis_url: str | None = None
) -> list[str]:
    """Start every configured agent that is not already running; wait until they serve."""
    running = asyncio.run(_registered(target, [a.id for a in project.agents.values()]))
    pids = {name: pid for name, pid in _read_pids(project).items() if pid_is_running(pid)}
    lines: list[str] = []
    spawned: dict[str, subprocess.Popen[bytes]] = {}
    for name, agent in project.agents.items():
        if agent.id in running:
            lines.append(f"{agent.id}: already running")
            continue
        agent.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        log_path = agent.state_dir / "agent.log"
        cmd = [
            sys.executable,
            "-m",
            "ateam",
            "agent",
            "--project",
            project.name,
            "--name",
            name,
            "--no-repl",
        ]
        if redis_url:
            cmd += ["--redis", redis_url]
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            spawned[name] = subprocess.Popen(
                cmd,
                cwd=project.root or Path.cwd(),
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                start_new_session=True,
            )
        finally:
            os.close(fd)
        pids[name] = spawned[name].pid
    atomic_write(_pid_file(project), json.dumps(pids).encode())
    ids = {project.agents[name].id: name for name in spawned}
    ready = asyncio.run(_wait_registered(target, list(ids), spawned, ids))
    for agent_id, name in ids.items():
        proc = spawned[name]
        log_path = project.agents[name].state_dir / "agent.log"
        if agent_id in ready:
            lines.append(f"{agent_id}: started (pid {proc.pid}, log {log_path})")
        else:
            code = proc.poll()
            why = f"exited with {code}" if code is not None else "did not register in time"
            lines.append(f"{agent_id}: FAILED ({why}); last log lines:\n{_tail(log_path)}")
    return lines


async def _registered(target: RedisTarget, ids: list[str]) -> set[str]:
    client = make_client(target)
    try:
        views = await Registry(client, Keys(target.namespace)).list()
        return {v.id for v in views if v.connected and v.id in ids}
    except Exception as exc:
        raise AteamError(f"cannot read the registry: {exc}") from exc
    finally:
        await client.aclose()


async def _wait_registered(
    target: RedisTarget,
    ids: list[str],
    procs: dict[str, subprocess.Popen[bytes]],
    names: dict[str, str],
) -> set[str]:
    client = make_client(target)
    registry = Registry(client, Keys(target.namespace))
    deadline = time.monotonic() + START_TIMEOUT_S
    ready: set[str] = set()
    try:
        while time.monotonic() < deadline:
            views = await registry.list()
            ready = {v.id for v in views if v.connected and v.id in ids}
            waiting = [i for i in ids if i not in ready and procs[names[i]].poll() is None]
            if not waiting:
                break
            await asyncio.sleep(0.1)
    finally:
        await client.aclose()
    return ready


def stop_agents(project: ProjectConfig) -> list[str]:
    """SIGTERM every agent ``up`` started for this project and wait for them to exit."""
    pids = _read_pids(project)
    lines: list[str] = []
    alive = {name: pid for name, pid in pids.items() if pid_is_running(pid)}
    for pid in alive.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and any(pid_is_running(p) for p in alive.values()):
        time.sleep(0.05)
    for name, pid in alive.items():
        state = "still running" if pid_is_running(pid) else "stopped"
        lines.append(f"{project.name}/{name}: {state} (pid {pid})")
    if not alive:
        lines.append(f"no running agents of {project.name} were started by `ateam up`")
    with contextlib.suppress(FileNotFoundError):
        _pid_file(project).unlink()
    return lines


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "  (no log)"
    return "\n".join(f"  {line}" for line in text)
