"""What teammates' messages look like in the queue, and the mailbox taken in at start.

A message from a teammate is queued as text with a first line that says who sent it,
so the model answers the right one; an answer it asked for (``team.send`` with
``reply: true``) says so and names the message it answers. The same text is made for a
message that arrives over ``team.input`` and for one kept in the mailbox while this
agent was not running (:mod:`ateam.bus.mailbox`), which :class:`MailboxIntake` queues at
start, oldest first and each exactly once, and then now and then while the agent runs
(a sender that saw it stopped a moment before it registered).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from redis.exceptions import RedisError

from ateam.agent.runtime.port import Intake
from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.events import EventType
from ateam.bus.mailbox import Mailbox, MailMessage
from ateam.bus.publisher import EventPublisher
from ateam.config.names import check_name
from ateam.errors import StorageFull
from ateam.wire.rpc import TeamInputParams

__all__ = ["FROM_HEADINGS", "MAILBOX_POLL_S", "MailboxIntake", "asked_by", "team_input_text"]

FROM_HEADINGS = {
    "agent": "[from teammate {sender}, through team.send]",
    "mcp": "[from {sender}, an external runtime, through ateam mcp]",
}
"""The first line of a ``team.input`` task, by source kind."""
REPLY_HEADING = "[reply from teammate {sender} to your team.send {item}]"
"""The first line of an answer this agent asked for."""
MAILBOX_POLL_S = 3.0
FIRST_DELIVERY_S = 5.0
"""The longest a start waits on its mailbox before serving (the rest comes later)."""
"""How often a running agent looks in its mailbox (a message kept as it was starting)."""

log = logging.getLogger(__name__)

_BUS_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, RedisError)
_FIRST_ERRORS: tuple[type[BaseException], ...] = (*_BUS_ERRORS, TimeoutError)


def team_input_text(kind: str, sender: str, text: str, *, in_reply_to: str | None) -> str:
    """The queued text of a message from ``kind:sender``: who sent it, then the text."""
    if in_reply_to is not None and kind == "agent":
        heading = REPLY_HEADING.format(sender=sender, item=in_reply_to)
    else:
        heading = FROM_HEADINGS[kind].format(sender=sender)
    return f"{heading}\n{text}"


def asked_by(project: str, kind: str, sender: str, params: TeamInputParams) -> str | None:
    """The teammate an item's answer goes back to, if it asked; a reply never asks."""
    if kind != "agent" or not params.reply or params.in_reply_to is not None:
        return None
    return f"{project}/{sender}"


class MailboxIntake:
    """Queues what waited in this agent's mailbox: in order, each message once."""

    def __init__(
        self,
        mailbox: Mailbox,
        agent_id: str,
        intake: Intake,
        events: EventPublisher,
        *,
        max_hops: Callable[[], int],
    ) -> None:
        self._mailbox = mailbox
        self._id = agent_id
        self._intake = intake
        self._events = events
        self._max_hops = max_hops
        self.delivered = 0
        """Messages queued from the mailbox by this process."""

    async def run(self) -> None:
        """Say this agent may receive mail, take what waits, then look every few seconds."""
        backoff = Backoff()
        known = False
        while True:
            try:
                if not known:
                    await self._mailbox.mark_known(self._id)
                    known = True
                await self.deliver()
            except _BUS_ERRORS as exc:
                log.warning("mailbox not read: %s", exc or type(exc).__name__)
                await asyncio.sleep(backoff.next_delay())
                continue
            except StorageFull as exc:
                log.warning("mailbox left for later: %s", exc.message)
            backoff = Backoff()
            await asyncio.sleep(MAILBOX_POLL_S)

    async def deliver(self) -> int:
        """Queue every kept message, oldest first; how many were taken out.

        Each is queued (fsynced) before it leaves the mailbox, under the request id it
        was kept with: a kill between the two leaves it at the head, and queueing it
        again at the next start finds that id and adds nothing.

        Raises:
            StorageFull: no room to queue; the message stays first in the mailbox.
        """
        taken = 0
        while (raw := await self._mailbox.head(self._id)) is not None:
            try:
                message = MailMessage.decode(raw)
            except ValueError as exc:
                self._warn(f"mailbox: a message was dropped, unreadable: {exc}")
            else:
                self._queue(message)
            await self._mailbox.remove(self._id, raw)
            taken += 1
        self.delivered += taken
        return taken

    def _queue(self, message: MailMessage) -> None:
        kind, _, sender = message.source.partition(":")
        from_agent = kind == "agent" and bool(sender)
        limit = self._max_hops()
        if from_agent and message.in_reply_to is None and message.hops > limit:
            self._warn(
                f"mailbox: message {message.id} from {sender} dropped: hop {message.hops} of "
                f"its thread is over this agent's limit of {limit} (team.max_hops)"
            )
            return
        text = (
            team_input_text(kind, sender, message.text, in_reply_to=message.in_reply_to)
            if from_agent
            else message.text
        )
        queued = self._intake.enqueue(
            text,
            source=message.source,
            rid=message.rid,
            caller=message.caller,
            trace_id=message.trace_id,
            hops=min(message.hops, limit) if from_agent else 0,
            reply_to=self._asker(sender) if message.reply_to and from_agent else None,
        )
        if queued.created:
            log.info("mailbox: %s queued as %s", message.id, queued.item.id)

    def _asker(self, sender: str) -> str | None:
        """Where a kept message's answer goes: its sender in this agent's project, as
        ``team.input`` decides it. A mailbox entry is data anyone with the project's keys
        could write: its own ``reply_to`` is not trusted to name another project."""
        try:
            check_name(sender, "agent")
        except ValueError:
            return None
        return f"{self._id.split('/', 1)[0]}/{sender}"

    async def take_in_first(self, timeout_s: float = FIRST_DELIVERY_S) -> None:
        """At start, before the agent serves: what waited is queued before new input.

        Bounded: a bus out of reach or a full disk leaves the mail to :meth:`run`.
        """
        try:
            async with asyncio.timeout(timeout_s):
                await self._mailbox.mark_known(self._id)
                await self.deliver()
        except _FIRST_ERRORS as exc:
            log.warning("mailbox not read before serving: %s", exc or type(exc).__name__)
        except StorageFull as exc:
            log.warning("mailbox left for later: %s", exc.message)

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self._events.emit(EventType.WARN, msg=message, code="mailbox.dropped")
