"""``ateam up``: run a project's agents as supervised background processes.

``ateam up`` starts one detached supervisor process per project (its own session, so
closing the console or the terminal stops nothing). The supervisor starts every agent,
appends each agent's output to its ``state/agent.log``, and restarts an agent that
died — but never one that stopped on purpose or cannot run (see :data:`FINAL_EXITS`).
``ateam up --down`` sends the supervisor SIGTERM; it passes SIGTERM (the agent's
graceful shutdown) to every agent and exits once they have.

The supervisor's pid lives in ``~/.ateam/run/<project>.json``. Agents a console started
(``/spawn``, ``/agent new``, ``/offload``) run under keepers (:mod:`ateam.fleet`) that
leave their pid in the agent's ``state/keeper.pid``; ``--down`` stops those too.
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
from dataclasses import dataclass, field
from pathlib import Path

from ateam._fs import atomic_write
from ateam._proc import pid_is_running
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.registry import Registry
from ateam.config import CONFIG_DIR, ProjectConfig, agent_dir_for, load_project
from ateam.constants import PREVIOUS_EXIT_ENV
from ateam.errors import AteamError, Exit
from ateam.paths import ateam_home, private_dir

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
HEALTHY_AFTER_S = 60.0
"""An agent that ran this long has its restart backoff reset."""

FINAL_EXITS: dict[int, str] = {
    Exit.OK: "stopped",
    Exit.DUPLICATE_INSTANCE: "another instance holds its identity",
    Exit.CONFIG_INVALID: "its configuration is invalid",
    Exit.BOOTSTRAP_REFUSED: "its bootstrap token was refused (tokens work once)",
}
"""Exit codes after which restarting would be wrong or pointless."""

KEEPER_PID_FILE = "keeper.pid"
"""In an agent's ``state/``: the pid of the keeper a console started it under."""


def _pid_file(project: ProjectConfig) -> Path:
    return private_dir(ateam_home() / "run") / f"{project.name}.json"


def supervisor_pid(project: ProjectConfig) -> int | None:
    try:
        data = json.loads(_pid_file(project).read_text())
    except (OSError, ValueError):
        return None
    pid = data.get("supervisor") if isinstance(data, dict) else None
    if not isinstance(pid, int) or not pid_is_running(pid):
        return None
    # After a reboot or a kill -9 the pid may belong to something else: never signal it.
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return pid  # no /proc: the liveness check is all there is
    return pid if b"ateam.supervisor" in cmdline else None


# the `ateam up` side ----------------------------------------------------------------------


def start_agents(
    project: ProjectConfig, target: RedisTarget, *, redis_url: str | None = None
) -> list[str]:
    """Start the project's supervisor (unless running) and wait until the agents serve."""
    ids = [agent.id for agent in project.agents.values()]
    existing = supervisor_pid(project)
    if existing is None:
        root = project.root or Path.cwd()
        cmd = [sys.executable, "-m", "ateam.supervisor", str(root)]
        if redis_url:
            cmd += ["--redis", redis_url]
        log = private_dir(ateam_home() / "run") / f"{project.name}.log"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                start_new_session=True,
            )
        finally:
            os.close(fd)
        existing = proc.pid
    ready = asyncio.run(_wait_registered(target, ids, existing))
    lines = []
    for agent in project.agents.values():
        log_path = agent.state_dir / "agent.log"
        if agent.id in ready:
            lines.append(f"{agent.id}: started (pid {ready[agent.id]}, log {log_path})")
        else:
            lines.append(f"{agent.id}: FAILED to start; last log lines:\n{_tail(log_path)}")
    return lines


async def _wait_registered(target: RedisTarget, ids: list[str], supervisor: int) -> dict[str, int]:
    client = make_client(target)
    registry = Registry(client, Keys(target.namespace))
    deadline = time.monotonic() + START_TIMEOUT_S
    ready: dict[str, int] = {}
    try:
        # Agents register themselves; there is no notice to wait on for "all of them".
        while time.monotonic() < deadline and pid_is_running(supervisor):
            views = await registry.list()
            ready = {v.id: v.entry.pid for v in views if v.connected and v.id in ids}
            if len(ready) == len(ids):
                break
            await asyncio.sleep(0.1)
    except Exception as exc:
        raise AteamError(f"cannot read the registry: {exc}") from exc
    finally:
        await client.aclose()
    return ready


def stop_agents(project: ProjectConfig) -> tuple[list[str], bool]:
    """SIGTERM the project's supervisor and its agents' keepers; wait until they are gone.

    Returns the lines to print and whether everything stopped.
    """
    lines: list[str] = []
    ok = True
    pid = supervisor_pid(project)
    if pid is not None:
        if _terminate(pid):
            lines += [f"{agent.id}: stopped" for agent in project.agents.values()]
        else:
            lines.append(f"{project.name}: the supervisor (pid {pid}) is still running")
            ok = False
    kept = project_keepers(project)
    for keeper in kept.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(keeper, signal.SIGTERM)  # the keeper passes it on and waits
    for agent, keeper in sorted(kept.items()):
        if _terminate(keeper, signalled=True):
            lines.append(f"{agent}: stopped (started by a console, keeper pid {keeper})")
        else:
            lines.append(f"{agent}: its keeper (pid {keeper}) is still running")
            ok = False
    if not lines:
        lines.append(f"no agents of {project.name} are running under `ateam up` or a console")
    return lines, ok


def _terminate(pid: int, *, signalled: bool = False) -> bool:
    """SIGTERM ``pid`` (unless already sent) and wait for it to end; returns whether it did."""
    if not signalled:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S + 5
    while time.monotonic() < deadline and pid_is_running(pid):
        time.sleep(0.05)
    return not pid_is_running(pid)


def keeper_pid(state_dir: Path) -> int | None:
    """The live keeper whose pid ``state_dir/keeper.pid`` holds, if it is one."""
    try:
        pid = int((state_dir / KEEPER_PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    if not pid_is_running(pid):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return pid  # no /proc: the liveness check is all there is
    return pid if b"ateam.fleet" in cmdline else None  # a reused pid is never signalled


def project_keepers(project: ProjectConfig) -> dict[str, int]:
    """Agent id → keeper pid for the project's console-started agents on this host.

    Looked for in the configured agents' state, in unconfigured agents' directories
    (``~/.ateam/projects/<project>/agents/``) and in the project's worktrees.
    """
    dirs = {agent.name: agent.state_dir for agent in project.agents.values()}
    places = [agent_dir_for(project.name, "x").parent]
    if project.root is not None:
        places += (project.root / CONFIG_DIR / "worktrees").glob(f"*/{CONFIG_DIR}/agents")
    for place in places:
        for state in place.glob("*/state"):
            dirs.setdefault(state.parent.name, state)
    found = {}
    for name, state in dirs.items():
        pid = keeper_pid(state)
        if pid is not None:
            found[f"{project.name}/{name}"] = pid
    return found


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "  (no log)"
    return "\n".join(f"  {line}" for line in text)


def restart_env(last_exit: int | None) -> dict[str, str]:
    """The environment of an agent (re)started by a supervisor or a keeper.

    After an exit it names how the previous process ended, so the agent can tell a kill
    from a crash when it recovers the item that was in progress.
    """
    env = dict(os.environ)
    if last_exit is not None:
        env[PREVIOUS_EXIT_ENV] = str(last_exit)
    return env


# the supervisor process ---------------------------------------------------------------


@dataclass
class _Child:
    name: str
    log: Path
    cmd: list[str]
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    failures: int = 0
    next_start: float = 0.0
    done: str | None = None
    last_exit: int | None = None


@dataclass
class Supervisor:
    """Keeps every agent of one project running until told to stop."""

    project: ProjectConfig
    redis_url: str | None = None
    children: list[_Child] = field(default_factory=list)
    stopping: bool = False

    def __post_init__(self) -> None:
        for name, agent in self.project.agents.items():
            agent.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            cmd = [
                sys.executable,
                "-m",
                "ateam",
                "agent",
                "--project",
                self.project.name,
                "--name",
                name,
                "--no-repl",
            ]
            if self.redis_url:
                cmd += ["--redis", self.redis_url]
            self.children.append(_Child(name, agent.state_dir / "agent.log", cmd))

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        atomic_write(_pid_file(self.project), json.dumps({"supervisor": os.getpid()}).encode())
        try:
            while not self.stopping:
                for child in self.children:
                    self._tend(child)
                if all(child.done for child in self.children):
                    break
                time.sleep(0.2)
            self._stop_all()
        finally:
            with contextlib.suppress(FileNotFoundError):
                _pid_file(self.project).unlink()
        return 0

    def _on_term(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _tend(self, child: _Child) -> None:
        if child.done:
            return
        if child.proc is None:
            if time.monotonic() >= child.next_start:
                self._spawn(child)
            return
        code = child.proc.poll()
        if code is None:
            return
        child.proc = None
        child.last_exit = code
        final = FINAL_EXITS.get(code)
        if final is not None:
            child.done = final
            self._note(child, f"exited with {code} ({final}); not restarting")
            return
        if time.monotonic() - child.started > HEALTHY_AFTER_S:
            child.failures = 0
        delay = RESTART_BACKOFF_S[min(child.failures, len(RESTART_BACKOFF_S) - 1)]
        child.failures += 1
        child.next_start = time.monotonic() + delay
        self._note(child, f"exited with {code}; restarting in {delay:g} s")

    def _spawn(self, child: _Child) -> None:
        fd = os.open(child.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            child.proc = subprocess.Popen(
                child.cmd,
                cwd=self.project.root or Path.cwd(),
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                env=restart_env(child.last_exit),
            )
        finally:
            os.close(fd)
        child.started = time.monotonic()

    def _stop_all(self) -> None:
        running = [c.proc for c in self.children if c.proc is not None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _note(self, child: _Child, message: str) -> None:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} supervisor: {child.name} {message}\n"
        with contextlib.suppress(OSError), open(child.log, "a", encoding="utf-8") as fh:
            fh.write(line)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ateam.supervisor")
    parser.add_argument("root")
    parser.add_argument("--redis")
    args = parser.parse_args(argv)
    try:
        project = load_project(Path(args.root))
    except AteamError as exc:
        print(exc.one_line(), file=sys.stderr)
        return Exit.CONFIG_INVALID
    return Supervisor(project, args.redis).run()


if __name__ == "__main__":
    sys.exit(main())
