"""What a runtime needs around its entry: install and login hints, its command, its environment.

The well-known runtimes are in :mod:`ateam.config.runtimes`; an entry is matched to one
by its id or by its program's name.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from ateam.config.runtimes import KNOWN, Known
from ateam.config.schema import ModelEntry
from ateam.tools.exec_values import ExecLimits, minimal_env

__all__ = ["find_command", "install_hint", "known_for", "login_hint", "runtime_env"]


_BY_PROGRAM = {known.command[0]: known for known in KNOWN.values()}


def known_for(entry: ModelEntry) -> Known | None:
    """What ateam knows of ``entry``'s runtime: by its id, else by its program's name."""
    if entry.id in KNOWN:
        return KNOWN[entry.id]
    if entry.command:
        return _BY_PROGRAM.get(Path(entry.command[0]).name)
    return None


def install_hint(entry: ModelEntry) -> str:
    """How to get ``entry``'s command: its own ``install``, the known one, or a general line."""
    if entry.install:
        return entry.install
    known = known_for(entry)
    if known is not None:
        return known.install
    program = entry.command[0] if entry.command else "?"
    return f"install {program} and put it on PATH (or give its full path in `command`)"


def login_hint(entry: ModelEntry) -> str:
    known = known_for(entry)
    return known.login if known is not None else "log the runtime in with its own command"


def find_command(entry: ModelEntry, env: Mapping[str, str]) -> str | None:
    """The executable ``entry``'s command starts, searched on the runtime's ``PATH``."""
    if not entry.command:
        return None
    return shutil.which(entry.command[0], path=env.get("PATH", os.defpath))


def runtime_env(
    entry: ModelEntry, limits: ExecLimits, base: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The runtime's environment: the agent's command policy, then the entry's ``env``.

    The policy is the one the agent's own commands get (``PATH``, ``HOME``, ``LANG``
    and the variables ``env_passthrough`` / ``env_allow`` name), so a key reaches a
    runtime only when the agent's configuration passes it on. ``HOME`` stays the user's:
    a runtime's login lives there, in the runtime's own files, never in ateam's.
    """
    env = minimal_env(limits, base)
    env.update(entry.env)
    return env
