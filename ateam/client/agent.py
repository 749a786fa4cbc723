"""One agent of the team, as a handle: status, input, events, ownership, plan and kb.

A handle is cheap (``team.agent("hello/zeus")``) and holds no state of its own beyond
its id: whether this session holds the agent lives in the team session. Calls that
change an agent need its ownership (SPEC §4.3). Inside :meth:`AgentHandle.attach` the
session holds it; outside, every changing call takes a one-call claim around itself, as
``ateam send`` and ``ateam stop`` do, unless told not to (``claim=False``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.client._session import Session
from ateam.client.kb import KbApi
from ateam.client.redaction import redactor_for
from ateam.constants import OWNER_REFRESH_S, RPC_DEFAULT_DEADLINE_S
from ateam.errors import BadRequest
from ateam.wire.ownership import OwnerInfo
from ateam.wire.registry import AgentStatus
from ateam.wire.results import (
    AlertAckResult,
    CancelResult,
    HistoryTailResult,
    InputResult,
    InterruptResult,
    PlanDeleteResult,
    PlanReadResult,
    PlanWriteResult,
    R,
    ShutdownResult,
    parse_result,
)
from ateam.wire.rpc import (
    AnyTextParams,
    CancelParams,
    ConfirmParams,
    HistoryTailParams,
    InputParams,
    Params,
    TeamInputParams,
    TextParams,
    build_params,
)

# Events, their tail, the modes and the turns are imported where they are used: `ateam
# send` reads none of them, and the event models alone cost ~20 ms to define (issue 28).
if TYPE_CHECKING:
    from ateam.client.modes import ModesApi
    from ateam.client.tail import Item, Tail
    from ateam.wire.turns import Turn

__all__ = ["AgentHandle", "Attachment", "PlanApi"]

Names = list[str]
STOP_POLL_S = 0.1
"""How often :meth:`AgentHandle.stop` looks whether the agent has left the registry."""


class AgentHandle:
    """An agent of the team, by id; every method is one or a few round trips."""

    def __init__(self, session: Session, agent_id: str) -> None:
        self._session = session
        self.id = agent_id
        self.plan = PlanApi(self)
        self.kb = KbApi(self)
        """Its knowledge bases (:mod:`ateam.client.kb`)."""

    def __repr__(self) -> str:
        return f"AgentHandle({self.id!r})"

    def peer(self, agent_id: str) -> AgentHandle:
        """Another agent, on the same session."""
        return AgentHandle(self._session, agent_id)

    def reader(self) -> Tail:
        """A reader of agents' events on this session's connection."""
        from ateam.bus.tail import EventTail
        from ateam.client.tail import Tail

        return Tail(EventTail(self._session.client, self._session.keys))

    @functools.cached_property
    def modes(self) -> ModesApi:
        """Plan approval and delegate mode."""
        from ateam.client.modes import ModesApi

        return ModesApi(self)

    # reading -------------------------------------------------------------------------

    async def status(self) -> AgentStatus | None:
        """Its registry entry with liveness, or None if it is not registered."""
        return await self._session.registry.get(self.id)

    def tail(
        self,
        from_offset: int | None = None,
        *,
        follow: bool = True,
        backlog: int | None = None,
    ) -> AsyncIterator[Item]:
        """Its events from offset ``from_offset`` on (that event first), as typed items.

        Without ``from_offset`` the newest ``backlog`` events come first (``None``: the
        tail's default, :data:`~ateam.client.tail.DEFAULT_BACKLOG`). With
        ``follow`` it waits for new events for ever (reconnecting when Redis drops);
        without, it ends at the stream's current end.
        """
        from ateam.client.tail import DEFAULT_BACKLOG, Tail, follow_one

        reader = Tail.of_session(self._session)  # held (attached), it reports reading
        if backlog is None:
            backlog = DEFAULT_BACKLOG
        return follow_one(reader, self.id, from_offset, follow=follow, backlog=backlog)

    async def history(self, n: int | None = None) -> list[Turn]:
        """Its newest ``n`` turns (the agent's default when None), oldest first."""
        asked = {} if n is None else {"n": n}
        params = build_params(HistoryTailParams, "history.tail", **asked)
        reply = await self.request("history.tail", HistoryTailResult, params)
        from ateam.wire.turns import parse_turns

        return parse_turns(reply.turns)

    # ownership -----------------------------------------------------------------------

    @property
    def held(self) -> bool:
        """Whether this session holds the agent (attached or acquired)."""
        return self.id in self._session.held

    async def owner(self) -> OwnerInfo | None:
        return await self._session.ownership.current(self.id)

    async def acquire(self, *, takeover: bool = False) -> OwnerInfo | None:
        """Hold the agent as this session's until :meth:`release`; the previous owner.

        Raises:
            OwnershipDenied: another console holds it (and ``takeover`` is false).
        """
        previous = await self._session.ownership.acquire(self.id, takeover=takeover)
        self._session.held.add(self.id)
        return previous

    async def refresh(self) -> bool:
        """Extend the hold; False means someone else owns the agent now."""
        return await self._session.ownership.refresh(self.id)

    async def release(self) -> None:
        """Let go of the agent (a lost link only leaves the claim to lapse)."""
        self._session.held.discard(self.id)
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self._session.ownership.release(self.id)

    def disown(self) -> None:
        """Forget the hold without releasing it: someone took the agent over."""
        self._session.held.discard(self.id)

    def attach(self, *, takeover: bool = False) -> Attachment:
        """``async with handle.attach() as a:`` — hold the agent inside, release after."""
        return Attachment(self, takeover=takeover)

    # calls ---------------------------------------------------------------------------

    async def call(
        self,
        method: str,
        params: Params | Mapping[str, object] | None = None,
        *,
        timeout: float | None = None,
        request_id: str | None = None,
        claim: bool = False,
        takeover: bool = False,
    ) -> object:
        """Call one of the agent's RPC methods as this session and return its value as
        sent (a map, unchecked); :meth:`request` reads it as the method's result model.

        ``params`` may also be a plain map, sent as given: the raw door, for a request
        the models would refuse before it left (a contract test, a forged sender).

        With ``claim`` the call takes a one-call claim around itself unless this session
        holds the agent; without, a changing call needs the session to hold it.

        Raises:
            AteamError: the agent's typed refusal (``ownership.denied``…), or
                ``RpcTimeout``/``AgentNotFound``/``RedisUnavailable``.
        """
        wait = RPC_DEFAULT_DEADLINE_S if timeout is None else timeout
        sent = params.wire() if isinstance(params, Params) else params
        if not claim:
            return await self._session.rpc.call(
                self.id, method, sent, timeout=wait, request_id=request_id
            )
        async with self._session.writing(self.id, timeout=wait, takeover=takeover) as rpc:
            return await rpc.call(self.id, method, sent, timeout=wait, request_id=request_id)

    async def request(
        self,
        method: str,
        result: type[R],
        params: Params | None = None,
        *,
        timeout: float | None = None,
        request_id: str | None = None,
        claim: bool = False,
        takeover: bool = False,
    ) -> R:
        """:meth:`call`, its reply read as ``result`` (:mod:`ateam.wire.results`).

        ``params`` is the method's model from :mod:`ateam.wire.rpc`, made with
        :func:`~ateam.wire.rpc.build_params` so a bad value is refused before it is sent.

        Raises:
            BadRequest: the reply does not fit ``result`` (one line naming the field).
        """
        value = await self.call(
            method, params, timeout=timeout, request_id=request_id, claim=claim, takeover=takeover
        )
        return parse_result(result, method, value)

    async def send(
        self,
        text: str,
        *,
        source: str = "api",
        request_id: str | None = None,
        timeout: float | None = None,
        claim: bool = True,
        takeover: bool = False,
        agent_cwd: str | None = None,
    ) -> InputResult:
        """Queue ``text`` as a task; its secrets are masked before it leaves this process.

        The patterns are the session's and those of the agent's project when its
        working directory is on this host; a caller that already knows that directory
        (a console keeps the registry) passes ``agent_cwd`` and saves a registry read.
        A request id makes a resend safe: the agent queues an id at most once.
        Its ``redacted`` counts the secrets masked here and by the agent.
        """
        clean, masked = await self._clean(text, agent_cwd)
        params = build_params(InputParams, "input", text=clean, source=source)
        reply = await self.request(
            "input",
            InputResult,
            params,
            timeout=timeout,
            request_id=request_id,
            claim=claim,
            takeover=takeover,
        )
        return _masked_too(reply, masked)

    async def relay(
        self,
        text: str,
        *,
        source: str,
        hops: int = 1,
        trace_id: str | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> InputResult:
        """Queue ``text`` from an external runtime (``source="mcp:RUNTIME"``), without ownership.

        What ``ateam mcp`` does for its clients: refused while a console owns the agent
        unless its owner allowed external input. The receiving agent records the source,
        and its owner's console shows it. (Teammates send with the agent's ``team.send``
        tool: an ``agent:NAME`` source must carry that agent's identity token, which no
        client session has.)

        Raises:
            BadRequest: ``source`` is not ``mcp:RUNTIME``.
            OwnershipDenied: an owner who has not allowed external input.
        """
        if not source.startswith("mcp:"):
            raise BadRequest(f"relay sources are mcp:RUNTIME; got {source!r}")
        clean, masked = await self._clean(text)
        thread = {} if trace_id is None else {"trace_id": trace_id}
        params = build_params(
            TeamInputParams, "team.input", text=clean, source=source, hops=hops, **thread
        )
        reply = await self.request(
            "team.input", InputResult, params, timeout=timeout, request_id=request_id
        )
        return _masked_too(reply, masked)

    async def acknowledge(self, *, claim: bool = True, takeover: bool = False) -> int:
        """Clear the damage alerts ``ps`` shows for the agent; how many there were."""
        reply = await self.request("alert.ack", AlertAckResult, claim=claim, takeover=takeover)
        return reply.acknowledged

    async def allow_external(self, allowed: bool = True) -> bool:
        """As the agent's owner, let external runtimes queue input (or stop them).

        Returns False when this session does not hold the agent.
        """
        return await self._session.ownership.allow_external(self.id, allowed)

    async def mark_read(self, offset: int) -> bool:
        """As its owner, say the agent's events are read up to ``offset`` (issue 28 §3)."""
        return await self._session.ownership.mark_read(self.id, offset)

    async def interrupt(self, *, claim: bool = True, takeover: bool = False) -> str | None:
        """Stop the current task after its current chunk; its id, or None when idle."""
        reply = await self.request("interrupt", InterruptResult, claim=claim, takeover=takeover)
        return reply.task_id or None

    async def cancel(
        self, *, hard: bool = False, claim: bool = True, takeover: bool = False
    ) -> str | None:
        """Stop the current task (``hard``: at once); its id, or None when idle."""
        params = build_params(CancelParams, "cancel", hard=hard)
        reply = await self.request("cancel", CancelResult, params, claim=claim, takeover=takeover)
        return reply.task_id or None

    async def stop(self, *, wait: float = 10.0, claim: bool = True, takeover: bool = False) -> bool:
        """Ask the agent to shut down; True once it has left the registry within ``wait``.

        Its current task goes back to its queue, for its next start.
        """
        await self.request("shutdown", ShutdownResult, claim=claim, takeover=takeover)
        deadline = time.monotonic() + wait
        # Leaving the registry is the last step of an agent's shutdown.
        while await self.status() is not None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(STOP_POLL_S)
        return True

    async def _clean(self, text: str, cwd: str | None = None) -> tuple[str, int]:
        """``text`` masked with the patterns that apply to this agent, and how many."""
        if cwd is None:
            view = await self.status()
            cwd = view.entry.cwd if view is not None else None
        clean = redactor_for(cwd, self._session.redactor).scrub(text)
        return clean.text, clean.replaced


def _masked_too(reply: InputResult, masked: int) -> InputResult:
    """``reply`` counting the secrets masked here before sending, besides the agent's."""
    return reply.model_copy(update={"redacted": masked + reply.redacted})


class Attachment:
    """An agent held by this session: entered by ``async with``, released on exit.

    The hold is refreshed in the background while inside; :attr:`lost` turns true if
    another session took the agent over meanwhile (changing calls are then refused).
    """

    def __init__(self, handle: AgentHandle, *, takeover: bool) -> None:
        self.handle = handle
        self._takeover = takeover
        self.previous: OwnerInfo | None = None
        """Who held the agent before a takeover, if anyone."""
        self.lost = False
        self._keeper: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Attachment:
        self.previous = await self.handle.acquire(takeover=self._takeover)
        self._keeper = asyncio.create_task(self._keep(), name=f"attach:{self.handle.id}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None
        if self.lost:
            self.handle.disown()
        else:
            await self.handle.release()

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(OWNER_REFRESH_S)
            try:
                still = await self.handle.refresh()
            except CONNECTION_ERRORS:
                continue  # the claim's TTL outlasts a short outage; retry next round
            if not still:
                self.lost = True
                self.handle.disown()
                return

    async def call(
        self,
        method: str,
        params: Params | Mapping[str, object] | None = None,
        *,
        timeout: float | None = None,
        request_id: str | None = None,
        claim: bool = False,
        takeover: bool = False,
    ) -> object:
        """:meth:`AgentHandle.call` as the holder."""
        return await self.handle.call(
            method, params, timeout=timeout, request_id=request_id, claim=claim, takeover=takeover
        )

    async def request(
        self,
        method: str,
        result: type[R],
        params: Params | None = None,
        *,
        timeout: float | None = None,
        request_id: str | None = None,
        claim: bool = False,
        takeover: bool = False,
    ) -> R:
        """:meth:`AgentHandle.request` as the holder."""
        return await self.handle.request(
            method,
            result,
            params,
            timeout=timeout,
            request_id=request_id,
            claim=claim,
            takeover=takeover,
        )

    async def send(
        self,
        text: str,
        *,
        source: str = "api",
        request_id: str | None = None,
        timeout: float | None = None,
        claim: bool = True,
        takeover: bool = False,
        agent_cwd: str | None = None,
    ) -> InputResult:
        """:meth:`AgentHandle.send` as the holder."""
        return await self.handle.send(
            text,
            source=source,
            request_id=request_id,
            timeout=timeout,
            claim=claim,
            takeover=takeover,
            agent_cwd=agent_cwd,
        )


class PlanApi:
    """The agent's ``plan.md``: read by anyone, changed by its holder or a one-call claim."""

    def __init__(self, handle: AgentHandle) -> None:
        self._handle = handle

    async def get(self, *, timeout: float | None = None) -> PlanReadResult:
        return await self._handle.request("plan.read", PlanReadResult, timeout=timeout)

    async def read(self, *, timeout: float | None = None) -> str:
        """The plan's text; empty when the agent has none yet."""
        return (await self.get(timeout=timeout)).text

    async def write(
        self, text: str, *, claim: bool = True, takeover: bool = False
    ) -> PlanWriteResult:
        """Replace the plan with ``text`` (its secrets masked first)."""
        return await self._store("plan.write", text, claim=claim, takeover=takeover)

    async def append(
        self, text: str, *, claim: bool = True, takeover: bool = False
    ) -> PlanWriteResult:
        """Add a line to the plan (its secrets masked first)."""
        return await self._store("plan.append", text, claim=claim, takeover=takeover)

    async def delete(self, *, claim: bool = True, takeover: bool = False) -> bool:
        """Remove the plan; False if there was none."""
        params = build_params(ConfirmParams, "plan.delete", confirm=True)
        reply = await self._handle.request(
            "plan.delete", PlanDeleteResult, params, claim=claim, takeover=takeover
        )
        return reply.deleted

    async def _store(
        self, method: str, text: str, *, claim: bool, takeover: bool
    ) -> PlanWriteResult:
        clean, masked = await self._handle._clean(text)
        model = AnyTextParams if method == "plan.write" else TextParams
        reply = await self._handle.request(
            method,
            PlanWriteResult,
            build_params(model, method, text=clean),
            claim=claim,
            takeover=takeover,
        )
        return reply.model_copy(update={"redacted": masked})
