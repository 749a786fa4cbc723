"""Growing the team from a console: local spawns, worktrees, the remote line.

A local spawn runs ``ateam agent`` under a *keeper*, a small process of its own session
(closing the console stops nothing) that appends the agent's output to the agent's
``state/agent.log`` and restarts the agent when it dies, with the backoff of the project
supervisor (:mod:`ateam.supervisor`) — except after the exits that supervisor treats as
final (stopped on purpose, duplicate identity, invalid configuration, Redis refusing its
credentials or a permission, a Redis that may evict keys, a state file damaged beyond
repair). Such an exit is recorded as the supervisor records it (``state/exit.json`` and,
for ``ps``, the bus). ``/stop`` ends the agent with exit 0, so its keeper leaves with it.

Run as ``python -m ateam.fleet --log LOG -- COMMAND…``, this module is that keeper.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from ateam._cmdline import bus_environment
from ateam._fs import atomic_write
from ateam.agent.runtime.main import FIRST_TASK_PRIORITY, Seed, agent_config_for, seed_agent
from ateam.config import CONFIG_DIR, AgentConfig, ProjectConfig, load_project
from ateam.config.schema import AgentSpec
from ateam.errors import AteamError, DetachedHead, GitError, SpawnFailed, UsageError
from ateam.supervisor import (
    FINAL_EXITS,
    HEALTHY_AFTER_S,
    KEEPER_PID_FILE,
    RESTART_BACKOFF_S,
    STOP_TIMEOUT_S,
    UNLISTED_EXITS,
    last_error_line,
    publish_final_exit,
    record_exit,
    restart_env,
)
from ateam.worktrees import Repository, agent_branch, ensure_worktree, worktree_path

# Seed, seed_agent, agent_config_for and FIRST_TASK_PRIORITY are what `ateam agent` starts
# with, so they live in ateam.agent.runtime.main; spawns and offloads still find them here.
__all__ = [
    "FIRST_TASK_PRIORITY",
    "Seed",
    "SpawnRequest",
    "Worktree",
    "add_worktree",
    "agent_config_for",
    "create_agent_dir",
    "last_log_line",
    "parent_agent_yaml",
    "plan_worktree",
    "remote_command",
    "seed_agent",
    "start_kept",
]

GIT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SpawnRequest:
    """One agent to start: who it is, where it works and which model it uses."""

    project: str
    """Project the agent joins."""
    name: str
    """Agent name within the project."""
    cwd: Path
    """Absolute working directory of the agent."""
    model: str | None = None
    """A model id to pin, or ``None`` for the agent's configured model."""

    @property
    def agent_id(self) -> str:
        """``project/name``."""
        return f"{self.project}/{self.name}"


def create_agent_dir(
    agents_dir: Path, name: str, spec: dict[str, object], *, base_prompt: str | None = None
) -> Path:
    """Create ``agents_dir/NAME/agent.yaml`` from ``spec`` (validated) for a new agent.

    Raises:
        UsageError: the directory exists, or ``spec`` is not a valid ``agent.yaml``.
        SpawnFailed: the files could not be written.
    """
    try:
        AgentSpec.model_validate(spec)
    except ValueError as exc:
        first = str(exc).splitlines()
        raise UsageError(f"invalid agent.yaml for {name}: {' '.join(first[1:3]).strip()}") from None
    directory = agents_dir / name
    if directory.exists():
        raise UsageError(f"{directory} already exists; pick another agent name")
    text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
    try:
        directory.mkdir(parents=True, mode=0o700)
        atomic_write(directory / "agent.yaml", text.encode("utf-8"), mode=0o600)
        if base_prompt:
            atomic_write(directory / "system_base.md", base_prompt.encode("utf-8"), mode=0o600)
    except OSError as exc:
        raise SpawnFailed(f"cannot create {directory}: {exc.strerror}") from None
    return directory


def parent_agent_yaml(parent: AgentConfig) -> dict[str, object]:
    """The parent's ``agent.yaml`` as a mapping (``{}`` for an unconfigured agent)."""
    if parent.source is None:
        return {}
    try:
        data = yaml.safe_load(parent.source.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return dict(data) if isinstance(data, dict) else {}


# worktrees -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Worktree:
    """A git worktree planned (or made) for a spawned agent."""

    repo: Path
    """Top level of the repository it is a worktree of."""
    path: Path
    """The new worktree's directory."""
    branch: str
    """The new branch checked out in it (``ateam/NAME``)."""
    cwd: Path
    """The agent's working directory: the same place inside the repository as asked for."""


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise UsageError("--worktree needs git, and git is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise SpawnFailed(f"git {args[0]} took longer than {GIT_TIMEOUT_S:g} s") from None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def plan_worktree(cwd: Path, name: str, project_root: Path | None) -> Worktree:
    """Where the worktree of ``cwd``'s repository for agent ``name`` goes; changes nothing.

    Inside the project's ``.ateam/worktrees/NAME`` when the project's root lies in the
    repository, so the agent finds the same configuration there; otherwise beside the
    repository as ``<repo>-NAME``.

    Raises:
        UsageError: ``cwd`` is not in a git repository, or the branch or directory exists.
    """
    found = _git(cwd, "rev-parse", "--show-toplevel")
    if found.returncode != 0:
        raise UsageError(f"{cwd} is not inside a git repository; --worktree needs one")
    repo = Path(found.stdout.strip()).resolve()
    inside = cwd.resolve().relative_to(repo)
    if project_root is not None and (project_root == repo or repo in project_root.parents):
        path = project_root / CONFIG_DIR / "worktrees" / name
    else:
        path = repo.parent / f"{repo.name}-{name}"
    branch = agent_branch(name)
    if path.exists():
        raise UsageError(f"{path} already exists; pick another agent name or remove it")
    if _git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}").returncode == 0:
        raise UsageError(f"branch {branch} already exists in {repo}; pick another agent name")
    return Worktree(repo=repo, path=path, branch=branch, cwd=path / inside)


def add_worktree(plan: Worktree) -> None:
    """``git worktree add -b BRANCH PATH`` at the repository's ``HEAD``.

    In the project's own ``.ateam/worktrees/`` with a branch checked out (the usual case),
    :mod:`ateam.worktrees` makes it and records that branch as its base, so the agent's
    work is one that ``ateam diff`` and ``ateam merge`` know.

    Raises:
        SpawnFailed: git refused (no commit yet, a race on the branch, ...).
    """
    if plan.path == worktree_path(plan.repo, plan.branch):
        try:
            repo = Repository.open(plan.repo)
            if repo.root == plan.repo:
                ensure_worktree(repo, plan.branch, repo.current_branch())
                return
        except DetachedHead:
            pass  # no branch to record as its base: an ordinary worktree at HEAD, as before
        except GitError as exc:
            raise SpawnFailed(f"git worktree add failed: {exc.message}") from None
    parent = plan.path.parent
    if parent.name == "worktrees" and parent.parent.name == CONFIG_DIR:
        parent.mkdir(parents=True, exist_ok=True)
        ignore = parent / ".gitignore"
        if not ignore.exists():
            # The worktrees sit inside the main checkout: keep them out of its `git status`.
            ignore.write_text("*\n", encoding="utf-8")
    done = _git(plan.repo, "worktree", "add", "-b", plan.branch, str(plan.path))
    if done.returncode != 0:
        raise SpawnFailed(f"git worktree add failed: {_last_line(done.stderr)}")


# starting ----------------------------------------------------------------------------------


def agent_command(request: SpawnRequest) -> list[str]:
    """The ``ateam agent`` command line for ``request``, run by this Python.

    It holds no Redis URL: that travels in the environment (:func:`bus_environment`), out
    of every other user's ``ps``.
    """
    cmd = [
        sys.executable, "-m", "ateam", "agent",
        "--project", request.project, "--name", request.name,
        "--cwd", str(request.cwd), "--no-repl",
    ]  # fmt: skip
    if request.model:
        cmd += ["--model", request.model]
    return cmd


def start_kept(
    request: SpawnRequest, *, log: Path, redis_url: str | None
) -> subprocess.Popen[bytes]:
    """Start the agent under a detached keeper; returns the keeper's process.

    The keeper leads a new session (and process group), so signals to the console's
    terminal never reach it; its output and the agent's are appended to ``log``.
    ``redis_url`` is passed on in ``ATEAM_REDIS_URL`` (``None``: the agent resolves the
    bus itself, e.g. the embedded server).
    """
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    keeper = [sys.executable, "-m", "ateam.fleet", "--log", str(log), "--"]
    try:
        return subprocess.Popen(
            keeper + agent_command(request),
            cwd=request.cwd,
            env=bus_environment(redis_url),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
        )
    except OSError as exc:
        raise SpawnFailed(f"cannot start {request.agent_id}: {exc.strerror}") from None
    finally:
        os.close(fd)


def remote_command(request: SpawnRequest, *, redis_url: str, token: str, with_cwd: bool) -> str:
    """The one line to run on another host: ``ateam agent … --bootstrap TOKEN``."""
    words = ["ateam", "agent", "--project", request.project, "--name", request.name]
    if with_cwd:
        words += ["--cwd", str(request.cwd)]
    if request.model:
        words += ["--model", request.model]
    words += ["--redis", redis_url, "--bootstrap", token]
    return shlex.join(words)


def last_log_line(log: Path) -> str:
    """The newest non-empty line of an agent log, for one-line failure messages."""
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - 4096))
            return _last_line(handle.read().decode("utf-8", "replace"))
    except OSError:
        return "no log"


# the keeper -------------------------------------------------------------------------------


class _Keeper:
    """Runs one command until it exits on purpose; SIGTERM is passed on, then obeyed."""

    def __init__(self, cmd: list[str], log: Path) -> None:
        self.cmd = cmd
        self.log = log
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False

    def _on_term(self, signum: int, frame: object) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(signal.SIGTERM)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        failures = 0
        code: int | None = None
        while not self.stopping:
            started = time.monotonic()
            # stdout/stderr are inherited: the agent writes to the same log as the keeper.
            self.child = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, env=restart_env(code))
            if self.stopping:  # SIGTERM came between the loop's check and the start
                self.child.send_signal(signal.SIGTERM)
            code = self.child.wait()
            if self.stopping:
                break
            final = FINAL_EXITS.get(code)
            if final is not None:
                _note(f"agent exited with {code} ({final}); not restarting")
                if code not in UNLISTED_EXITS:
                    self._record(code)
                return code
            if time.monotonic() - started > HEALTHY_AFTER_S:
                failures = 0
            delay = RESTART_BACKOFF_S[min(failures, len(RESTART_BACKOFF_S) - 1)]
            failures += 1
            _note(f"agent exited with {code}; restarting in {delay:g} s")
            deadline = time.monotonic() + delay
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(0.05)
        self._finish()
        return 0

    def _record(self, code: int) -> None:
        """Record a final exit as the supervisor does, so ``ps`` lists the agent."""
        ended = record_exit(self.log.parent, code, last_error_line(self.log))
        option = _options(self.cmd, "--project", "--name", "--redis")
        if option["--project"] is None or option["--name"] is None:
            return  # not an `ateam agent` command line: nothing to name in ps
        try:
            project: ProjectConfig | None = load_project(Path.cwd())
        except AteamError:
            project = None  # its tools.yaml cannot be read: the URL given is all there is
        if project is not None and project.name != option["--project"]:
            project = None  # another project's transport is not this agent's
        agent = f"{option['--project']}/{option['--name']}"
        failed = publish_final_exit(agent, ended, redis_url=option["--redis"], project=project)
        if failed is not None:
            _note(failed)

    def _finish(self) -> None:
        child = self.child
        if child is None or child.poll() is not None:
            return
        try:
            child.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _options(cmd: list[str], *names: str) -> dict[str, str | None]:
    """The values of ``names`` (``--flag VALUE``) in a command line; ``None`` if absent."""
    found: dict[str, str | None] = dict.fromkeys(names)
    for flag, value in itertools.pairwise(cmd):
        if flag in found:
            found[flag] = value
    return found


def _note(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} keeper: {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m ateam.fleet --log LOG -- COMMAND…``: keep COMMAND running."""
    parser = argparse.ArgumentParser(prog="python -m ateam.fleet")
    parser.add_argument("--log", required=True, help="the agent log (for people reading ps)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        parser.error("no command to keep")
    # Beside the log, in the agent's state/: how `ateam up --down` finds this keeper.
    pid_file = Path(args.log).parent / KEEPER_PID_FILE
    with contextlib.suppress(OSError):
        atomic_write(pid_file, f"{os.getpid()}\n".encode(), mode=0o600)
    try:
        return _Keeper(cmd, Path(args.log)).run()
    finally:
        with contextlib.suppress(OSError, ValueError):
            if int(pid_file.read_text()) == os.getpid():
                pid_file.unlink()


if __name__ == "__main__":
    sys.exit(main())
