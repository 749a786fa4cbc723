"""What ateam knows about the coding agents people run over ACP, and the environment they get.

A runtime is a ``models.yaml`` entry with ``provider: acp``; this table adds what the
entry need not spell out for the well-known ones — how to install the command when it is
missing, how to log in when it asks — and the entries ``ateam init --runtime`` writes.
Anything else that speaks ACP works from its entry alone.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ateam.config.schema import ModelEntry
from ateam.tools.exec_values import ExecLimits, minimal_env

__all__ = ["KNOWN", "Known", "find_command", "known_for", "runtime_env"]


@dataclass(frozen=True)
class Known:
    """One coding agent ateam knows by name."""

    id: str
    """The entry id ``ateam init --runtime`` writes."""
    command: tuple[str, ...]
    install: str
    """What installs the command when it is missing."""
    login: str
    """What logs the runtime in (its own login: ateam stores no key)."""
    context_window: int


KNOWN: dict[str, Known] = {
    known.id: known
    for known in (
        Known(
            id="claude-code",
            command=("claude-code-acp",),
            install="npm install -g @anthropic-ai/claude-code @zed-industries/claude-code-acp",
            login="claude /login (or set ANTHROPIC_API_KEY and pass it with env_passthrough)",
            context_window=200_000,
        ),
        Known(
            id="codex",
            command=("codex-acp",),
            install="npm install -g @openai/codex @zed-industries/codex-acp",
            login="codex login (or set OPENAI_API_KEY and pass it with env_passthrough)",
            context_window=272_000,
        ),
        Known(
            id="gemini",
            command=("gemini", "--experimental-acp"),
            install="npm install -g @google/gemini-cli",
            login="gemini (choose a login once), or set GEMINI_API_KEY",
            context_window=1_000_000,
        ),
    )
}
"""By entry id; :func:`known_for` also matches an entry by its command's program name."""

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
