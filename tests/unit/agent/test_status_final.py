"""``shutdown`` is the agent's last state: a worker still between two awaits of going
idle (an ``agent_idle`` hook, an idle notice) when the stop began cannot undo it."""

from __future__ import annotations

from typing import Any

from ateam.agent.loop.status import AgentState, AgentStatus
from ateam.wire.registry import AgentEntry


class Events:
    def __init__(self) -> None:
        self.states: list[str] = []

    def emit(self, type: Any, **data: Any) -> None:
        self.states.append(data["state"])


def test_nothing_leaves_shutdown() -> None:
    events = Events()
    status = AgentStatus(
        AgentEntry(id="p/zeus", name="zeus", project="p"), events, write_fence=None
    )  # type: ignore[arg-type]
    status.set(AgentState.IDLE)
    status.set(AgentState.SHUTDOWN)
    status.set(AgentState.IDLE)  # the worker's late step
    status.set(AgentState.BUSY)
    assert status.state is AgentState.SHUTDOWN
    assert status.entry.state == "shutdown"
    assert events.states == ["idle", "shutdown"]
