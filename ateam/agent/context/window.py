"""What the model sees next: the context built from durable state, and the marks that shape it.

:class:`ContextWindow` builds each call's context (system prompt, working context, the
team's items, summaries, the newest turns that fit; :mod:`ateam.agent.context.rebuild` does the
fitting) and keeps what decides it between calls: the compaction marker (older turns a
summary now stands for), the task in hand (whose turns always stay), whether the next
call carries the handoff (after a switch), and how large the last context was. The task
loop, compaction and model switching all read and move these marks, so they live here,
apart from any of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ateam.agent.context import rebuild as ctxbuild
from ateam.agent.state.history import History, Summary
from ateam.providers.base import Provider

__all__ = ["HISTORY_CANDIDATES", "ContextSources", "ContextWindow"]

HISTORY_CANDIDATES = 400
"""How many of the newest history turns are offered to the context builder."""


class ContextSources(Protocol):
    """Where the parts of a context besides the turns come from."""

    def system_prompt(self) -> str:
        """The effective system prompt."""
        ...

    def summaries(self) -> list[Summary]:
        """Summaries of earlier work the context carries."""
        ...

    def extra_context(self) -> str:
        """Blocks appended to the system prompt on every call ("" for none)."""
        ...

    def handoff_context(self) -> str:
        """The block the first call after a model switch carries."""
        ...


class ContextWindow:
    """Builds the next context and keeps the marks that shape it.

    Args:
        history: The recorded turns.
        sources: The system prompt and the blocks around the turns.
        model: The model the next call goes to (its window bounds the context).
        compacted_until: The compaction marker read at start.
    """

    def __init__(
        self,
        history: History,
        sources: ContextSources,
        model: Callable[[], Provider],
        *,
        compacted_until: float = 0.0,
    ) -> None:
        self._history = history
        self._sources = sources
        self._model = model
        self.compacted_until = compacted_until
        """Unix time up to which older turns are summarised and left out of the context."""
        self.current_task: str | None = None
        """The task in hand: its turns stay in the context whatever the marker says."""
        self.handoff_due = False
        """Set by a switch: the next model call's context carries the handoff."""
        self.tokens = 0
        """Estimated or reported tokens of the last model call's context plus its reply."""

    def build(self, new_input: str | None = None) -> ctxbuild.Context:
        """System prompt + summaries + the newest turns that fit + ``new_input``."""
        system = self._sources.system_prompt()
        extra = self._sources.extra_context()
        if self.handoff_due:
            extra = f"{self._sources.handoff_context()}\n\n{extra}".strip()
        if extra:
            system = f"{system}\n\n{extra}"
        turns = self._history.turns(HISTORY_CANDIDATES)
        if self.compacted_until:
            # Turns the working-context summary now stands for stay on disk but leave
            # the context; the running task's own turns always stay.
            turns = [
                t for t in turns if t.ts > self.compacted_until or t.task_id == self.current_task
            ]
        return ctxbuild.build(
            system=system,
            summaries=self._sources.summaries(),
            turns=turns,
            new_input=new_input,
            window=self._model().context_window,
        )

    def expect_handoff(self) -> None:
        """The model changed: its next call carries the handoff."""
        self.handoff_due = True

    def refresh(self) -> int:
        """Re-measure the context as the next call would see it; returns its tokens."""
        self.tokens = self.build().tokens
        return self.tokens
