"""Compaction: older turns summarised out of the context, and the summaries the agent keeps.

A context too long for the model (or filled past ``switch_at``) is compacted before any
larger model is looked for (SPEC §7): the oldest turns outside the running task are
summarised into the working context and the compaction marker moves past them, so they
stay on disk but leave the context. Every summary is bounded in time: a slow model delays
work, it never holds it. The marker is a file, so a restart keeps the context as it was.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ateam._fs import atomic_write
from ateam._json import JsonObject
from ateam._jsonl import storage_error
from ateam.agent.context.window import HISTORY_CANDIDATES, ContextWindow
from ateam.agent.context.working import SummaryOutcome, WorkingContext
from ateam.agent.models.router import ModelRouter
from ateam.agent.state.fence import WriteFence
from ateam.agent.state.history import History, SummaryLog
from ateam.agent.state.queue_item import TaskIds
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.config import AgentConfig
from ateam.providers.base import Headroom, estimate_tokens
from ateam.wire.registry import AgentEntry
from ateam.wire.turns import Turn

__all__ = ["MARKER_FILE", "Compactor", "read_marker"]

MARKER_FILE = Path("context") / "compacted_until"
"""The compaction marker, in the state directory."""


class Compactor:
    """Summarises turns out of the context, and measures how full the context is."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        history: History,
        summaries: SummaryLog,
        workctx: WorkingContext,
        window: ContextWindow,
        router: ModelRouter,
        entry: AgentEntry,
        events: EventPublisher,
        write_fence: WriteFence,
    ) -> None:
        self._config = config
        self._history = history
        self._summaries = summaries
        self._workctx = workctx
        self._window = window
        self._router = router
        self._entry = entry
        self._events = events
        self._write_fence = write_fence
        self._last_idle = -1e9
        self._last_failed = -1e9

    async def compact(self, ids: TaskIds) -> bool:
        """Summarise the oldest turns still in the context and leave them out of it.

        Only turns after the previous compaction, outside the running task, and as many
        as fit half the model's window (the summary call must fit too) are summarised;
        the marker moves to the newest of them and never back. ``False``: nothing
        changed, the raw turns stay.
        """
        current = self._window.current_task
        marker = self._window.compacted_until
        candidates = [
            t
            for t in self._history.turns(HISTORY_CANDIDATES)
            if t.ts > marker and t.task_id != current
        ]
        room = self._router.provider().context_window // 2
        fed: list[Turn] = []
        used = 0
        for turn in candidates:  # oldest first
            cost = estimate_tokens(turn.content) + 8
            if fed and used + cost > room:
                break
            fed.append(turn)
            used += cost
        if not fed:
            return False
        outcome = await self.summarize_turns(fed)
        self._events.emit(
            EventType.CONTEXT,
            action="summarized" if outcome.ok else "summary_failed",
            reason="context too long",
            attempts=outcome.attempts,
            error=outcome.reason,
            turns=len(fed),
            **ids,
        )
        if not outcome.ok:
            return False  # nothing dropped: the raw turns stay, the router decides
        newest = max(t.ts for t in fed)
        self._window.compacted_until = max(marker, newest)
        self._write_fence("the compaction marker")
        _write_marker(self._config.state_dir / MARKER_FILE, self._window.compacted_until)
        return True

    async def compact_after_failure(self) -> None:
        """Compact, unless one failed within the cool-down.

        A compaction that just failed is not retried after every task: each try is a
        model call, and a model that cannot summarise would slow every task down.
        """
        if time.monotonic() - self._last_failed >= self._config.spec.switching.cooldown_s:
            if not await self.compact({}):
                self._last_failed = time.monotonic()

    def idle_compaction_due(self) -> bool:
        """Whether an idle agent may compact now (once per cool-down); counts this one."""
        now = time.monotonic()
        if now - self._last_idle < self._config.spec.switching.cooldown_s:
            return False
        self._last_idle = now
        return True

    async def periodic_summary(self) -> JsonObject | None:
        """The summary every few tasks (SPEC §8); none while a coding agent is the model.

        A coding agent keeps and compacts its own context, and a summary through it
        would be a whole session of its own between two tasks (seconds, and a model
        call): its turns stay in the history, where a handoff reads them.
        """
        if self._router.is_runtime():
            return None
        return await self.summarize("every 5 tasks")

    async def summarize(self, why: str) -> JsonObject:
        """Re-summarise the working context from recent history (SPEC §8)."""
        outcome = await self.summarize_turns(self._history.turns(200))
        self._events.emit(
            EventType.CONTEXT,
            action="summarized" if outcome.ok else "summary_failed",
            reason=why,
            attempts=outcome.attempts,
            error=outcome.reason,
        )
        return {"ok": outcome.ok, "attempts": outcome.attempts, "reason": outcome.reason}

    async def summarize_turns(self, turns: list[Turn]) -> SummaryOutcome:
        """One summary, bounded in time: a slow model delays work, it never holds it.

        A summary that was made is also appended to ``state/summary.jsonl`` (SPEC §5.3),
        the record of every summary and of the turns it covers.
        """
        limit = self._config.spec.watchdog.step_timeout_s
        model = self._router.current
        try:
            async with asyncio.timeout(limit):
                outcome = await self._workctx.summarize(self._router.provider(), turns, model=model)
        except TimeoutError:
            return SummaryOutcome(False, None, 1, f"timed out after {limit:g}s")
        if outcome.ok and outcome.summary:
            stamps = [t.ts for t in turns] or [time.time()]
            self._summaries.append(outcome.summary, window=(stamps[0], stamps[-1]), model=model)
        return outcome

    def update_ctx_pct(self) -> None:
        """Show how full the model's window was at the last measure (ps, /ctx)."""
        window = self._router.provider().context_window
        if window:
            self._entry.ctx_pct = round(100 * self._window.tokens / window, 1)

    def remeasure(self) -> None:
        """Rebuild the next context from disk and show how full it is."""
        self._window.refresh()
        self.update_ctx_pct()

    def stats(self, headroom: Headroom | None) -> JsonObject:
        """``memory.stats``: tokens in the context, how full it is, what it holds."""
        provider = self._router.provider()
        window = provider.context_window
        used = self._window.tokens
        preview = self._window.build()
        return {
            "model": provider.model,
            "context_window": window,
            "tokens_in_context": used,
            "ctx_pct": round(100 * used / window, 1) if window else 0.0,
            "next_context_tokens": preview.tokens,
            "turns_in_context": preview.turns_used,
            "turns_dropped": preview.turns_dropped,
            "history_turns": self._history.count(),
            "summaries": len(self._summaries.all()),
            "rate_limit_headroom": headroom.fraction if headroom is not None else None,
            "switch_at": self._config.spec.switching.switch_at,
            "working_context": self._workctx.stats(),
            "usage": self._router.usage_view(),
        }


def read_marker(path: Path) -> float:
    """The compaction marker; 0 (nothing compacted) when missing or unreadable."""
    try:
        return float(path.read_text(encoding="ascii").strip() or 0)
    except (OSError, ValueError):
        return 0.0


def _write_marker(path: Path, value: float) -> None:
    """Write the compaction marker; a full disk is ``storage.full`` like every store's."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(path, f"{value!r}\n".encode("ascii"))
    except OSError as exc:
        raise storage_error("context", "cannot write", path, exc) from exc
