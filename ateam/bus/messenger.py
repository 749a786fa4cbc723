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

With ``reply`` the receiver sends its final answer back the same way when the item
ends (:meth:`TeamMessenger.answer`, under a request id derived from the answered item,
so a repeat is queued once). A teammate that is not running is not refused: the message
waits in its mailbox (:mod:`ateam.bus.mailbox`), under the request id the RPC would have
carried. :meth:`TeamMessenger.broadcast` sends one text to every running teammate.

Loops are bounded by hops. A message sent while working on an item that arrived over
``team.send`` carries that item's hop count plus one and its trace id (the thread), and
the receiver refuses a hop past its ``team.max_hops``. The sender checks its own limit
first, so a model gets the refusal without a round trip.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from ateam._json import JsonObject, JsonValue
from ateam.bus.identity import AgentIdentity
from ateam.bus.keys import Keys
from ateam.bus.mailbox import Mailbox, MailMessage
from ateam.bus.registry import Registry
from ateam.bus.rpc import RpcClient
from ateam.config.names import check_name
from ateam.errors import AgentNotFound, AteamError, BadRequest, HopLimit, RpcTimeout
from ateam.wire.results import InputResult, parse_result

__all__ = ["SEND_TIMEOUT_S", "TeamMessenger"]

SEND_TIMEOUT_S = 10.0
"""How long a sender waits for the teammate's acknowledgement (the item is on its disk)."""


@dataclass(frozen=True, eq=False)
class TeamMessenger:
    """Sends text from the agent ``identity.agent`` to teammates of its project."""

    client: aioredis.Redis
    keys: Keys
    identity: AgentIdentity
    max_hops: int

    @property
    def agent_id(self) -> str:
        return self.identity.agent

    async def send(
        self,
        to: str,
        text: str,
        *,
        hops: int,
        trace_id: str | None,
        reply: bool = False,
    ) -> JsonObject:
        """Queue ``text`` at teammate ``to`` (``NAME`` or ``PROJECT/NAME``).

        A teammate that is not running (stopped, crashed) but has run on this bus before
        gets it in its mailbox (:mod:`ateam.bus.mailbox`), queued at its next start.

        Args:
            hops: the hop this message is (the current item's hops plus one).
            trace_id: the thread it belongs to (the current task's trace id).
            reply: the teammate's final answer comes back to this agent as an input.

        Returns:
            ``{to, id, queued, hops, trace_id, mailbox}``: the receiver's queue item and
            length, or (``mailbox: true``) the kept message and its place in the mailbox.

        Raises:
            BadRequest: ``to`` is malformed, another project's agent, or this agent.
            AgentNotFound: no such agent has ever run on this bus.
            HopLimit: the thread already ran this agent's ``team.max_hops`` steps (or the
                receiver's).
            MailboxFull: the teammate is not running and its mailbox is full.
        """
        target = self._target(to)
        if hops > self.max_hops:
            raise HopLimit(
                f"not sent: this would be hop {hops} of the thread and team.max_hops is "
                f"{self.max_hops}; answer the person who started it instead",
                detail={"hops": hops, "max_hops": self.max_hops},
            )
        return await self._deliver(
            target, text, hops=hops, trace_id=trace_id, reply=reply, request_id=None
        )

    async def answer(
        self, to: str, text: str, *, hops: int, trace_id: str | None, item_id: str
    ) -> JsonObject:
        """Send the answer to item ``item_id``, which agent ``to`` sent with ``reply``.

        The request id is derived from the item id, so sending it again (a restart
        between sending and marking the item done) queues it once. Not held to this
        agent's hop limit: a reply ends a thread, it never asks for another.
        """
        return await self._deliver(
            self._target(to),  # a reply_to is data from a queue file: checked as any `to`
            text,
            hops=hops,
            trace_id=trace_id,
            reply=False,
            request_id=f"reply-{self.agent_id}-{item_id}",
            in_reply_to=item_id,
        )

    async def broadcast(self, text: str, *, hops: int, trace_id: str | None) -> JsonObject:
        """Queue ``text`` at every running agent of the project but this one.

        Each is sent as :meth:`send` sends (the same hop, thread and proof) and answers
        for itself: one refusing does not stop the others.

        Returns:
            ``{hops, sent, failed, agents: [{to, id, queued} | {to, error: {code, message}}]}``.

        Raises:
            HopLimit: the thread already ran this agent's ``team.max_hops`` steps.
        """
        if hops > self.max_hops:
            raise HopLimit(
                f"not broadcast: this would be hop {hops} of the thread and team.max_hops "
                f"is {self.max_hops}",
                detail={"hops": hops, "max_hops": self.max_hops},
            )
        project = self.agent_id.split("/", 1)[0]
        views = await Registry(self.client, self.keys).list((project,))
        targets = [v.id for v in views if v.connected and v.id != self.agent_id]

        async def one(target: str) -> JsonObject:
            try:
                sent = await self._call(target, text, hops=hops, trace_id=trace_id)
            except AteamError as exc:
                return {"to": target, "error": {"code": exc.code, "message": exc.message}}
            return {"to": target, "id": sent.id, "queued": sent.queued}

        rows: list[JsonValue] = list(await asyncio.gather(*(one(t) for t in targets)))
        failed = sum(1 for row in rows if isinstance(row, dict) and "error" in row)
        return {"hops": hops, "sent": len(rows) - failed, "failed": failed, "agents": rows}

    async def _call(
        self, target: str, text: str, *, hops: int, trace_id: str | None
    ) -> InputResult:
        name = self.agent_id.split("/", 1)[1]
        params: dict[str, Any] = {"text": text, "source": f"agent:{name}", "hops": hops}
        if trace_id is not None:
            params["trace_id"] = trace_id
        rpc = RpcClient(
            self.client, self.keys, caller=self.identity.caller, auth=self.identity.token
        )
        value = await rpc.call(target, "team.input", params, timeout=SEND_TIMEOUT_S)
        return parse_result(InputResult, "team.input", value)

    async def _deliver(
        self,
        target: str,
        text: str,
        *,
        hops: int,
        trace_id: str | None,
        reply: bool,
        request_id: str | None,
        in_reply_to: str | None = None,
    ) -> JsonObject:
        name = self.agent_id.split("/", 1)[1]
        rid = request_id or uuid.uuid4().hex
        params: dict[str, Any] = {"text": text, "source": f"agent:{name}", "hops": hops}
        extras = {"trace_id": trace_id, "reply": reply or None, "in_reply_to": in_reply_to}
        params.update({key: value for key, value in extras.items() if value is not None})
        view = await Registry(self.client, self.keys).get(target)
        if view is not None and view.connected:
            rpc = RpcClient(
                self.client, self.keys, caller=self.identity.caller, auth=self.identity.token
            )
            try:
                value = await rpc.call(
                    target, "team.input", params, timeout=SEND_TIMEOUT_S, request_id=rid
                )
            except (AgentNotFound, RpcTimeout):
                # Gone since the registry said otherwise (nothing was pushed), or not
                # answering (crashed a moment ago, or hung): kept under the same request
                # id, which the queue drops if the pushed request is served after all.
                pass
            else:
                got = parse_result(InputResult, "team.input", value)
                return {
                    "to": target,
                    "id": got.id,
                    "queued": got.queued,
                    "hops": hops,
                    "trace_id": got.trace_id,
                    "mailbox": False,
                }
        return await self._keep(target, params, rid)

    async def _keep(self, target: str, params: dict[str, Any], rid: str) -> JsonObject:
        mailbox = Mailbox(self.client, self.keys)
        if not await mailbox.known(target):
            raise AgentNotFound(
                f"no agent {target} is running, and none has run on this bus",
                detail={"agent": target},
            )
        message = MailMessage.new(
            params["text"],
            params["source"],
            rid=rid,
            hops=params["hops"],
            trace_id=params.get("trace_id"),
            caller=self.identity.caller,
            reply_to=self.agent_id if params.get("reply") else None,
            in_reply_to=params.get("in_reply_to"),
        )
        place = await mailbox.put(target, message)
        return {
            "to": target,
            "id": message.id,
            "queued": place,
            "hops": params["hops"],
            "trace_id": message.trace_id,
            "mailbox": True,
            "note": f"queued for {target.split('/', 1)[1]} (not running)",
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
