"""Acting as one agent of the team from another process: what ``ateam mcp --as`` does.

A coding agent (Claude Code, Codex, over ACP) runs *as* an ateam agent and reaches the
team through ateam's MCP server, which its agent starts for it
(:mod:`ateam.agent.acp.teammate`). What it does there is the agent's doing: a task it
claims is the agent's claim, an item it posts is the agent's, a message it sends is the
agent's ``team.send``. A name proves nothing, so the server holds the token of the
agent's running instance (:mod:`ateam.bus.identity`), handed down in its environment,
and a :class:`TeamMember` checks it against the hash the agent's heartbeat publishes —
at start and again before each action, so the token of an instance that stopped or
restarted acts no more.

A message goes out through the agent's own sender (:mod:`ateam.bus.messenger`): the
receiver sees caller ``agent:P/NAME`` with the agent's token, source ``agent:NAME``,
and the thread's next hop. The thread is the item the agent is working on (the runtime
only works inside one), read from the agent with ``queue.current``.
"""

from __future__ import annotations

from ateam._json import JsonObject
from ateam.bus.identity import AgentIdentity, proven
from ateam.bus.messenger import TeamMessenger
from ateam.client._session import Session
from ateam.client.agent import AgentHandle
from ateam.errors import IdentityRefused
from ateam.wire.results import QueueCurrentResult

__all__ = ["TeamMember"]

THREAD_TIMEOUT_S = 5.0
"""How long a send waits for the agent to say which item (thread) it is working on."""


class TeamMember:
    """A team session acting as agent ``identity.agent``, proven by its instance's token.

    Made by :meth:`Team.member <ateam.client.Team.member>`. Calls that act check the
    proof first (:meth:`check`); the session's other calls are as any client's.

    Args:
        session: the team session's parts.
        identity: the agent id and the token its running instance handed down.
        max_hops: the agent's ``team.max_hops``: a message past it is refused here,
            before the round trip, as the agent's own ``team.send`` refuses it.
    """

    def __init__(self, session: Session, identity: AgentIdentity, *, max_hops: int) -> None:
        self._session = session
        self._identity = identity
        self._messenger = TeamMessenger(session.client, session.keys, identity, max_hops)

    def __repr__(self) -> str:  # the token stays out of logs and tracebacks
        return f"TeamMember({self.id!r})"

    @property
    def id(self) -> str:
        """The agent acted as: ``P/NAME``."""
        return self._identity.agent

    @property
    def project(self) -> str:
        return self.id.partition("/")[0]

    @property
    def max_hops(self) -> int:
        return self._messenger.max_hops

    async def check(self) -> None:
        """Succeed only while the token is the one the agent's running instance publishes.

        Raises:
            IdentityRefused: the agent is not running, or the token is not its current
                instance's (wrong, or of an instance that stopped or restarted).
        """
        session = self._session
        if await proven(session.client, session.keys, self.id, self._identity.digest):
            return
        view = await session.registry.get(self.id)
        if view is None or not view.connected:
            raise IdentityRefused(
                f"no agent {self.id} is running on this bus: only a running agent's own "
                "runtime may act as it",
                detail={"agent": self.id},
            )
        raise IdentityRefused(
            f"the token given (ATEAM_AGENT_TOKEN) is not the one {self.id}'s running "
            "instance publishes (a wrong token, or one of an instance that has restarted)",
            detail={"agent": self.id},
        )

    async def thread(self) -> tuple[int, str | None]:
        """The hops and trace id of the item the agent works on now; ``(0, None)`` if idle."""
        handle = AgentHandle(self._session, self.id)
        reply = await handle.request("queue.current", QueueCurrentResult, timeout=THREAD_TIMEOUT_S)
        if reply.current is None:
            return 0, None
        return reply.current.hops, reply.current.trace_id

    async def send(self, to: str, text: str, *, reply: bool = False) -> JsonObject:
        """Queue ``text`` at teammate ``to`` (``NAME`` or ``P/NAME``) as this agent.

        The next hop of the agent's current thread, with its trace id, exactly as the
        agent's ``team.send`` tool sends it (:class:`~ateam.bus.messenger.TeamMessenger`).
        Secrets are masked first, and counted.

        With ``reply`` the teammate's final answer comes back to the agent as an input;
        a teammate that is not running gets the message in its mailbox.

        Returns:
            ``{to, id, queued, hops, trace_id, mailbox, redacted}``.

        Raises:
            IdentityRefused: see :meth:`check`.
            BadRequest: ``to`` is malformed, of another project, or this agent.
            AgentNotFound: no such teammate has run on this bus.
            HopLimit: the thread already ran the agent's ``team.max_hops`` (or the
                receiver's).
        """
        await self.check()
        hops, trace_id = await self.thread()
        clean = self._session.redactor.scrub(text)
        sent = await self._messenger.send(
            to, clean.text, hops=hops + 1, trace_id=trace_id, reply=reply
        )
        return {**sent, "redacted": clean.replaced}
