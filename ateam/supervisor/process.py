"""The supervisor process: ``python -m ateam.supervisor ROOT [NAME…]``.

One per project, in a session of its own (closing a terminal stops nothing). It runs the
named agents (every configured one when none is named), appends each one's output to its
``state/agent.log``, and restarts one that died with the backoff of
:func:`~ateam.supervisor.exits.restart_delay` — never after a final exit
(:data:`~ateam.supervisor.exits.FINAL_EXITS`), which it records in the agent's
``state/exit.json`` and on the bus for ``ps``.

Between rounds it takes the start requests of ``ateam start``, ``restart`` and ``up``
(:mod:`ateam.supervisor.control`): an agent added to ``.ateam/agents/`` since is read
from the configuration then, and one that stopped or whose configuration was fixed is
started again. It leaves once every agent it runs has ended for good, or on SIGTERM,
which it passes on to each agent (their graceful shutdown).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ateam._cmdline import mask_own_title
from ateam._fs import atomic_write
from ateam.config import ProjectConfig, load_project
from ateam.errors import AteamError
from ateam.exits import Exit
from ateam.supervisor.control import agents_file, pid_file, take_requests
from ateam.supervisor.exits import (
    NOTE,
    UNLISTED_EXITS,
    AgentExit,
    last_error_line,
    publish_final_exit,
    record_exit,
    restart_delay,
    restart_env,
)

__all__ = ["AGAIN_WINDOW_S", "STOP_TIMEOUT_S", "Supervisor", "main"]

STOP_TIMEOUT_S = 15.0
"""How long an agent is given to shut down gracefully before it is killed."""
AGAIN_WINDOW_S = 20.0
"""A start asked for while the agent's process still runs (a stop under way, or a start
not yet registered) is kept this long: if the process ends within it, whatever its
exit, the agent is started again at once."""
ROUND_S = 0.2
"""Between two rounds of the loop: how soon an exit or a request is seen."""


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
    again_until: float = 0.0
    """Until then (monotonic), an exit of the running process is followed by a start."""


def _agent_command(project: str, name: str) -> list[str]:
    # No --redis: a URL reaches the agents in ATEAM_REDIS_URL (restart_env).
    return [
        sys.executable, "-m", "ateam", "agent",
        "--project", project, "--name", name, "--no-repl",
    ]  # fmt: skip


@dataclass
class Supervisor:
    """Keeps some agents of one project running until told to stop.

    Args:
        project: the project's configuration.
        only: the agent names to run (default: every configured agent).
    """

    project: ProjectConfig
    only: tuple[str, ...] | None = None
    children: list[_Child] = field(default_factory=list)
    stopping: bool = False
    running: bool = False
    """Set once :meth:`run` has written the pid file (which names the children)."""

    def __post_init__(self) -> None:
        for name in self.project.agents:
            if self.only is None or name in self.only:
                self._adopt(name)

    def _adopt(self, name: str) -> _Child:
        """A child for configured agent ``name``, its state directory made."""
        agent = self.project.agents[name]
        agent.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        child = _Child(name, agent.state_dir / "agent.log", _agent_command(self.project.name, name))
        self.children.append(child)
        if self.running:
            self._write_agents_file()
        return child

    def _write_agents_file(self) -> None:
        """The agents it runs: what ``ateam down`` reports as stopped."""
        names = [child.name for child in self.children]
        atomic_write(agents_file(self.project), json.dumps(names).encode())

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        self._write_agents_file()
        atomic_write(pid_file(self.project), json.dumps({"supervisor": os.getpid()}).encode())
        self.running = True
        try:
            while not self.stopping:
                self._take_requests()
                for child in self.children:
                    self._tend(child)
                if all(child.done for child in self.children):
                    self._take_requests()  # one that came in meanwhile keeps it going
                    if all(child.done for child in self.children):
                        break
                time.sleep(ROUND_S)
            self._stop_all()
        finally:
            for done in (pid_file(self.project), agents_file(self.project)):
                with contextlib.suppress(FileNotFoundError):
                    done.unlink()
        return 0

    def _on_term(self, signum: int, frame: object) -> None:
        self.stopping = True

    # requests ------------------------------------------------------------------------

    def _take_requests(self) -> None:
        for names in take_requests(self.project):
            for name in names:
                self._start_asked(name)

    def _start_asked(self, name: str) -> None:
        """``ateam start NAME``: run it now, or again once its ending process is gone."""
        child = next((c for c in self.children if c.name == name), None)
        if child is None:
            if name not in self.project.agents:
                self._reload()  # added to .ateam/agents/ since this supervisor started
            if name not in self.project.agents:
                print(f"supervisor: no agent {name} is configured; not started", flush=True)
                return
            child = self._adopt(name)
        if child.proc is not None and child.proc.poll() is None:
            child.again_until = time.monotonic() + AGAIN_WINDOW_S
            return
        self._tend(child)  # an exit not looked at yet is recorded first
        child.done = None
        child.failures = 0
        child.next_start = 0.0

    def _reload(self) -> None:
        try:
            self.project = load_project(root=self.project.root or Path.cwd())
        except AteamError as exc:
            print(f"supervisor: cannot read the configuration: {exc.one_line()}", flush=True)

    # the agents ----------------------------------------------------------------------

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
        if time.monotonic() < child.again_until:
            # Asked to start while this process was ending: its exit is not the last word.
            child.again_until = 0.0
            child.failures = 0
            child.next_start = 0.0
            self._note(child, f"exited with {code}; starting it again as asked")
            return
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
            (child.log.parent / "exit.json").unlink(missing_ok=True)
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
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')}{NOTE}{child.name} {message}\n"
        with contextlib.suppress(OSError), open(child.log, "a", encoding="utf-8") as fh:
            fh.write(line)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ateam.supervisor")
    parser.add_argument("root", help="the project's directory (where its .ateam/ is)")
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these agents")
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
    return Supervisor(project, tuple(args.names) or None).run()
