"""What the agent reports about itself (``status``, ``memory.stats``, ``alert.ack``).

No one part owns a status: the registry entry and the state are the
:class:`~ateam.agent.loop.status.AgentStatus`'s, the offset the publisher's, the queue
length the queue's, whether the bus answers the upkeep's and how full the context is
compaction's. :class:`Reporter` puts them together, and is what the composition root
hands the RPC service and the REPL as their :class:`~ateam.agent.runtime.port.Reports`.
"""

from __future__ import annotations

from collections.abc import Callable

from ateam.agent.context.compaction import Compactor
from ateam.agent.loop.status import AgentState, AgentStatus
from ateam.agent.state.history import History
from ateam.agent.state.queue import DurableQueue
from ateam.bus.publisher import EventPublisher
from ateam.providers.base import Headroom
from ateam.wire.results import MemoryStatsResult, StatusResult

__all__ = ["Reporter"]


class Reporter:
    """The agent's own account of itself, drawn from the parts that know each piece.

    Args:
        status: The state and the registry entry.
        events: The event stream, for the last offset.
        queue: The queue, for its live length.
        history: The conversation, which ``history.*`` reads and clears.
        compactor: How full the context is.
        headroom: The provider's rate-limit headroom as last seen, if it said.
        bus_connected: Whether the bus answers now.
        bus: The bus, described for a reader (never with its password).
    """

    def __init__(
        self,
        *,
        status: AgentStatus,
        events: EventPublisher,
        queue: DurableQueue,
        history: History,
        compactor: Compactor,
        headroom: Callable[[], Headroom | None],
        bus_connected: Callable[[], bool],
        bus: str,
    ) -> None:
        self._status = status
        self._events = events
        self._queue = queue
        self.history = history
        self._compactor = compactor
        self._headroom = headroom
        self._bus_connected = bus_connected
        self._bus = bus

    @property
    def id(self) -> str:
        return self._status.id

    @property
    def state(self) -> AgentState:
        return self._status.state

    def status(self) -> StatusResult:
        """The registry entry with the live state, queue length, offsets and bus."""
        # The entry is published every few seconds; a status asked for now says what
        # holds now, so the fields that move between beats are read live.
        return StatusResult.model_validate(
            {
                **self._status.entry.to_wire(),
                "state": self._status.state.value,
                "last_offset": self._events.last_offset,
                "queue_len": len(self._queue),
                "bus_connected": self._bus_connected(),
                "redis": self._bus,
            }
        )

    def memory_stats(self) -> MemoryStatsResult:
        return MemoryStatsResult.model_validate(self._compactor.stats(self._headroom()))

    def acknowledge_alerts(self) -> int:
        """Clear the damage reports ``ps`` shows; how many there were."""
        return self._status.acknowledge()

    def touch(self) -> None:
        """The entry changed outside the work loop: publish it with the next beat, now."""
        self._status.touch()
