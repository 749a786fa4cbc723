"""``team.send``: one agent queues work for a teammate (SPEC §9).

Sent by the agent's own ``team.send`` tool, and by ``ateam mcp --as`` for the coding
agent (an ACP runtime) that runs as the agent: one implementation for both, on the bus
floor where either can reach it, so a runtime's message is the agent's in every respect
(caller, proof, hops, limits).

The message goes through the receiver's ``team.input`` RPC, so it lands in the same
durable queue, with the same acknowledgement and request-id de-duplication, as any
``ateam send``; the receiver records it with source ``agent:NAME`` and its owner's
console shows that. No ownership is taken: a teammate's message is not a console
writing to the agent. What the receiver checks instead is that the message comes from
the agent it names: the request carries this instance's identity token
(:mod:`ateam.bus.identity`), whose hash the sender's heartbeat publishes.

Loops are bounded by hops. A message sent while working on an item that arrived over
``team.send`` carries that item's hop count plus one and its trace id (the thread), and
the receiver refuses a hop past its ``team.max_hops``. The sender checks its own limit
first, so a model gets the refusal without a round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from ateam._json import JsonObject
from ateam.bus.identity import AgentIdentity
from ateam.bus.keys import Keys
from ateam.bus.registry import Registry
from ateam.bus.rpc import RpcClient
from ateam.config.schema import check_name
from ateam.errors import AgentNotFound, BadRequest, HopLimit
from ateam.wire.results import InputResult, parse_result

__all__ = ["SEND_TIMEOUT_S", "TeamMessenger"]

SEND_TIMEOUT_S = 10.0
"""How long a sender waits for the teammate's acknowledgement (the item is on its disk)."""


@dataclass(frozen=True)
class TeamMessenger:
    """Sends text from the agent ``identity.agent`` to teammates of its project."""

    client: aioredis.Redis
    keys: Keys
    identity: AgentIdentity
    max_hops: int

    @property
    def agent_id(self) -> str:
        return self.identity.agent

    async def send(self, to: str, text: str, *, hops: int, trace_id: str | None) -> JsonObject:
        """Queue ``text`` at teammate ``to`` (``NAME`` or ``PROJECT/NAME``).

        Args:
            hops: the hop this message is (the current item's hops plus one).
            trace_id: the thread it belongs to (the current task's trace id).

        Returns:
            ``{to, id, queued, hops, trace_id}``: the receiver's queue item and length.

        Raises:
            BadRequest: ``to`` is malformed, another project's agent, or this agent.
            AgentNotFound: no such agent is running.
            HopLimit: the thread already ran this agent's ``team.max_hops`` steps (or the
                receiver's).
        """
        target = self._target(to)
        if hops > self.max_hops:
            raise HopLimit(
                f"not sent: this would be hop {hops} of the thread and team.max_hops is "
                f"{self.max_hops}; answer the person who started it instead",
                detail={"hops": hops, "max_hops": self.max_hops},
            )
        if await Registry(self.client, self.keys).get(target) is None:
            raise AgentNotFound(f"no agent {target} is running", detail={"agent": target})
        name = self.agent_id.split("/", 1)[1]
        params: dict[str, Any] = {"text": text, "source": f"agent:{name}", "hops": hops}
        if trace_id is not None:
            params["trace_id"] = trace_id
        rpc = RpcClient(
            self.client, self.keys, caller=self.identity.caller, auth=self.identity.token
        )
        value = await rpc.call(target, "team.input", params, timeout=SEND_TIMEOUT_S)
        reply = parse_result(InputResult, "team.input", value)
        return {
            "to": target,
            "id": reply.id,
            "queued": reply.queued,
            "hops": hops,
            "trace_id": reply.trace_id,
        }

    def _target(self, to: str) -> str:
        project = self.agent_id.split("/", 1)[0]
        if not isinstance(to, str) or not to.strip():
            raise BadRequest("to must name a teammate: NAME or PROJECT/NAME")
        their_project, _, name = to.strip().rpartition("/")
        their_project = their_project or project
        if their_project != project:
            raise BadRequest(
                f"to: {to!r} is in project {their_project!r}; team.send reaches the agents "
                f"of {project!r} only"
            )
        try:
            check_name(name, "agent")
        except ValueError as exc:
            raise BadRequest(f"to: {exc}") from None
        target = f"{project}/{name}"
        if target == self.agent_id:
            raise BadRequest("to: an agent cannot send itself work; just do it")
        return target
