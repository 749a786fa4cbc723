"""The RPC shapes of an agent's working modes: plan approval and delegate mode (issue 26).

The agent's handlers (:mod:`ateam.agent.runtime.mode_methods`) read these parameters and
reply with :class:`ModesResult`; the client sends and reads the same models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ateam.wire.results import Result
from ateam.wire.rpc import Params, Text

__all__ = [
    "MAX_FEEDBACK",
    "PLAN_APPROVED",
    "PLAN_AWAITING",
    "DelegateParams",
    "ModesResult",
    "PlanAnswerParams",
    "PlanRejectParams",
    "PlanReviewParams",
]

PLAN_AWAITING = "awaiting approval"
"""The registry entry's ``plan`` while the task's plan waits (or was sent back)."""
PLAN_APPROVED = "approved"

MAX_FEEDBACK = 4000
"""The longest note or feedback an answer carries: it is kept and shown, not a document."""


class PlanAnswerParams(Params):
    """``plan.approve``: an optional note that goes to the model with the approval."""

    note: str = Field(default="", max_length=MAX_FEEDBACK)


class PlanRejectParams(Params):
    """``plan.reject``: the feedback the model revises its plan by."""

    feedback: Text = Field(max_length=MAX_FEEDBACK)


class PlanReviewParams(Params):
    """``team.plan``: a lead agent's answer (approve, or reject with feedback)."""

    decision: Literal["approve", "reject"]
    feedback: str = Field(default="", max_length=MAX_FEEDBACK)


class DelegateParams(Params):
    """``delegate.set``: on or off, kept across restarts."""

    on: bool


class ModesResult(Result):
    """Where the agent's plan and delegate mode stand."""

    require_plan: bool = False
    """``agent.yaml`` ``require_plan``: every task of the agent needs an approved plan."""
    plan: str | None = None
    """``awaiting approval``, ``approved``, or null when no task has needed a plan."""
    task: str | None = None
    """The task the plan is for: ``board:<id>`` or ``trace:<trace id>``."""
    status: str | None = None
    """``pending``, ``approved`` or ``rejected``."""
    feedback: str = ""
    by: str = ""
    at: float = 0.0
    delegate: bool = False
    """Coordination tools only."""
