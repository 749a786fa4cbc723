"""What a project's supervisor leaves for others to find it by, and how it is asked things.

Under ``~/.ateam/run/`` (private to the user):

* ``<project>.json``: the supervisor's pid (``{"supervisor": PID}``), while it runs;
* ``<project>.agents``: the names of the agents it runs, a JSON list;
* ``<project>.log``: its own output;
* ``<project>.requests/``: one JSON file per request to start agents
  (``{"start": [NAME, …]}``), written atomically by ``ateam start``, ``restart`` and
  ``up`` and taken (read, then deleted) by the supervisor's loop. A file is a request
  that survives the supervisor being busy, and one that nobody took tells the writer the
  supervisor ended first.

Agents a console started run under keepers (:mod:`ateam.fleet`), whose pid is in the
agent's ``state/keeper.pid``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from ateam._fs import atomic_write
from ateam._proc import pid_is_running
from ateam.config import CONFIG_DIR, ProjectConfig, agent_dir_for
from ateam.paths import ateam_home, private_dir

__all__ = [
    "KEEPER_PID_FILE",
    "Request",
    "agents_file",
    "keeper_pid",
    "pid_file",
    "project_keepers",
    "request_start",
    "supervised",
    "supervisor_log",
    "supervisor_pid",
    "take_requests",
]

KEEPER_PID_FILE = "keeper.pid"
"""In an agent's ``state/``: the pid of the keeper a console started it under."""


def _run_dir() -> Path:
    return private_dir(ateam_home() / "run")


def pid_file(project: ProjectConfig) -> Path:
    return _run_dir() / f"{project.name}.json"


def supervisor_log(project: ProjectConfig) -> Path:
    return _run_dir() / f"{project.name}.log"


def _requests_dir(project: ProjectConfig) -> Path:
    return private_dir(_run_dir() / f"{project.name}.requests")


def supervisor_pid(project: ProjectConfig) -> int | None:
    """The pid of the project's running supervisor, if one runs on this host."""
    return _supervisor(project)


def agents_file(project: ProjectConfig) -> Path:
    return _run_dir() / f"{project.name}.agents"


def supervised(project: ProjectConfig) -> list[str]:
    """The names of the agents the project's running supervisor runs (none: no supervisor)."""
    if _supervisor(project) is None:
        return []
    try:
        names = json.loads(agents_file(project).read_text())
    except (OSError, ValueError):
        return []
    return [name for name in names if isinstance(name, str)] if isinstance(names, list) else []


def _supervisor(project: ProjectConfig) -> int | None:
    try:
        data = json.loads(pid_file(project).read_text())
    except (OSError, ValueError):
        return None
    pid = data.get("supervisor") if isinstance(data, dict) else None
    if not isinstance(pid, int) or not pid_is_running(pid):
        return None
    # After a reboot or a kill -9 the pid may belong to something else: never signal it.
    return pid if _runs(pid, b"ateam.supervisor") else None


def _runs(pid: int, module: bytes) -> bool:
    """Whether process ``pid`` runs ``python -m MODULE`` (true where /proc cannot say)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: the liveness check is all there is
    return module in cmdline


# requests --------------------------------------------------------------------------------


class Request:
    """One request file: the agents to start, and whether the supervisor took it yet."""

    def __init__(self, path: Path, names: list[str]) -> None:
        self.path = path
        self.names = names

    def withdraw(self) -> bool:
        """Take it back; ``True`` if it was still pending (so nobody will act on it)."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True


def request_start(project: ProjectConfig, names: Iterable[str]) -> Request:
    """Ask the project's supervisor to start ``names`` (agent names of the project).

    The supervisor starts each one that has no process now, and each whose process is
    on its way out (a stop just asked for) again once it has ended.
    """
    wanted = sorted(set(names))
    stamp = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(3)}"
    path = _requests_dir(project) / f"{stamp}.json"
    atomic_write(path, json.dumps({"start": wanted}).encode(), mode=0o600)
    return Request(path, wanted)


def take_requests(project: ProjectConfig) -> Iterator[list[str]]:
    """Each pending request's agent names, oldest first; each file is gone once yielded.

    A file that is not a request (torn, foreign) is deleted and skipped.
    """
    for path in sorted(_requests_dir(project).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = None
        with contextlib.suppress(OSError):
            path.unlink()
        names = data.get("start") if isinstance(data, dict) else None
        if isinstance(names, list):
            yield [name for name in names if isinstance(name, str)]


# keepers ---------------------------------------------------------------------------------


def keeper_pid(state_dir: Path) -> int | None:
    """The live keeper whose pid ``state_dir/keeper.pid`` holds, if it is one."""
    try:
        pid = int((state_dir / KEEPER_PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    if not pid_is_running(pid):
        return None
    return pid if _runs(pid, b"ateam.fleet") else None  # a reused pid is never signalled


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
