"""Reading agents' event streams: one multi-agent reader, or one agent's iterator.

Both stand on :class:`~ateam.bus.events.EventTail`, which delivers each event once and
in order per agent across reconnects, and reports trimmed ranges as :class:`Gap`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from typing import TYPE_CHECKING

from ateam.bus.events import Event, Gap, decode_chunk
from ateam.bus.tail import EventTail
from ateam.client.readmark import ReadReports
from ateam.wire.events import EventType

if TYPE_CHECKING:
    from ateam.client._session import Session

__all__ = ["DEFAULT_BACKLOG", "Tail", "event_json", "follow_one", "json_ready"]

DEFAULT_BACKLOG = 100
"""Events a tail started without an offset shows first: the agent's recent screen."""

Item = Event | Gap


class Tail:
    """Follows the streams of any number of agents, each from its own offset.

    Agents can be added and removed while iterating (a console's ``/tail``). Iterate
    :meth:`batches` (or the tail itself) to follow with reconnects; :meth:`poll` reads
    once. A dropped link is reported through ``on_connection(connected, failures)``.
    """

    def __init__(
        self,
        reader: EventTail,
        *,
        marks: ReadReports | None = None,
        held: Collection[str] = (),
    ) -> None:
        self._reader = reader
        self._marks = marks
        self._held = held
        """The agents this session owns (a live view): after each batch is handled, its
        read mark of those is reported, and their agents hold a command's output while
        it lags too far (issue 28 §3). Tails of anything else never slow an agent."""

    @classmethod
    def of_session(
        cls, session: Session, watcher: Callable[[bool, int], None] | None = None
    ) -> Tail:
        """A reader for ``session``: what the session holds, it reports reading."""
        reader = EventTail(session.client, session.keys, on_connection_change=watcher)
        marks = ReadReports(session.ownership.mark_read)
        return cls(reader, marks=marks, held=session.held)

    def add(self, agent: str, after: int | None = None, *, backlog: int = DEFAULT_BACKLOG) -> None:
        """Follow ``agent`` from the event after offset ``after``.

        ``after=None`` starts with the newest ``backlog`` events; ``after=0`` replays
        everything retained.
        """
        self._reader.add(agent, after, backlog=backlog)

    def remove(self, agent: str) -> None:
        self._reader.remove(agent)

    async def pin(self, agent: str) -> None:
        """Fix where reading ``agent`` starts, now; a held agent is told at once.

        Called as a console attaches: the agent may flood the moment it is given a
        command, before this reader's first read, and neither the start point nor the
        owner's mark may wait for that read (issue 28 §3).
        """
        start = await self._reader.pin(agent)
        if self._marks is not None and start is not None and agent in self._held:
            self._marks.note(agent, start)

    def position(self, agent: str) -> int | None:
        """The offset of the last event of ``agent`` delivered."""
        return self._reader.position(agent)

    def trusted(self, agent: str) -> int | None:
        """The newest offset of ``agent`` delivered and known to be its own.

        What a console saves as its resume point: an entry read in doubt may turn out to
        be a stranger's, and a restart must resume before it.
        """
        return self._reader.trusted(agent)

    @property
    def agents(self) -> list[str]:
        return self._reader.agents

    async def poll(self, *, wait: bool = True) -> list[Item]:
        """One read across every followed stream; blocks briefly if ``wait``.

        Redis errors reach the caller (see :func:`~ateam.client.bus_errors`).
        """
        return await self._reader.poll(wait=wait)

    async def batches(self) -> AsyncIterator[list[Item]]:
        """Non-empty batches, forever, reconnecting with backoff when Redis is away."""
        async for batch in self._reader.batches():
            # Everything before the batch is handled: said before the caller takes it,
            # or a caller stuck in its very first batch (a terminal that stopped
            # reading) would never have said anything, and nothing would hold the agent.
            self._mark_read(batch)
            yield batch
            # Back here once the caller has handled the batch: read means handled.
            self._mark_read(())

    def _mark_read(self, pending: list[Item] | tuple[()]) -> None:
        """Report, for each held agent, the offset before its first ``pending`` item."""
        if self._marks is None:
            return
        for agent in self._held:
            first = next((item for item in pending if item.agent == agent), None)
            if first is None:
                self._marks.note(agent, self._reader.position(agent))
            else:
                self._marks.note(
                    agent, (first.offset if isinstance(first, Event) else first.first) - 1
                )

    async def __aiter__(self) -> AsyncIterator[Item]:
        async for batch in self.batches():
            for item in batch:
                yield item


async def follow_one(
    tail: Tail, agent: str, from_offset: int | None, *, follow: bool, backlog: int
) -> AsyncIterator[Item]:
    """``agent``'s events from offset ``from_offset`` (that event first) on.

    Without ``follow`` it ends once everything already in the stream is delivered.
    """
    after = None if from_offset is None else max(from_offset - 1, 0)
    tail.add(agent, after, backlog=backlog)
    if follow:
        async for item in tail:
            yield item
        return
    while items := await tail.poll(wait=False):
        for item in items:
            yield item


CHUNKS = frozenset({EventType.TOKEN, EventType.TOOL_OUTPUT})
"""Event types whose text arrives as chunks (``text``, or ``bin`` bytes)."""


def json_ready(value: object, max_chars: int | None = None) -> object:
    """``value`` as JSON can carry it: bytes as text, unknowns as text, and strings longer
    than ``max_chars`` (if given) cut, saying how much was left out."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        if max_chars is None or len(value) <= max_chars:
            return value
        return f"{value[:max_chars]}… [{len(value) - max_chars} more characters]"
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(key): json_ready(item, max_chars) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(item, max_chars) for item in value]
    return json_ready(str(value), max_chars)


def event_json(event: Event, max_chars: int | None = None) -> dict[str, object]:
    """One event as JSON (``ateam tail --json``, MCP ``agent_tail``): ``offset``, ``type``,
    ``ts`` and ``data``, where a chunk of text or output comes as ``text``."""
    data = dict(event.data)
    if event.type in CHUNKS:
        data["text"] = decode_chunk(data).decode("utf-8", "replace")
        data.pop("bin", None)
        data.pop("b64", None)
    return {
        "offset": event.offset,
        "type": event.type,
        "ts": event.ts,
        "data": json_ready(data, max_chars),
    }
