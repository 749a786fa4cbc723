"""A lead agent answers a teammate's plan: the ``plan.approve`` / ``plan.reject`` tools.

The answer goes to the teammate's ``team.plan`` RPC under this agent's own name
(``caller: agent:P/NAME``) with its running instance's identity token as ``auth``
(:mod:`ateam.bus.identity`), as ``team.send`` does: the teammate checks the proof, so a
console or a script cannot pass for a lead, and no console ownership is taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from ateam._json import JsonObject
from ateam.bus.identity import AgentIdentity
from ateam.bus.keys import Keys
from ateam.bus.registry import Registry
from ateam.bus.rpc import RpcClient
from ateam.config.names import check_name
from ateam.errors import AgentNotFound, BadRequest
from ateam.wire.modes import ModesResult
from ateam.wire.results import parse_result

__all__ = ["REVIEW_TIMEOUT_S", "PlanReviewer"]

REVIEW_TIMEOUT_S = 10.0
"""How long a lead waits for the teammate to record its answer."""


@dataclass(frozen=True, eq=False)
class PlanReviewer:
    """Answers the plans of the teammates of agent ``identity.agent``."""

    client: aioredis.Redis
    keys: Keys
    identity: AgentIdentity

    async def answer(self, to: str, *, approve: bool, feedback: str) -> JsonObject:
        """Approve (or reject with ``feedback``) the plan teammate ``to`` waits on.

        Returns:
            ``{to, plan, task, status}`` as the teammate recorded it.

        Raises:
            BadRequest: ``to`` is malformed, of another project, or this agent; or the
                teammate has no plan awaiting approval.
            AgentNotFound: no such teammate is running.
        """
        target = self._target(to)
        if await Registry(self.client, self.keys).get(target) is None:
            raise AgentNotFound(f"no agent {target} is running", detail={"agent": target})
        rpc = RpcClient(
            self.client, self.keys, caller=self.identity.caller, auth=self.identity.token
        )
        params = {"decision": "approve" if approve else "reject", "feedback": feedback}
        value = await rpc.call(target, "team.plan", params, timeout=REVIEW_TIMEOUT_S)
        reply = parse_result(ModesResult, "team.plan", value)
        return {"to": target, "plan": reply.plan, "task": reply.task, "status": reply.status}

    def _target(self, to: str) -> str:
        me = self.identity.agent
        project = me.split("/", 1)[0]
        their_project, _, name = to.strip().rpartition("/")
        if (their_project or project) != project:
            raise BadRequest(f"agent: {to!r} is not of project {project!r}")
        try:
            check_name(name, "agent")
        except ValueError as exc:
            raise BadRequest(f"agent: {exc}") from None
        target = f"{project}/{name}"
        if target == me:
            raise BadRequest("agent: an agent cannot answer its own plan")
        return target
