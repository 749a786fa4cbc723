"""Factory fixtures that run real ``ateam`` processes against a real ``redis-server``.

Every process is started as ``python -m ateam …`` with the test's isolated ``ATEAM_HOME``
(see the autouse ``isolated_home`` fixture) and, unless a test says otherwise, with
``--redis`` pointing at the test's own Redis (``own_redis``), so each test has a bus of
its own and may restart it. Everything a factory started is killed at teardown.

Waits are on an observable condition (a registry entry, an output line, an event on the
stream), through :mod:`tests._wait` where nothing notifies, never fixed sleeps.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from tests._wait import wait_for

START_TIMEOUT_S = 20.0
"""Deadline for a process to come up; generous because 2 cores may be busy."""
KEYS = Keys()
"""The CLI uses the default namespace unless a project says otherwise."""


# --- helpers ----------------------------------------------------------------------------


def ateam_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ateam", *args]


def subprocess_env(**overrides: str) -> dict[str, str]:
    """The environment of a child: this test's ATEAM_HOME / ATEAM_RUNTIME_DIR, no URL."""
    env = dict(os.environ)
    env.pop("ATEAM_REDIS_URL", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(overrides)
    return env


def run_ateam(
    *args: str,
    input: str | None = None,
    timeout: float = 30.0,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one short-lived ``ateam`` command to completion."""
    return subprocess.run(
        ateam_cmd(*args),
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env or subprocess_env(),
    )


def write_project(
    root: Path, name: str, *, agents: tuple[str, ...] = ("zeus",), delay_ms: int = 50
) -> Path:
    """A project whose agents use ``slowecho``: the echo model, one word per ``delay_ms``."""
    ateam_dir = root / ".ateam"
    (ateam_dir / "agents").mkdir(parents=True)
    (ateam_dir / "project.yaml").write_text(f"name: {name}\n")
    (ateam_dir / "models.yaml").write_text(
        "models:\n"
        "  - id: slowecho\n"
        "    provider: echo\n"
        f"    settings: {{token_delay_ms: {delay_ms}}}\n"
    )
    for agent in agents:
        (ateam_dir / "agents" / agent).mkdir()
        (ateam_dir / "agents" / agent / "agent.yaml").write_text("model: slowecho\n")
    return root


# --- the bus, seen from the test ----------------------------------------------------------


@dataclass
class Bus:
    """Synchronous read access to one Redis, in the CLI's default namespace."""

    url: str
    client: redis.Redis = field(init=False)

    def __post_init__(self) -> None:
        self.client = redis.Redis.from_url(self.url)

    def entry(self, agent: str) -> dict[str, Any] | None:
        raw = self.client.hget(KEYS.registry(agent.partition("/")[0]), agent)
        return unpack(raw) if raw is not None else None  # type: ignore[arg-type]

    def serving(self, agent: str, pid: int) -> dict[str, Any] | None:
        """The registry entry if process ``pid`` is the one serving ``agent``."""
        entry = self.entry(agent)
        if entry is None or entry.get("pid") != pid or entry.get("state") not in ("idle", "busy"):
            return None
        if not self.client.exists(KEYS.alive(agent)):
            return None
        return entry

    def events(self, agent: str) -> list[tuple[int, dict[str, Any]]]:
        """Every retained event of ``agent`` as (offset, body), oldest first."""
        out = []
        for entry_id, fields in self.client.xrange(KEYS.events(agent)):
            out.append((int(entry_id.split(b"-")[0]), unpack(fields[b"d"])))
        return out

    def task_ends(self, agent: str) -> dict[str, dict[str, Any]]:
        return {
            str(body["task_id"]): body
            for _, body in self.events(agent)
            if body.get("type") == "task.end"
        }

    def task_end_list(self, agent: str) -> list[dict[str, Any]]:
        """Every ``task.end`` in offset order (a re-run task ends more than once)."""
        return [body for _, body in self.events(agent) if body.get("type") == "task.end"]

    def wait_streaming(self, agent: str, timeout: float = 10.0) -> None:
        """Until the agent has published at least one model token."""
        wait_for(
            lambda: any(b.get("type") == "token" for _, b in self.events(agent)),
            timeout,
            f"{agent} to stream",
        )

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def redis_url(own_redis: Any) -> str:
    """URL of this test's own redis-server (restartable with ``own_redis.restart()``)."""
    return str(own_redis.url)


@pytest.fixture
def target(redis_url: str) -> RedisTarget:
    """Integration tests talk to their own restartable Redis, in the CLI's namespace."""
    return RedisTarget(redis_url, "test")


@pytest.fixture
def bus(own_redis: Any) -> Iterator[Bus]:
    b = Bus(own_redis.url)
    yield b
    b.close()


# --- agents ---------------------------------------------------------------------------------


@dataclass
class AgentProcess:
    """One ``ateam agent`` child process."""

    agent_id: str
    args: list[str]
    proc: subprocess.Popen[bytes]
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_exit(self, timeout: float = START_TIMEOUT_S) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.agent_id} (pid {self.pid}) still running after {timeout:g}s;\n"
                f"stderr:\n{self.stderr()}"
            ) from None

    def kill9(self) -> None:
        """SIGKILL, and reap it so the pid is really gone."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM: the agent's graceful shutdown."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)


AgentFactory = Callable[..., AgentProcess]


@pytest.fixture
def start_agent(own_redis: Any, bus: Bus, tmp_path: Path) -> Iterator[AgentFactory]:
    """``start_agent("proj/name", cwd=None, wait=True, redis_url=None)`` → AgentProcess.

    With ``wait`` the call returns once the process is in the registry, heartbeating,
    and idle or busy; a process that exits first fails the test with its stderr.
    """
    started: list[AgentProcess] = []
    logs = tmp_path / "agent-logs"
    logs.mkdir()

    def start(
        agent_id: str,
        *,
        cwd: Path | None = None,
        wait: bool = True,
        redis_url: str | None = None,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> AgentProcess:
        project, name = agent_id.split("/")
        args = ateam_cmd(
            "agent", "--project", project, "--name", name,
            "--redis", redis_url or own_redis.url, "--no-repl", *extra,
        )  # fmt: skip
        stderr_path = logs / f"{project}-{name}-{len(started)}.stderr"
        with stderr_path.open("wb") as err:
            proc = subprocess.Popen(
                args,
                cwd=cwd or tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=subprocess_env(**(env or {})),
            )
        agent = AgentProcess(agent_id, args, proc, stderr_path)
        started.append(agent)
        if wait:
            wait_serving(bus, agent)
        return agent

    yield start
    for agent in started:
        if agent.running():
            agent.kill9()


def wait_serving(bus: Bus, agent: AgentProcess, timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        if not agent.running():
            raise AssertionError(
                f"{agent.agent_id} exited with {agent.proc.returncode} before serving;\n"
                f"stderr:\n{agent.stderr()}"
            )
        return bus.serving(agent.agent_id, agent.pid)

    return wait_for(ready, timeout, f"{agent.agent_id} (pid {agent.pid}) to serve")


# --- consoles -------------------------------------------------------------------------------


_SESSION = re.compile(r"^\*\*\* connected to .* as (\S+); /help")


class ConsoleProcess:
    """An ``ateam console --no-ui`` child with its stdin kept open for commands.

    A reader thread collects its stdout line by line so tests can wait for a line.
    """

    def __init__(self, proc: subprocess.Popen[str], stderr_path: Path) -> None:
        self.proc = proc
        self.stderr_path = stderr_path
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_line(
        self, match: str | Callable[[str], bool], timeout: float = START_TIMEOUT_S
    ) -> str:
        """The first line containing ``match`` (or satisfying it, if callable)."""
        test = match if callable(match) else (lambda line: match in line)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if test(line):
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"console never printed {match!r} within {timeout:g}s; output:\n"
                        + "\n".join(self.lines)
                        + f"\nstderr:\n{self.stderr_path.read_text(errors='replace')}"
                    )
                self._cond.wait(min(remaining, 0.1))

    @property
    def session(self) -> str:
        line = self.wait_line(lambda text: bool(_SESSION.match(text)))
        found = _SESSION.match(line)
        assert found is not None
        return found.group(1)

    def wait_exit(self, timeout: float = START_TIMEOUT_S) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"console still running after {timeout:g}s; output:\n{self.output()}"
            ) from None
        self._reader.join(5)
        return code

    def kill9(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)


ConsoleFactory = Callable[..., ConsoleProcess]


@pytest.fixture
def start_console(own_redis: Any, tmp_path: Path) -> Iterator[ConsoleFactory]:
    """``start_console(redis_url=None, env=None)`` → a plain console waiting for commands."""
    started: list[ConsoleProcess] = []
    logs = tmp_path / "console-logs"
    logs.mkdir()

    def start(*, redis_url: str | None = None, env: dict[str, str] | None = None) -> ConsoleProcess:
        args = ateam_cmd("console", "--no-ui")
        if redis_url != "":
            args += ["--redis", redis_url or own_redis.url]
        stderr_path = logs / f"console-{len(started)}.stderr"
        with stderr_path.open("wb") as err:
            proc = subprocess.Popen(
                args,
                cwd=tmp_path,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env or subprocess_env(),
            )
        console = ConsoleProcess(proc, stderr_path)
        started.append(console)
        return console

    yield start
    for console in started:
        console.close_stdin()
        if console.proc.poll() is None:
            console.kill9()
        if console.proc.stdout is not None:
            console.proc.stdout.close()


def attach_and_send(console: ConsoleProcess, agent: str, *texts: str) -> None:
    """Attach ``console`` as the writer of ``agent`` and type each of ``texts``."""
    console.send(f"/attach {agent}")
    console.wait_line(lambda line: f"attached to {agent}" in line)
    for text in texts:
        console.send(text)


def write_scripted_project(
    root: Path,
    name: str,
    turns: list[dict[str, Any]],
    *,
    agent: str = "zeus",
    allow: tuple[str, ...] = ("os.exec",),
    agent_yaml: dict[str, Any] | None = None,
    token_delay_ms: int = 0,
) -> Path:
    """A project whose agent replays ``turns`` with the ``scripted`` provider (SPEC §7)."""
    import yaml

    ateam_dir = root / ".ateam"
    (ateam_dir / "agents" / agent).mkdir(parents=True)
    (ateam_dir / "project.yaml").write_text(f"name: {name}\n")
    (ateam_dir / "models.yaml").write_text(
        "models:\n  - id: script\n    provider: scripted\n    script: script.yaml\n"
    )
    (ateam_dir / "script.yaml").write_text(
        yaml.safe_dump({"turns": turns, "token_delay_ms": token_delay_ms})
    )
    spec: dict[str, Any] = {"model": "script", "tools": {"allow": list(allow)}}
    for key, value in (agent_yaml or {}).items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    (ateam_dir / "agents" / agent / "agent.yaml").write_text(yaml.safe_dump(spec))
    return root


ACP_AGENT = Path(__file__).resolve().parent.parent / "acp_agent.py"
"""The scriptable ACP agent (``tests/acp_agent.py``): a coding agent ateam's tests drive."""


@dataclass
class AcpProject:
    """A project whose agent is the ACP test agent (``models.yaml`` ``provider: acp``)."""

    root: Path
    script: Path
    state: Path
    """The test agent's own state (the script's position, its sessions)."""
    log: Path
    """Everything ateam sent the test agent, one JSON line each."""

    def sent(self, method: str | None = None) -> list[dict[str, Any]]:
        """What the runtime received (``method`` only, if given), oldest first."""
        import json

        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [line for line in lines if method is None or line.get("method") == method]


def write_acp_project(
    root: Path,
    name: str,
    script: dict[str, Any],
    *,
    agent: str = "zeus",
    agent_yaml: dict[str, Any] | None = None,
    entry: dict[str, Any] | None = None,
    extra_models: list[dict[str, Any]] | None = None,
) -> AcpProject:
    """A project whose agent runs the ACP test agent with ``script`` (see tests/acp_agent.py)."""
    import yaml

    ateam_dir = root / ".ateam"
    (ateam_dir / "agents" / agent).mkdir(parents=True, exist_ok=True)
    (ateam_dir / "project.yaml").write_text(f"name: {name}\n")
    runtime_dir = root / "runtime"
    runtime_dir.mkdir(exist_ok=True)
    project = AcpProject(
        root,
        runtime_dir / "script.yaml",
        runtime_dir / "state.json",
        runtime_dir / "sent.jsonl",
    )
    project.script.write_text(yaml.safe_dump(script))
    command = [
        sys.executable, str(ACP_AGENT), str(project.script),
        "--state", str(project.state), "--log", str(project.log),
    ]  # fmt: skip
    model = {"id": "coder", "provider": "acp", "command": command, **(entry or {})}
    models = {"models": [model, *(extra_models or [])]}
    (ateam_dir / "models.yaml").write_text(yaml.safe_dump(models))
    spec: dict[str, Any] = {"model": "coder", "tools": {"allow": ["os.exec", "fs.*"]}}
    for key, value in (agent_yaml or {}).items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    (ateam_dir / "agents" / agent / "agent.yaml").write_text(yaml.safe_dump(spec))
    return project


def write_waiting_project(root: Path, name: str) -> Path:
    """A scripted ``NAME/zeus`` that proposes an ``fs.patch`` of ``a.py`` and so waits."""
    import hashlib

    base = hashlib.sha256(b"a = 1\n").hexdigest()
    call = {"name": "fs.patch", "args": {"path": "a.py", "content": "a = 2\n", "base_sha256": base}}
    write_scripted_project(root, name, [{"text": "May I?", "tool_calls": [call]}], allow=("fs.*",))
    (root / "a.py").write_text("a = 1\n")
    return root


def history_turns(root: Path, agent: str = "zeus") -> list[dict[str, Any]]:
    """The agent's ``state/history.jsonl`` as a list of turns."""
    import json

    path = root / ".ateam" / "agents" / agent / "state" / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def group_alive(pgid: int) -> list[int]:
    """Pids whose process group is ``pgid`` (zombies count as gone)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 3 is the state, field 5 the pgrp; the command name may contain spaces.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry.name))
    return alive


# --- the embedded server ------------------------------------------------------------------


@pytest.fixture
def embedded_env(isolated_home: Path) -> Iterator[dict[str, str]]:
    """No --redis and no ATEAM_REDIS_URL, so ateam starts its embedded server.

    The runtime directory is short enough for a unix socket path. On teardown every
    supervisor ``ateam up`` left is stopped (it stops its agents), then the server.
    """
    import json
    import shutil
    import tempfile

    from ateam._proc import pid_is_running

    runtime = tempfile.mkdtemp(prefix="at", dir="/tmp")
    env = subprocess_env(ATEAM_RUNTIME_DIR=runtime)
    yield env
    for pid_file in (isolated_home / "run").glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            for pid in json.loads(pid_file.read_text()).values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGTERM)
                    wait_for(lambda p=int(pid): not pid_is_running(p), 20, "supervisor to exit")
    run_ateam("server", "stop", env=env)
    shutil.rmtree(runtime, ignore_errors=True)


def embedded_ps(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """``ateam ps --json`` as a mapping of agent id to row."""
    import json

    result = run_ateam("ps", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return {str(row["id"]): row for row in json.loads(result.stdout)}
