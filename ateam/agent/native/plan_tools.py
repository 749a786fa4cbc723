"""The lead's side of plan approval (issue 26): ``plan.approve`` and ``plan.reject``.

A teammate whose task needs an approved plan works read-only until someone answers it;
a lead agent answers with these tools (a person with ``/plan approve``). The answer is
the teammate's next input: go ahead, or the feedback to revise the plan by.
"""

from __future__ import annotations

from ateam._json import JsonObject
from ateam.errors import BadRequest
from ateam.tools.registry import Tool, ToolContext, tool
from ateam.tools.services import PlanReviews

__all__ = ["PLAN_REVIEW_TOOLS"]


def _reviews(ctx: ToolContext) -> PlanReviews:
    if ctx.plan_reviews is None:
        raise BadRequest("this agent cannot reach its teammates (no bus)")
    return ctx.plan_reviews


@tool("plan.approve", timeout_s=15.0)
async def plan_approve(ctx: ToolContext, agent: str, note: str = "") -> JsonObject:
    """Approve a teammate's plan (plan show NAME / their plan.md): it may then edit and run.

    Args:
        agent: The teammate whose plan awaits approval, as agents.list shows it.
        note: Anything it should keep in mind while carrying the plan out.
    """
    return await _reviews(ctx).answer(agent, approve=True, feedback=ctx.redact(note))


@tool("plan.reject", timeout_s=15.0)
async def plan_reject(ctx: ToolContext, agent: str, feedback: str) -> JsonObject:
    """Send a teammate's plan back: it stays read-only and revises the plan by your feedback.

    Args:
        agent: The teammate whose plan awaits approval.
        feedback: What must change in the plan, complete enough to act on.
    """
    if not feedback.strip():
        raise BadRequest("feedback: say what must change in the plan")
    return await _reviews(ctx).answer(agent, approve=False, feedback=ctx.redact(feedback))


PLAN_REVIEW_TOOLS: tuple[Tool, ...] = (plan_approve, plan_reject)
