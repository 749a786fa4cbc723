"""The task loop (SPEC §5.4): one queue item in, a streamed, recorded answer out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ateam.agent.history import History
from ateam.agent.queue import QueueItem
from ateam.bus.events import Coalescer, EventPublisher, EventType
from ateam.providers.base import Message, Provider, TextDelta, Usage, estimate_tokens


@dataclass
class TaskControl:
    """How the outside world stops a running task."""

    interrupted: asyncio.Event = field(default_factory=asyncio.Event)
    hard: bool = False
    stream_task: asyncio.Task[None] | None = None

    def interrupt(self, *, hard: bool = False) -> None:
        self.interrupted.set()
        if hard:
            self.hard = True
            # A hard cancel does not wait for the next chunk: stop the stream now.
            if self.stream_task is not None:
                self.stream_task.cancel()


@dataclass
class TaskOutcome:
    ok: bool
    error: str | None
    text: str
    tokens_in: int
    tokens_out: int


class TaskRunner:
    """Runs one item through the model and publishes every step as events."""

    def __init__(
        self,
        publisher: EventPublisher,
        history: History,
        provider: Provider,
        *,
        system_prompt: Callable[[], str],
        history_turns: int = 20,
        fence: Callable[[], int] = lambda: 0,
        scrub: Callable[[dict[str, Any]], dict[str, Any]] = lambda turn: turn,
    ) -> None:
        self._events = publisher
        self._history = history
        self.provider = provider
        self._system_prompt = system_prompt
        self._history_turns = history_turns
        self._fence = fence
        self._scrub = scrub
        self.context_tokens = 0

    def build_context(self, item: QueueItem) -> list[Message]:
        """System prompt, then the newest turns of history, then the new input."""
        messages = [Message("system", self._system_prompt())]
        for turn in self._history.tail(self._history_turns):
            role = turn.get("role")
            if role in ("user", "assistant"):
                messages.append(Message(str(role), str(turn.get("content", ""))))
        messages.append(Message("user", item.text))
        return messages

    async def run(self, item: QueueItem, control: TaskControl) -> TaskOutcome:
        ids = {"task_id": item.id, "trace_id": item.trace_id}
        started = time.monotonic()
        self._events.emit(
            EventType.TASK_START, text=item.text, source=item.source, attempt=item.attempts, **ids
        )
        messages = self.build_context(item)
        self._history.append(self._scrub(self._turn("user", item.text, item, source=item.source)))

        def token_frame(frame: dict[str, Any]) -> None:
            self._events.emit(EventType.TOKEN, **frame, **ids)

        coalescer = Coalescer(token_frame)
        parts: list[str] = []
        usage = Usage(sum(estimate_tokens(m.content) for m in messages), 0)

        async def consume() -> None:
            nonlocal usage
            async for chunk in self.provider.stream(messages):
                if isinstance(chunk, TextDelta):
                    parts.append(chunk.text)
                    coalescer.feed(chunk.text)
                elif isinstance(chunk, Usage):
                    usage = chunk
                if control.interrupted.is_set():
                    return

        error: str | None = None
        control.stream_task = asyncio.create_task(consume())
        try:
            await control.stream_task
        except asyncio.CancelledError:
            if not control.hard:
                raise
        except Exception as exc:  # a provider failure ends the task, not the agent
            error = f"{type(exc).__name__}: {exc}"
            self._events.emit(EventType.ERROR, msg=f"model call failed: {error}", **ids)
        finally:
            control.stream_task = None
            coalescer.close()
        if control.interrupted.is_set() and error is None:
            error = "cancelled" if control.hard else "interrupted"
        text = "".join(parts)
        tokens_out = usage.tokens_out or estimate_tokens(text)
        if text or error is None:
            turn = self._turn("assistant", text, item, source="model")
            turn.update(tokens_in=usage.tokens_in, tokens_out=tokens_out)
            self._history.append(self._scrub(turn))
        self.context_tokens = usage.tokens_in + tokens_out
        self._events.emit(
            EventType.TASK_END,
            ok=error is None,
            error=error,
            duration_s=round(time.monotonic() - started, 4),
            tokens_in=usage.tokens_in,
            tokens_out=tokens_out,
            **ids,
        )
        return TaskOutcome(error is None, error, text, usage.tokens_in, tokens_out)

    def _turn(self, role: str, content: str, item: QueueItem, *, source: str) -> dict[str, Any]:
        return {
            "ts": time.time(),
            "role": role,
            "source": source,
            "content": content,
            "tokens_in": 0,
            "tokens_out": 0,
            "model": self.provider.model,
            "task_id": item.id,
            "trace_id": item.trace_id,
            "fence": self._fence(),
        }


async def cancel_quietly(task: asyncio.Task[Any] | None, *, grace: float = 2.0) -> None:
    """Cancel ``task`` and wait for it, but never longer than ``grace`` seconds."""
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.wait({task}, timeout=grace)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved
