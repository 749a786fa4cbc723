"""Running ``git``: one command at a time, its output captured, its failure a one-line error.

Every call is ``git -C DIR …`` with stdin closed (git never waits for a person), a
timeout (a wedged lock or a network filesystem must not hang an agent), ``LC_ALL=C``
(the few messages parsed here are git's English ones) and paths printed unquoted.
Variables that would point git somewhere other than ``DIR`` (``GIT_DIR``, ``GIT_INDEX_FILE``
…, set when ateam itself runs from a git hook) are dropped, so ``-C`` alone decides.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ateam.errors import GitError, NotARepository, UsageError

__all__ = ["GIT_TIMEOUT_S", "Listed", "git", "last_line", "output", "to_file", "worktrees"]

GIT_TIMEOUT_S = 120.0
"""Long enough for a checkout of a large tree, short enough that a hung git surfaces."""

_DROPPED = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
)
_FIXED = {
    "LC_ALL": "C",
    "GIT_TERMINAL_PROMPT": "0",
    # `git status` and friends refresh the index as a side effect; ateam only looks.
    "GIT_OPTIONAL_LOCKS": "0",
    # A path ateam passes is a file's name, never a pattern (a file may be called `*.c`).
    "GIT_LITERAL_PATHSPECS": "1",
}
_OPTIONS = ("-c", "core.quotepath=off", "-c", "color.ui=never")

_CONFIG_LOCKED = b"could not lock config file"
_LOCK_PAUSES_S = (0.02, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
"""Git takes ``.git/config.lock`` for every config write and gives up at once when it is
held; two agents starting tasks together both write their branch's ``ateambase``. So a
locked config is tried again a few times, as git itself does for a locked ref, each
pause drawn a little at random so that the waiting writers do not collide again."""


def _environment(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    env.update(_FIXED)
    if extra:
        env.update(extra)
    return env


def last_line(text: str) -> str:
    """The last non-blank line of git's output: where git says what went wrong."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _launch(
    cwd: Path, args: tuple[str, ...], env: Mapping[str, str] | None, stdout: int | IO[bytes]
) -> subprocess.CompletedProcess[bytes]:
    if any("\0" in arg for arg in (str(cwd), *args)):
        # A C string ends at NUL: git would get another argument than the one given.
        raise UsageError(f"an argument to git {args[0]} contains a NUL byte")
    try:
        return subprocess.run(
            ["git", "-C", str(cwd), *_OPTIONS, *args],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=GIT_TIMEOUT_S,
            env=_environment(env),
            check=False,
        )
    except FileNotFoundError:
        raise NotARepository("git is not installed (no `git` on PATH)") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} in {cwd} took longer than {GIT_TIMEOUT_S:g} s") from None


def _failed(args: tuple[str, ...], stderr: bytes) -> GitError:
    said = last_line(stderr.decode("utf-8", "replace"))
    return GitError(f"git {args[0]} failed: {said}", detail={"command": ["git", *args]})


def git(
    cwd: Path, *args: str, env: Mapping[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``git -C cwd ARGS``; its output decoded (undecodable bytes replaced).

    Raises:
        GitError: git exited non-zero and ``check`` (its last stderr line in the message).
        NotARepository: git is not installed.
        UsageError: an argument holds a NUL byte.
    """
    done = _launch(cwd, args, env, subprocess.PIPE)
    for pause in _LOCK_PAUSES_S:
        if done.returncode == 0 or _CONFIG_LOCKED not in done.stderr:
            break
        time.sleep(pause * random.uniform(0.5, 1.5))
        done = _launch(cwd, args, env, subprocess.PIPE)
    if check and done.returncode != 0:
        raise _failed(args, done.stderr)
    return subprocess.CompletedProcess(
        done.args,
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


def output(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """What a successful ``git -C cwd ARGS`` printed, without the final newline."""
    return git(cwd, *args, env=env).stdout.rstrip("\n")


def to_file(cwd: Path, sink: IO[bytes], *args: str, env: Mapping[str, str] | None = None) -> None:
    """Run ``git -C cwd ARGS`` with its output written to ``sink`` (a diff may be huge).

    Raises:
        GitError: git exited non-zero.
    """
    done = _launch(cwd, args, env, sink)
    if done.returncode != 0:
        raise _failed(args, done.stderr)


@dataclass(frozen=True)
class Listed:
    """One entry of ``git worktree list``."""

    path: Path
    branch: str | None
    """The branch checked out there (``None``: detached, or a bare repository)."""
    bare: bool = False


def worktrees(cwd: Path) -> list[Listed]:
    """Every worktree of the repository ``cwd`` is in, the main one first (as git lists them)."""
    text = output(cwd, "worktree", "list", "--porcelain", "-z")
    found: list[Listed] = []
    fields: dict[str, str] = {}
    # -z: one field per NUL, an empty field between entries (paths may hold newlines).
    for item in [*text.split("\0"), ""]:
        if item:
            key, _, value = item.partition(" ")
            fields[key] = value
            continue
        if "worktree" in fields:
            branch = fields.get("branch")
            found.append(
                Listed(
                    path=Path(fields["worktree"]),
                    branch=branch.removeprefix("refs/heads/") if branch else None,
                    bare="bare" in fields,
                )
            )
        fields = {}
    return found
