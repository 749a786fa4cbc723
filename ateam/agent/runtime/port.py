"""What the RPC service and the local REPL may use of a running agent, as small protocols.

Declared here, on the users' side, so :mod:`ateam.agent.runtime.service` and
:mod:`ateam.agent.runtime.repl` depend on these protocols and not on the parts that
satisfy them. Each protocol is one concern, and the composition root
(:mod:`ateam.agent.runtime.build`) hands over the part that owns it, or a small object of
its own where the answer draws on several parts:

- :class:`Intake` (``input``, ``interrupt``, ``cancel``, ``queue.*``): the worker.
- :class:`Doors` (who may send ``team.input``; the restart marker of ``shutdown``):
  the bus upkeep, which reads the console owner and the bus.
- :class:`Reports` (``status``, ``memory.stats``, ``alert.ack``, ``history.*``): a
  :class:`~ateam.agent.runtime.reporter.Reporter`, since a status draws on several parts.
- :class:`Prompting` (``prompt.*``): the prompt reloader.
- :class:`Control` (``model.use``, ``offload.propose``, ``context.summarize``,
  ``shutdown``): a :class:`~ateam.agent.runtime.steering.Steering`, which reads each
  owner's answer (the switcher's, the handoff keeper's, compaction's) as its wire model.

The stores that answer for themselves (the knowledge base, the model router, the
handoff record, the approvals, the tool policy) are handed over as they are.
:class:`ServicePort` bundles all of it; the REPL takes the same bundle, since its
commands run the service's handlers in-process. Nothing here names the lifecycle
(start, signals, the loops) or the work loop's state. What the agent reports crosses as
the wire's result models, so a handler returns it as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ateam.agent.context.handoff import HandoffStore
from ateam.agent.context.prompts import Prompts
from ateam.agent.loop.modes import WorkModes
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

__all__ = [
    "Control",
    "Doors",
    "EventSink",
    "Intake",
    "Prompting",
    "Reports",
    "ServicePort",
]


class EventSink(Protocol):
    """Where a handler announces progress (``kb.progress``): the agent's event stream."""

    def emit(self, etype: str, **fields: object) -> int: ...


class Intake(Protocol):
    """Input and the queue: what the worker takes work from."""

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
        reply_to: str | None = None,
    ) -> Queued: ...

    def wakeup(self) -> None:
        """Items were added behind the worker's back (a retry): take them."""
        ...

    def interrupt(self, *, hard: bool = False) -> str | None: ...


class Doors(Protocol):
    """Who may come in: the console owner and teammates, as the bus says."""

    @property
    def owner(self) -> str | None: ...

    async def external_input_allowed(self) -> bool:
        """Whether an external runtime may queue input now (no owner, or one who allows it)."""
        ...

    async def teammate_proven(self, agent_id: str, auth_sha256: str | None) -> bool:
        """Whether a request whose ``auth`` hashes to ``auth_sha256`` comes from the
        running agent ``agent_id`` (its published identity, :mod:`ateam.bus.identity`)."""
        ...

    async def restart_marker(self) -> None: ...


class Reports(Protocol):
    """What the agent tells about itself, and its history."""

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

    def touch(self) -> None:
        """The entry changed outside the work loop (a cleared queue): publish it now."""
        ...


class Prompting(Protocol):
    """The system prompt, and telling the agent it changed."""

    @property
    def prompts(self) -> Prompts: ...

    def changed(self, reason: str) -> None:
        """The overlay was edited through ateam (``# text``, ``/sys edit``)."""
        ...

    def request(self, reason: str) -> bool:
        """Reload the prompt files; whether it happened now (else after the task)."""
        ...


class Control(Protocol):
    """How the agent works and stops: its model, its successor, its summary, its end."""

    async def use_model(self, model: str | None) -> ModelUseResult: ...

    def propose_offload(self, name: str | None = None) -> OffloadProposal: ...

    async def summarize(self, why: str) -> SummarizeResult: ...

    def request_shutdown(self, code: int = 0) -> None: ...


@dataclass(frozen=True, eq=False)
class ServicePort:
    """The whole catalogue's view of one agent: what
    :class:`~ateam.agent.runtime.service.AgentService` and the REPL are given."""

    config: AgentConfig
    redactor: Redactor
    events: EventSink
    intake: Intake
    doors: Doors
    reports: Reports
    prompting: Prompting
    control: Control
    kb: AgentKb
    router: ModelRouter
    handoff: HandoffStore
    approvals: Approvals
    policy: ToolPolicy
    modes: WorkModes | None = None
    """Plan approval and delegate mode (``plan.approve``, ``delegate.set`` …)."""

    @property
    def id(self) -> str:
        return self.config.id
