"""How the catalogue steers the agent: its model, its successor, its summary, its end.

Each answer has its own owner — the model switcher, the handoff keeper, compaction and
the status — and each owner answers in its own terms. :class:`Steering` is where those
answers become the wire's result models, once, so the RPC service returns them as they
are; the composition root hands it over as the service's
:class:`~ateam.agent.runtime.port.Control`.
"""

from __future__ import annotations

from ateam.agent.context.compaction import Compactor
from ateam.agent.context.successor import HandoffKeeper
from ateam.agent.loop.status import AgentStatus
from ateam.agent.loop.switching import ModelSwitcher
from ateam.wire.results import ModelUseResult, OffloadProposal, SummarizeResult

__all__ = ["Steering"]


class Steering:
    """The catalogue's levers on a running agent, each pulled on its owner.

    Args:
        switcher: Pins and unpins models (``/use``).
        keeper: Writes the handoff and proposes a successor (``/offload``).
        compactor: Re-summarises the working context (``/summarize``).
        status: Where a shutdown is requested.
    """

    def __init__(
        self,
        *,
        switcher: ModelSwitcher,
        keeper: HandoffKeeper,
        compactor: Compactor,
        status: AgentStatus,
    ) -> None:
        self._switcher = switcher
        self._keeper = keeper
        self._compactor = compactor
        self._status = status

    async def use_model(self, model: str | None) -> ModelUseResult:
        """``/use MODEL`` pins a model (``None`` unpins)."""
        return ModelUseResult.model_validate(await self._switcher.use(model))

    def propose_offload(self, name: str | None = None) -> OffloadProposal:
        """A spec for a fresh agent to take over this one's work (SPEC §11 ``/offload``)."""
        return OffloadProposal.model_validate(self._keeper.propose_offload(name))

    async def summarize(self, why: str) -> SummarizeResult:
        """Re-summarise the working context from recent history (SPEC §8)."""
        return SummarizeResult.model_validate(await self._compactor.summarize(why))

    def request_shutdown(self, code: int = 0) -> None:
        """Stop the process with ``code`` (the first request's code wins)."""
        self._status.request_shutdown(code)
