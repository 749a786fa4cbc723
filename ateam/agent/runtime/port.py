"""What the RPC service and the local REPL may use of a running agent: :class:`AgentPort`.

Declared here, on the users' side, so :mod:`ateam.agent.runtime.service` and
:mod:`ateam.agent.runtime.repl` depend on this protocol and not on
:class:`~ateam.agent.runtime.process.Agent`, which the composition root
(:mod:`ateam.agent.runtime.build`) hands them. The service is the agent's whole RPC
catalogue, so the port names every store the catalogue exposes and the actions it asks for;
it names nothing of the lifecycle (start, signals, the loops), the bus upkeep or the work
loop's own state.
"""

from __future__ import annotations

from typing import Any, Protocol

from ateam.agent.context.handoff import HandoffStore
from ateam.agent.context.prompts import Prompts
from ateam.agent.loop.status import AgentState
from ateam.agent.loop.worker import Queued
from ateam.agent.models.router import ModelRouter
from ateam.agent.state.history import History
from ateam.agent.state.knowledge import AgentKb
from ateam.agent.state.queue import DurableQueue
from ateam.config import AgentConfig
from ateam.redact import Redactor
from ateam.tools.approvals import Approvals
from ateam.tools.registry import ToolPolicy

__all__ = ["AgentPort", "EventSink"]


class EventSink(Protocol):
    """Where a handler announces progress (``kb.progress``): the agent's event stream."""

    def emit(self, etype: str, **fields: Any) -> int: ...


class AgentPort(Protocol):
    """A running agent as its RPC handlers and its REPL see it."""

    # who it is and what it holds -------------------------------------------------------

    @property
    def id(self) -> str: ...

    @property
    def config(self) -> AgentConfig: ...

    @property
    def redactor(self) -> Redactor: ...

    @property
    def state(self) -> AgentState: ...

    @property
    def events(self) -> EventSink: ...

    @property
    def queue(self) -> DurableQueue: ...

    @property
    def history(self) -> History: ...

    @property
    def handoff(self) -> HandoffStore: ...

    @property
    def kb(self) -> AgentKb: ...

    @property
    def prompts(self) -> Prompts: ...

    @property
    def approvals(self) -> Approvals: ...

    @property
    def policy(self) -> ToolPolicy: ...

    @property
    def router(self) -> ModelRouter: ...

    # what it reports -------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The registry entry with the live state, queue length, offsets and bus."""
        ...

    def memory_stats(self) -> dict[str, Any]:
        """Tokens in the context, how full it is and what it holds."""
        ...

    # what it is asked to do ------------------------------------------------------------

    def enqueue(
        self,
        text: str,
        *,
        source: str,
        rid: str | None = None,
        caller: str | None = None,
        trace_id: str | None = None,
        hops: int = 0,
    ) -> Queued: ...

    async def external_input_allowed(self) -> bool:
        """Whether an external runtime may queue input now (no owner, or one who allows it)."""
        ...

    async def teammate_proven(self, agent_id: str, auth_sha256: str | None) -> bool:
        """Whether a request whose ``auth`` hashes to ``auth_sha256`` comes from the
        running agent ``agent_id`` (its published identity, :mod:`ateam.bus.identity`)."""
        ...

    def enqueue_wakeup(self) -> None: ...

    def touch_registry(self) -> None: ...

    def acknowledge_alerts(self) -> int: ...

    def interrupt(self, *, hard: bool = False) -> str | None: ...

    async def use_model(self, model: str | None) -> dict[str, Any]: ...

    def propose_offload(self, name: str | None = None) -> dict[str, Any]: ...

    async def summarize(self, why: str) -> dict[str, Any]: ...

    def prompt_changed(self, reason: str) -> None: ...

    def request_prompt_reload(self, reason: str) -> bool: ...

    async def restart_marker(self) -> None: ...

    def request_shutdown(self, code: int = 0) -> None: ...
