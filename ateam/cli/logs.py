"""``ateam logs NAME [-f] [-n N]``: an agent's ``state/agent.log``, like ``docker logs``.

The log is what the agent's process printed (its own lines, one-line errors, each task's
start and end) and the notes of whatever runs it (the supervisor's restarts, a keeper's).
It is a file on this host, read without the bus: a stopped agent's log reads the same.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import BinaryIO

from ateam.cli._run import home_project, project_or_none
from ateam.client.names import resolve_agent
from ateam.config import CONFIG_DIR, ProjectConfig, agent_dir_for, load_project
from ateam.config.discovery import remembered_root
from ateam.errors import UsageError

FOLLOW_POLL_S = 0.2
"""How often a followed log is looked at for more: a file announces nothing (tail -f)."""
LOG_FILE = "agent.log"
_BLOCK = 64 * 1024


def log_paths(project: ProjectConfig | None, project_name: str | None) -> dict[str, Path]:
    """Agent id → its log, for the agents of the project here that have a state directory.

    The configured agents, the ones a console started without configuration
    (``~/.ateam/projects/P/agents/``) and those in the project's worktrees.
    """
    found: dict[str, Path] = {}
    if project is not None and project.root is not None:
        for agent in project.agents.values():
            found[agent.id] = agent.state_dir / LOG_FILE
        trees = project.root / CONFIG_DIR / "worktrees"
        for state in trees.glob(f"*/{CONFIG_DIR}/agents/*/state"):
            found.setdefault(f"{project.name}/{state.parent.name}", state / LOG_FILE)
    if project_name is not None:
        loose = agent_dir_for(project_name, "x").parent
        for state in loose.glob("*/state"):
            found.setdefault(f"{project_name}/{state.parent.name}", state / LOG_FILE)
    return found


def _remembered(name: str) -> ProjectConfig | None:
    """Project ``name`` as configured where ``up`` or ``start`` last ran it on this host."""
    root = remembered_root(name)
    if root is None:
        return None
    project = load_project(root)
    return project if project.name == name else None


def cmd_logs(args: argparse.Namespace) -> int:
    project = project_or_none()
    here = home_project(args, project)
    if project is not None and here != project.name:
        project = None  # another project's configuration is not here to read
    paths = log_paths(project, here)
    agent = resolve_agent(args.id, paths, project=here)
    their_project = agent.partition("/")[0]
    if agent not in paths and (project is None or project.name != their_project):
        # Another project's agent: its configuration is where `ateam up` last started it.
        other = _remembered(their_project)
        if other is not None:
            paths = log_paths(other, their_project)
            agent = resolve_agent(args.id, paths, project=their_project)
    their_project, _, name = agent.partition("/")
    log = paths.get(agent) or agent_dir_for(their_project, name) / "state" / LOG_FILE
    if args.lines is not None and args.lines < 0:
        raise UsageError("-n takes a number of lines, 0 or more")
    if not log.exists() and not args.follow:
        raise UsageError(
            f"no log for {agent} on this host ({log}); "
            f"`ateam start {name}` in its project starts it, `ateam ps` lists the agents"
        )
    out = sys.stdout.buffer
    position = 0
    if log.exists():
        with log.open("rb") as handle:
            _write_last(handle, args.lines, out)
            position = handle.tell()
    if args.follow:
        _follow(log, position, out)
    return 0


def _write_last(handle: BinaryIO, lines: int | None, out: BinaryIO) -> None:
    """The file's last ``lines`` lines (all of it for ``None``); leaves it at its end."""
    end = handle.seek(0, os.SEEK_END)
    start = 0 if lines is None else _start_of_last(handle, end, lines)
    handle.seek(start)
    while chunk := handle.read(_BLOCK):
        out.write(chunk)
    out.flush()


def _start_of_last(handle: BinaryIO, end: int, lines: int) -> int:
    """The offset where the last ``lines`` lines of the file begin, read from its end."""
    if lines == 0:
        return end
    # The final newline ends the last line; it does not start another.
    handle.seek(max(0, end - 1))
    wanted = lines + (1 if handle.read(1) == b"\n" else 0)
    position = end
    while position > 0:
        size = min(_BLOCK, position)
        position -= size
        handle.seek(position)
        block = handle.read(size)
        count = block.count(b"\n")
        if count >= wanted:
            cut = len(block)
            for _ in range(wanted):
                cut = block.rindex(b"\n", 0, cut)
            return position + cut + 1
        wanted -= count
    return 0


def _follow(log: Path, position: int, out: BinaryIO) -> None:
    """Print what is appended to ``log`` until Ctrl+C; a file cut or replaced starts over."""
    inode = _inode(log)
    while True:
        now = _inode(log)
        if now is not None and (now != inode or log.stat().st_size < position):
            inode, position = now, 0  # rotated or truncated: the new file from its start
        if now is not None:
            with log.open("rb") as handle:
                handle.seek(position)
                while chunk := handle.read(_BLOCK):
                    out.write(chunk)
                position = handle.tell()
            out.flush()
        time.sleep(FOLLOW_POLL_S)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None
