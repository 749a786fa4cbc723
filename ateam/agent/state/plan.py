"""The agent's plan file, ``plan.md`` in its directory (SPEC §3).

One place for the file's rules, shared by the ``plan.*`` tools (the model's side) and the
``plan.*`` RPC methods (the console's ``/plan``): whole-file writes are atomic, an append
adds the missing newline, a missing file reads as an empty plan.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ateam._fs import atomic_write

__all__ = ["MAX_PLAN_BYTES", "PLAN_FILE", "append_plan", "delete_plan", "read_plan", "write_plan"]

PLAN_FILE = "plan.md"
"""The plan's name, in the agent's directory."""

MAX_PLAN_BYTES = 256 * 1024
"""A plan is read into every context that asks for it; larger writes are refused."""


def read_plan(path: Path) -> str:
    """The plan's text; ``""`` when there is none yet."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def write_plan(path: Path, text: str) -> int:
    """Replace the plan; returns its size in bytes. Raises ValueError if it is too large."""
    data = text.encode("utf-8")
    if len(data) > MAX_PLAN_BYTES:
        raise ValueError(f"a plan is at most {MAX_PLAN_BYTES} bytes; this is {len(data)}")
    atomic_write(path, data)
    return len(data)


def append_plan(path: Path, text: str) -> int:
    """Add ``text`` on a line of its own; returns the plan's new size in bytes."""
    old = read_plan(path)
    sep = "" if not old or old.endswith("\n") else "\n"
    return write_plan(path, old + sep + text + ("" if text.endswith("\n") else "\n"))


def delete_plan(path: Path) -> bool:
    """Remove the plan; returns whether there was one."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        return True
    return False
