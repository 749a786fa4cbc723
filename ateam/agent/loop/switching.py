"""Model switching (SPEC §7): to a fallback and back, pinned by ``/use``, or for a larger window.

Every switch goes through :meth:`ModelSwitcher.switch`: the handoff is verified (or
rewritten) first, the router moves, the switch is recorded in the handoff history, the
next call carries the handoff, and everyone is told (a ``model.switch`` event and the
registry). The switches the task loop decides (failures, low headroom) call it through the
agent's hooks; the ones decided between tasks (a full context, the primary healthy again)
are made here.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ateam._json import JsonObject
from ateam.agent.context.compaction import Compactor
from ateam.agent.context.handoff import HandoffStore
from ateam.agent.context.successor import HandoffKeeper
from ateam.agent.context.window import ContextWindow
from ateam.agent.loop.control import cancel_quietly
from ateam.agent.loop.status import AgentStatus
from ateam.agent.models.router import ModelRouter, Reason
from ateam.agent.state.queue_item import TaskIds
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.config import AgentConfig
from ateam.errors import AteamError

__all__ = ["ModelSwitcher"]

log = logging.getLogger(__name__)


class ModelSwitcher:
    """Moves the agent between its models, keeping the handoff and everyone informed."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        router: ModelRouter,
        handoff: HandoffStore,
        keeper: HandoffKeeper,
        window: ContextWindow,
        compactor: Compactor,
        status: AgentStatus,
        events: EventPublisher,
    ) -> None:
        self._config = config
        self._router = router
        self._handoff = handoff
        self._keeper = keeper
        self._window = window
        self._compactor = compactor
        self._status = status
        self._events = events

    async def switch(
        self, from_model: str, to_model: str, reason: Reason | None, ids: TaskIds
    ) -> None:
        """Move to ``to_model``: verify the handoff, record the switch, tell everyone."""
        entry = self._status.entry
        why = str(reason) if reason is not None else Reason.PINNED.value
        record, validity = self._handoff.show()
        if not validity.ok:
            # Stale or missing: write a fresh one from what the agent knows now.
            self._keeper.refresh(status="in_progress" if self._status.control else "idle")
            record, validity = self._handoff.show()
        if not validity.ok:
            self._events.emit(
                EventType.WARN,
                msg=f"switching {from_model} → {to_model} with an incomplete handoff "
                f"({validity.reason})",
                code="handoff.incomplete",
                **ids,
            )
            why = Reason.INCOMPLETE_HANDOFF.value
        else:
            self._keeper.announce("used", record or {}, to=to_model, **ids)
        self._router.switch(to_model)
        usage = {"ctx_pct": entry.ctx_pct, **self._router.usage_view()}
        try:
            self._handoff.record_switch(
                from_model=from_model,
                to_model=to_model,
                reason=why,
                usage_percent=entry.ctx_pct,
            )
        except AteamError as exc:  # the switch itself must still happen
            log.warning("handoff history not written: %s", exc)
        self._window.expect_handoff()
        entry.model = to_model
        entry.last_switch = {
            "from": from_model,
            "to": to_model,
            "reason": why,
            "ts": time.time(),
        }
        self._events.emit(
            EventType.MODEL_SWITCH,
            **{"from": from_model},
            to=to_model,
            reason=why,
            usage=usage,
            **ids,
        )
        log.warning("model switch %s -> %s (%s)", from_model, to_model, why)
        self._status.touch()

    async def use(self, model: str | None) -> JsonObject:
        """``/use MODEL`` pins a model (``None`` unpins)."""
        router = self._router
        previous = router.current
        if model is not None and model in self._config.models:
            router.provider(model)  # a model that cannot be built is refused here
        router.pin(model)
        self._status.entry.pinned = router.pinned
        if router.current != previous:
            router.current = previous  # switch() does the move and the records
            await self.switch(previous, model or previous, Reason.PINNED, {})
        self._status.touch()
        return {"current": router.current, "pinned": router.pinned}

    async def check_context_fill(self) -> None:
        """Context at or over ``switch_at``: summarise; still full, a larger window (SPEC §7)."""
        if self._router.is_runtime():
            return  # a coding agent compacts its own context
        entry = self._status.entry
        threshold = 100 * self._config.spec.switching.switch_at
        if entry.ctx_pct < threshold:
            return
        await self._compactor.compact_after_failure()
        self._compactor.remeasure()
        if entry.ctx_pct < threshold:
            return
        current = self._router.current
        window = self._router.provider().context_window
        bigger = self._router.larger_fallback(current, window)
        if bigger is not None:
            await self.switch(current, bigger, Reason.CONTEXT_FULL, {})
            self._compactor.update_ctx_pct()

    async def maybe_switch_back(self, work: asyncio.Event) -> None:
        """Idle: return to the primary when it is healthy and the context fits (SPEC §7).

        Runs on the worker while it has nothing to do, so the probe is abandoned the
        moment ``work`` is set: a queued task never waits for a health check.
        """
        router = self._router
        blocker = router.switch_back_blocker(context_tokens=self._window.tokens)
        if blocker == "context" and self._compactor.idle_compaction_due():
            # Moved for room: the only way back is a smaller context, so summarise.
            await self._compactor.compact({})
            self._compactor.remeasure()
            blocker = router.switch_back_blocker(context_tokens=self._window.tokens)
        if blocker is not None:
            return
        primary = router.primary
        probe = asyncio.create_task(router.probe(primary), name="probe")
        waiting = asyncio.create_task(work.wait(), name="probe-interrupt")
        try:
            await asyncio.wait({probe, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        if not probe.done():
            await cancel_quietly(probe)
            return
        if probe.cancelled() or probe.exception() is not None or not probe.result():
            return
        if work.is_set() or self._status.stop.is_set():
            return  # work arrived as the probe finished: switch back when next idle
        await self.switch(router.current, primary, Reason.SWITCH_BACK, {})
