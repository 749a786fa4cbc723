"""``ateam up``: run a project's agents as supervised background processes.

``ateam up`` starts one detached supervisor process per project (its own session, so
closing the console or the terminal stops nothing). The supervisor starts every agent,
appends each agent's output to its ``state/agent.log``, and restarts an agent that
died — but never one that stopped on purpose or cannot run (see :data:`FINAL_EXITS`).
``ateam up --down`` sends the supervisor SIGTERM; it passes SIGTERM (the agent's
graceful shutdown) to every agent and exits once they have.

``ateam up`` waits, bounded, until every agent has registered on the bus or exited,
and names each one that did not come up with its cause: the supervisor records how an
agent's last process ended in its ``state/exit.json`` (exit status, whether final, the
agent's last error line, the file to move aside when its state is damaged). A final exit
is recorded on the bus too (:class:`~ateam.wire.registry.FinalExit`), so ``ateam ps`` lists
the agent as ``exited`` with that reason until it runs again or someone acknowledges it
(``ateam ack``). Before starting anything it checks the bus itself — reachable,
credentials and permissions accepted, no eviction policy (:mod:`ateam.bus.guard`).

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
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from redis.exceptions import RedisError

from ateam._cmdline import bus_environment, mask_own_title
from ateam._fs import atomic_write
from ateam._proc import pid_is_running
from ateam.bus.connection import (
    RedisTarget,
    bus_error,
    ensure_reachable,
    make_client,
    resolve_target,
)
from ateam.bus.guard import check_eviction
from ateam.bus.keys import Keys
from ateam.bus.registry import Registry
from ateam.config import CONFIG_DIR, AgentConfig, ProjectConfig, agent_dir_for, load_project
from ateam.constants import PREVIOUS_EXIT_ENV
from ateam.errors import AteamError, Exit, SpawnFailed, file_to_move_aside
from ateam.paths import ateam_home, private_dir
from ateam.wire.registry import FinalExit

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
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
purpose, or cannot run until someone changes its configuration or the server's."""

UNLISTED_EXITS = frozenset({Exit.OK, Exit.DUPLICATE_INSTANCE})
"""Final exits ``ps`` need not list: stopped on purpose, or another instance runs (and
is listed itself)."""
PUBLISH_EXIT_TIMEOUT_S = 5.0
"""How long the supervisor tries to record a final exit on the bus before giving up."""

EXIT_FILE = "exit.json"
"""In an agent's ``state/``: how its last process under the supervisor ended."""

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


def start_agents(
    project: ProjectConfig, target: RedisTarget, *, redis_url: str | None = None
) -> tuple[list[str], AteamError | None]:
    """Start the project's supervisor (unless running) and wait until the agents serve.

    Returns a line per agent (started, or why not) and, when some did not come up, the
    error naming them. Each agent is waited for until it registers on the bus, exits
    for good, or :data:`START_TIMEOUT_S` pass.

    Raises:
        BusError: the bus cannot be used (unreachable, refused credentials or a
            permission, a policy that may evict keys); nothing was started.
    """
    asyncio.run(_check_bus(target))
    began = time.time()
    existing = supervisor_pid(project)
    since: float | None = None  # a running supervisor's records are all current
    if existing is None:
        existing = _start_supervisor(project, redis_url)
        since = began
    outcome = asyncio.run(_wait_up(target, project, existing, since))
    lines: list[str] = []
    failed: dict[str, str] = {}
    for agent in project.agents.values():
        log_path = agent.state_dir / "agent.log"
        result = outcome.get(agent.id)
        if isinstance(result, int):
            lines.append(f"{agent.id}: started (pid {result}, log {log_path})")
            continue
        if isinstance(result, AgentExit):
            failed[agent.id] = result.describe()
            lines.append(f"{agent.id}: FAILED, {result.describe()} (log {log_path})")
            continue
        why = (
            f"did not register within {START_TIMEOUT_S:g} s"
            if pid_is_running(existing)
            else f"its supervisor exited (see {_supervisor_log(project)})"
        )
        failed[agent.id] = why
        lines.append(f"{agent.id}: FAILED, {why}; last log lines:\n{_tail(log_path)}")
    if not failed:
        return lines, None
    names = ", ".join(sorted(failed))
    error = SpawnFailed(
        f"{len(failed)} of {len(project.agents)} agents of {project.name} did not come up: {names}",
        detail={"agents": failed},
    )
    return lines, error


def _supervisor_log(project: ProjectConfig) -> Path:
    return private_dir(ateam_home() / "run") / f"{project.name}.log"


def _start_supervisor(project: ProjectConfig, redis_url: str | None) -> int:
    root = project.root or Path.cwd()
    cmd = [sys.executable, "-m", "ateam.supervisor", str(root)]
    fd = os.open(_supervisor_log(project), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
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


async def _wait_up(
    target: RedisTarget, project: ProjectConfig, supervisor: int, since: float | None
) -> dict[str, int | AgentExit]:
    """Agent id → its pid once registered, or its exit if it ended before; absent: neither.

    An exit that will be restarted is remembered but not final: the agent may still
    register before the deadline. Records older than ``since`` belong to an earlier run,
    and so do registrations: one started before is another process with that identity
    (ours will exit 11), not the agent this supervisor started.
    """
    pending: dict[str, AgentConfig] = {agent.id: agent for agent in project.agents.values()}
    found: dict[str, int | AgentExit] = {}
    client = make_client(target)
    registry = Registry(client, Keys(target.namespace))
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        # Agents register themselves; there is no notice to wait on for "all of them".
        while pending and time.monotonic() < deadline:
            for view in await registry.list((project.name,)):
                ours = since is None or view.entry.started_at >= since
                if view.connected and view.id in pending and ours:
                    found[view.id] = view.entry.pid
                    del pending[view.id]
            _note_exits(pending, found, since)
            if not pid_is_running(supervisor):
                break
            await asyncio.sleep(0.1)
    except RedisError as exc:
        raise bus_error(exc) from exc
    finally:
        await client.aclose()
    # The supervisor records an exit just before it leaves: look once more.
    _note_exits(pending, found, since)
    return found


def _note_exits(
    pending: dict[str, AgentConfig], found: dict[str, int | AgentExit], since: float | None
) -> None:
    """Record the exits of pending agents; one that is final ends the wait for it."""
    for agent_id, agent in list(pending.items()):
        ended = read_exit(agent.state_dir)
        if ended is not None and (since is None or ended.at >= since):
            found[agent_id] = ended
            if ended.final:
                del pending[agent_id]


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


_NOTE = " supervisor: "
"""What marks the supervisor's own lines in an agent log."""


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
    notes = [i for i, line in enumerate(lines) if _NOTE in line]
    if notes:
        lines = lines[notes[-1] + 1 :]
    errors = [line for line in lines if line.startswith("error [")]
    return (errors or lines or ["no output"])[-1]


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
            ]  # no --redis: a URL reaches the agents in ATEAM_REDIS_URL (restart_env)
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
        ended = record_exit(child.log.parent, code, last_error_line(child.log))
        final = ended.final
        if final is not None:
            child.done = final
            self._note(child, f"exited with {code} ({final}); not restarting")
            if code not in UNLISTED_EXITS:
                self._publish_exit(child, ended)
            return
        delay, child.failures = restart_delay(child.failures, time.monotonic() - child.started)
        child.next_start = time.monotonic() + delay
        self._note(child, f"exited with {code}; restarting in {delay:g} s")

    def _spawn(self, child: _Child) -> None:
        with contextlib.suppress(OSError):  # the record is of a process that has ended
            (child.log.parent / EXIT_FILE).unlink(missing_ok=True)
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

    def _publish_exit(self, child: _Child, ended: AgentExit) -> None:
        agent = f"{self.project.name}/{child.name}"
        # No URL of its own: one given to `ateam up` is in ATEAM_REDIS_URL, read there.
        failed = publish_final_exit(agent, ended, redis_url=None, project=self.project)
        if failed is not None:
            self._note(child, failed)

    def _note(self, child: _Child, message: str) -> None:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')}{_NOTE}{child.name} {message}\n"
        with contextlib.suppress(OSError), open(child.log, "a", encoding="utf-8") as fh:
            fh.write(line)


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


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ateam.supervisor")
    parser.add_argument("root")
    parser.add_argument("--redis", help="prefer ATEAM_REDIS_URL: every user can read `ps`")
    args = parser.parse_args(argv)
    if args.redis:
        mask_own_title()
        os.environ["ATEAM_REDIS_URL"] = args.redis
    try:
        project = load_project(Path(args.root))
    except AteamError as exc:
        print(exc.one_line(), file=sys.stderr)
        return Exit.CONFIG_INVALID
    return Supervisor(project).run()


if __name__ == "__main__":
    sys.exit(main())
