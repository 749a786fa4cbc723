"""A person's message that waits for a stopped agent, and one text to every running agent.

:meth:`MailApi.keep` is ``ateam send --wait-for-start``: when the agent is not running,
the text (masked here first) goes to its mailbox (:mod:`ateam.bus.mailbox`) and the agent
queues it at its next start; when it runs, nothing is kept and the caller sends as usual.

:meth:`MailApi.broadcast` is ``ateam broadcast`` and ``/broadcast``: the text is sent to
each running agent of a project, as ``ateam send`` sends it (a one-call claim, refused
where another console owns the agent), and each answers for itself: the report holds the
queued id or the error of every agent.
"""

from __future__ import annotations

import asyncio

from ateam._json import JsonObject, JsonValue
from ateam.bus.mailbox import Mailbox, MailMessage
from ateam.client._session import Session
from ateam.client.agent import AgentHandle
from ateam.errors import AgentNotFound, AteamError

__all__ = ["MailApi"]


class MailApi:
    """Mailboxes and broadcasts for a person's session (``team.mail``)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    async def running(self, agent_id: str) -> bool:
        view = await self._session.registry.get(agent_id)
        return view is not None and view.connected

    async def keep(
        self,
        agent_id: str,
        text: str,
        *,
        source: str = "api",
        request_id: str | None = None,
        configured: bool = False,
    ) -> JsonObject | None:
        """Keep ``text`` for ``agent_id`` if it is not running; ``None`` if it is.

        Args:
            configured: the agent is configured in the caller's project (so it may
                never have run on this bus yet, and still be known).

        Returns:
            ``{agent, id, queued, mailbox: true, note, redacted}``: the kept message and
            its place in the mailbox.

        Raises:
            AgentNotFound: the agent is neither configured nor ever ran on this bus.
            MailboxFull: its mailbox holds as much as it may.
        """
        if await self.running(agent_id):
            return None
        mailbox = Mailbox(self._session.client, self._session.keys)
        if not (configured or await mailbox.known(agent_id)):
            raise AgentNotFound(
                f"no agent {agent_id} is running, is configured here, or has run on this bus",
                detail={"agent": agent_id},
            )
        clean = self._session.redactor.scrub(text)
        message = MailMessage.new(clean.text, source, rid=request_id, caller=self._session.name)
        place = await mailbox.put(agent_id, message)
        return {
            "agent": agent_id,
            "id": message.id,
            "queued": place,
            "mailbox": True,
            "note": f"queued for {agent_id.split('/', 1)[1]} (not running)",
            "redacted": clean.replaced,
        }

    async def pending(self, agent_id: str) -> list[MailMessage]:
        """What waits in ``agent_id``'s mailbox, oldest first."""
        return await Mailbox(self._session.client, self._session.keys).messages(agent_id)

    async def broadcast(
        self, project: str, text: str, *, source: str = "api", takeover: bool = False
    ) -> JsonObject:
        """Queue ``text`` at every running agent of ``project``.

        Returns:
            ``{project, sent, failed, agents: [{to, id, queued} | {to, error}]}``.
        """
        views = await self._session.registry.list((project,))
        targets = [view.id for view in views if view.connected]

        async def one(agent_id: str) -> JsonObject:
            try:
                sent = await AgentHandle(self._session, agent_id).send(
                    text, source=source, takeover=takeover
                )
            except AteamError as exc:
                return {"to": agent_id, "error": {"code": exc.code, "message": exc.message}}
            return {"to": agent_id, "id": sent.id, "queued": sent.queued}

        rows: list[JsonValue] = list(await asyncio.gather(*(one(t) for t in targets)))
        failed = sum(1 for row in rows if isinstance(row, dict) and "error" in row)
        return {"project": project, "sent": len(rows) - failed, "failed": failed, "agents": rows}
