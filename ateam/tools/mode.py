"""Run-time limits on what an agent may call: delegate mode and a plan awaiting approval.

Both sit on top of the tool policy (:mod:`ateam.tools.registry`): a tool must be allowed
by ``tools.allow`` first, and then also by the agent's current mode. The dispatch asks
:func:`mode_refusal` just before a call; the rules are tables of globs, not branches.

* **Delegate mode** keeps a lead coordinating instead of doing the work itself: only
  :data:`COORDINATION_TOOLS` pass (the team, the board, context items, the registry, the
  plan, and its own working memory). Everything else is ``tool.denied``.
* **A plan awaiting approval** makes the agent read-only: it may read, search and
  coordinate (:data:`READ_ONLY_TOOLS`), but every tool that may change the workspace or
  run a command is ``plan.required`` until a person or a lead approves the plan. Tools
  from plugins are refused too: nothing says what they change.

Delegate mode is checked first, so a lead in delegate mode is told the stricter reason.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

from ateam.errors import AteamError, PlanRequired, ToolDenied

__all__ = [
    "COORDINATION_TOOLS",
    "PLAN_REASON",
    "READ_ONLY_TOOLS",
    "DelegateDenied",
    "WorkMode",
    "mode_refusal",
]

COORDINATION_TOOLS: tuple[str, ...] = (
    "team.*",
    "tasks.*",
    "context.*",
    "agents.*",
    "plan.*",
    "memory.*",
)
"""What an agent in delegate mode may call."""

READ_ONLY_TOOLS: tuple[str, ...] = ("fs.read", "fs.list", "kb.*", *COORDINATION_TOOLS)
"""What an agent whose plan awaits approval may call: reading, searching, coordinating."""

PLAN_REASON = "this task needs an approved plan: write it with plan.write, then wait for approval"
"""What the model is told when an edit or a command waits for the plan's approval."""

DELEGATE_REASON = "delegate mode: coordination tools only"


class DelegateDenied(ToolDenied):
    """A tool refused in delegate mode (still ``tool.denied``; a hint of its own)."""

    hint = "hand the work to a teammate (team.send, tasks.add); a person can /delegate off"


@dataclass(frozen=True)
class WorkMode:
    """The limits in force for one call."""

    delegate: bool = False
    """Coordination tools only."""
    plan_pending: bool = False
    """The task needs an approved plan and has none yet."""


def _delegate(name: str) -> AteamError:
    return DelegateDenied(
        f"tool {name} refused: {DELEGATE_REASON} ({', '.join(COORDINATION_TOOLS)})",
        detail={"tool": name, "mode": "delegate"},
    )


def _plan(name: str) -> AteamError:
    return PlanRequired(f"tool {name} refused: {PLAN_REASON}", detail={"tool": name})


_LIMITS: tuple[tuple[Callable[[WorkMode], bool], tuple[str, ...], Callable[[str], AteamError]], ...]
_LIMITS = (
    (lambda mode: mode.delegate, COORDINATION_TOOLS, _delegate),
    (lambda mode: mode.plan_pending, READ_ONLY_TOOLS, _plan),
)
"""(in force?, what passes, the refusal) in the order they are checked."""


def mode_refusal(name: str, mode: WorkMode) -> AteamError | None:
    """The error refusing tool ``name`` under ``mode``; ``None`` when the call may go on."""
    for active, passes, refuse in _LIMITS:
        if active(mode) and not any(fnmatch.fnmatchcase(name, glob) for glob in passes):
            return refuse(name)
    return None
