"""The answer to a teammate's ``team.send`` with ``reply: true``, sent back (issue 26).

The worker calls :meth:`Replier.answer_back` when such an item ends, before it marks
the item done: the final answer (or the error of a failed task) goes to the asker as an
input of its own, through its ``team.input``, or into its mailbox when it is not
running. The request id comes from the item id, so the send a restart repeats (killed
after sending, before the item was marked done) is recognised by the asker's queue.

A bus out of reach is waited out: the answer is owed. A refusal that waiting will not
change (the asker's mailbox is full, the asker is unknown) is reported as an event and
the item is finished all the same; a stop meanwhile leaves the item unfinished, so the
next start sends the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from redis.exceptions import NoPermissionError, RedisError

from ateam.agent.loop.status import AgentStatus
from ateam.agent.loop.task import TaskOutcome
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.events import EventType
from ateam.bus.messenger import TeamMessenger
from ateam.bus.publisher import EventPublisher
from ateam.errors import AteamError, RedisUnavailable, RpcTimeout
from ateam.wire.rpc import MAX_HOPS_CEILING

__all__ = ["Replier", "reply_text"]

log = logging.getLogger(__name__)

_RETRIED: tuple[type[BaseException], ...] = (
    *CONNECTION_ERRORS,
    RedisError,
    RedisUnavailable,
    RpcTimeout,
)
"""Worth waiting out: the bus, or an asker too busy to acknowledge in time."""

REPLY_MAX_BYTES = 64 * 1024
"""The most of an answer a reply carries; the whole answer stays in this agent's history.
Well under what one ``team.input`` request may be, its envelope included."""


def reply_text(outcome: TaskOutcome) -> str:
    """What the asker reads: the final answer, or why there is none, clipped to a message."""
    if outcome.ok:
        text = outcome.text or "(done, with no answer text)"
    else:
        text = f"(the task failed: {outcome.error or 'no reason given'})"
    data = text.encode("utf-8")
    if len(data) <= REPLY_MAX_BYTES:
        return text
    kept = data[:REPLY_MAX_BYTES].decode("utf-8", errors="ignore")
    return f"{kept}\n[reply clipped: {len(data) - len(kept.encode())} more bytes in my history]"


class Replier:
    """Sends an item's answer to the teammate that asked for it."""

    def __init__(
        self,
        messenger: TeamMessenger,
        status: AgentStatus,
        events: EventPublisher,
        redact: Callable[[str], str],
    ) -> None:
        self._messenger = messenger
        self._redact = redact
        self._status = status
        self._events = events

    async def answer_back(self, item: QueueItem, outcome: TaskOutcome) -> bool:
        """Send ``outcome`` to ``item.reply_to``; ``False`` if the agent stopped first."""
        asker = item.reply_to
        if asker is None:
            return True
        backoff = Backoff()
        while not self._status.stop.is_set():
            try:
                sent = await self._messenger.answer(
                    asker,
                    # Masked before it leaves: it may wait in a mailbox on the bus.
                    self._redact(reply_text(outcome)),
                    # One more hop of the thread, within what team.input can carry.
                    hops=min(item.hops + 1, MAX_HOPS_CEILING),
                    trace_id=item.trace_id,
                    item_id=item.id,
                )
            except NoPermissionError as exc:
                return self._not_sent(item, asker, str(exc), "redis.noperm")
            except _RETRIED as exc:
                log.warning("reply to %s not sent yet (%s); trying again", asker, exc)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(backoff.next_delay()):
                        await self._status.stop.wait()
                continue
            except AteamError as exc:
                return self._not_sent(item, asker, exc.message, exc.code)
            where = "its mailbox (not running)" if sent.get("mailbox") else f"{sent.get('id')}"
            log.info("reply to %s for %s: %s", asker, item.id, where)
            return True
        return False

    def _not_sent(self, item: QueueItem, asker: str, why: str, code: str) -> bool:
        """A reply refused for good: told as a warning, and the item finished anyway."""
        message = f"reply to {asker} for {item.id} not sent: {why}"
        log.warning("%s", message)
        self._events.emit(
            EventType.WARN, msg=message, code=code, task_id=item.id, trace_id=item.trace_id
        )
        return True
