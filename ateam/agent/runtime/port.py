"""What the RPC service and the local REPL may use of a running agent, as small protocols.

Declared here, on the users' side, so :mod:`ateam.agent.runtime.service` and
:mod:`ateam.agent.runtime.repl` depend on these protocols and not on
:class:`~ateam.agent.runtime.process.Agent`, which the composition root
(:mod:`ateam.agent.runtime.build`) hands them. Each protocol is one concern of the
catalogue: :class:`Intake` (input and the queue), :class:`Reports` (status, usage and
history), :class:`Stores` (the plan, the knowledge base and the prompt) and :class:`Control`
(models, approvals, tools, the handoff and stopping). The service needs all four
(:class:`ServicePort`); the REPL's own lines only the first two (:class:`ReplPort`). None
names the lifecycle (start, signals, the loops), the bus upkeep or the work loop's state.
What the agent reports crosses as the wire's result models, so a handler returns it as is.
"""

from __future__ import annotations

from typing import Protocol

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
from ateam.wire.results import (
    MemoryStatsResult,
    ModelUseResult,
    OffloadProposal,
    StatusResult,
    SummarizeResult,
)

__all__ = ["Control", "EventSink", "Intake", "ReplPort", "Reports", "ServicePort", "Stores"]


class EventSink(Protocol):
    """Where a handler announces progress (``kb.progress``): the agent's event stream."""

    def emit(self, etype: str, **fields: object) -> int: ...


class Intake(Protocol):
    """Input and the queue: ``input``, ``team.input``, ``interrupt``, ``cancel``, ``queue.*``."""

    @property
    def id(self) -> str: ...

    @property
    def config(self) -> AgentConfig: ...

    @property
    def queue(self) -> DurableQueue: ...

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

    def enqueue_wakeup(self) -> None:
        """Tell the worker that items were added behind its back (a retry)."""
        ...

    def touch_registry(self) -> None:
        """The queue changed outside the work loop: publish the entry at the next beat."""
        ...

    def interrupt(self, *, hard: bool = False) -> str | None: ...

    async def external_input_allowed(self) -> bool:
        """Whether an external runtime may queue input now (no owner, or one who allows it)."""
        ...

    async def teammate_proven(self, agent_id: str, auth_sha256: str | None) -> bool:
        """Whether a request whose ``auth`` hashes to ``auth_sha256`` comes from the
        running agent ``agent_id`` (its published identity, :mod:`ateam.bus.identity`)."""
        ...


class Reports(Protocol):
    """What the agent tells about itself: ``status``, ``memory.stats``, ``history.*``."""

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> AgentState: ...

    @property
    def history(self) -> History: ...

    def status(self) -> StatusResult:
        """The registry entry with the live state, queue length, offsets and bus."""
        ...

    def memory_stats(self) -> MemoryStatsResult:
        """Tokens in the context, how full it is and what it holds."""
        ...

    def acknowledge_alerts(self) -> int:
        """Clear the damage reports ``ps`` shows; how many there were."""
        ...


class Stores(Protocol):
    """The agent's texts: ``plan.*``, ``kb.*``, ``prompt.*``."""

    @property
    def id(self) -> str: ...

    @property
    def config(self) -> AgentConfig: ...

    @property
    def redactor(self) -> Redactor: ...

    @property
    def events(self) -> EventSink: ...

    @property
    def kb(self) -> AgentKb: ...

    @property
    def prompts(self) -> Prompts: ...

    def prompt_changed(self, reason: str) -> None: ...

    def request_prompt_reload(self, reason: str) -> bool: ...


class Control(Protocol):
    """How the agent works and stops: ``model.*``, ``approval.*``, ``tools.list``,
    ``handoff.show``, ``offload.propose``, ``context.summarize``, ``shutdown``."""

    @property
    def config(self) -> AgentConfig: ...

    @property
    def redactor(self) -> Redactor: ...

    @property
    def router(self) -> ModelRouter: ...

    @property
    def handoff(self) -> HandoffStore: ...

    @property
    def approvals(self) -> Approvals: ...

    @property
    def policy(self) -> ToolPolicy: ...

    async def use_model(self, model: str | None) -> ModelUseResult: ...

    def propose_offload(self, name: str | None = None) -> OffloadProposal: ...

    async def summarize(self, why: str) -> SummarizeResult: ...

    async def restart_marker(self) -> None: ...

    def request_shutdown(self, code: int = 0) -> None: ...


class ServicePort(Intake, Reports, Stores, Control, Protocol):
    """The whole catalogue's view of the agent.

    What :class:`~ateam.agent.runtime.service.AgentService` is given.
    """


class ReplPort(Intake, Reports, Protocol):
    """What the REPL's own lines use (queueing text, the prompt, the F1 panel, Ctrl+C);
    its commands go through the service, as the console's do."""
