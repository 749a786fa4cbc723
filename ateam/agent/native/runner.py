"""The native task runner (SPEC §5.4): one queue item in, a streamed, recorded answer out.

ateam's own model-and-tools loop, one :class:`~ateam.agent.loop.task.TaskRunner`.

For each item: ``task.start``; build the context from durable state
(:mod:`ateam.agent.context.rebuild`); stream the model's reply as ``token`` frames; run
each requested tool call (``tool.start`` → ``tool.output``* → ``tool.end``) and feed the
results back; repeat until the model answers without tool calls or the iteration limit is
hit; ``task.end``. Every turn — the input, each assistant reply with its tool calls, each
tool result — is appended to the history (fsynced) as soon as it exists, so a crash
mid-task loses nothing that happened, and every event carries the task's ``task_id`` and
``trace_id``.

Stopping: ``interrupt`` is cooperative — the stream stops after the current chunk, a
running command gets SIGINT (then SIGTERM, SIGKILL), an open approval is rejected, and
no further tool call or model call starts. ``cancel --hard`` kills the running command's
whole process group and abandons the model stream at once. Either way the loop records
what happened and ends the task; the agent then takes the next item.

A tool's failure — denied, bad arguments, a sandbox refusal, a timeout — is not the
task's failure: the model gets the one-line error with its stable code as the tool
result and decides what to do next, like a developer reading an error message (each
call is run by :mod:`ateam.agent.native.toolcall`). What the loop needs of the agent
around it — the fence, redaction, tools' services, switches, compaction — is one
:class:`TaskHooks` object; what each call's context holds is the
:class:`~ateam.agent.context.window.ContextWindow`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from ateam._json import JsonObject
from ateam.agent.context import rebuild as ctxbuild
from ateam.agent.context.window import HISTORY_CANDIDATES, ContextWindow
from ateam.agent.loop.control import TaskControl
from ateam.agent.loop.task import HandOver, TaskOutcome, end_task
from ateam.agent.models.router import Action, ModelRouter, Reason
from ateam.agent.models.router import Decision as RouteDecision
from ateam.agent.native.toolcall import (
    BeforeTool,
    ToolCaller,
    ToolGate,
    ToolHooks,
    describe_error,
)
from ateam.agent.state.history import History
from ateam.agent.state.queue_item import QueueItem, TaskIds
from ateam.bus.coalesce import Coalescer
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.errors import AteamError, Code, ContextTooLong, LockLost, StorageFull
from ateam.providers.base import (
    Headroom,
    Message,
    Provider,
    TextDelta,
    ToolCall,
    Usage,
    estimate_tokens,
)
from ateam.tools.approvals import Approvals
from ateam.tools.registry import ToolPolicy
from ateam.wire.turns import ToolCallRecord, Turn

log = logging.getLogger(__name__)

DEFAULT_MAX_ITERATIONS = 25


@dataclass(eq=False)
class _Progress:
    """What a task has done so far, kept outside the loop so a failure can report it."""

    tokens_in: int = 0
    tokens_out: int = 0
    iterations: int = 0
    text: str = ""
    error: str | None = None
    code: str | None = None
    """The error's stable code."""


@dataclass
class _Reply:
    """One model reply, gathered from its stream."""

    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    headroom: Headroom | None = None
    error: AteamError | Exception | None = None


class TaskHooks(ToolHooks, Protocol):
    """What the task loop asks of the agent around it, as one object.

    :class:`ateam.agent.native.hooks.AgentHooks` is the agent's; the loop itself knows nothing
    of fences, secrets, tools' services, handoffs or summaries beyond these calls (and
    those of :class:`~ateam.agent.native.toolcall.ToolHooks`, for its tool calls).
    """

    def fence(self) -> int:
        """The fencing token every recorded turn carries."""
        ...

    def scrub_turn(self, turn: Turn) -> Turn:
        """A turn with its secrets masked, as it is recorded."""
        ...

    def on_turn(self, item: QueueItem, turn: Turn) -> None:
        """After every recorded turn."""
        ...

    async def switch_model(
        self, from_model: str, to_model: str, reason: Reason | None, ids: TaskIds
    ) -> None:
        """Move to ``to_model`` (the router's switch included) and record why."""
        ...

    async def compact(self, ids: TaskIds) -> bool:
        """Summarise older turns out of the context; whether anything changed."""
        ...


class NativeRunner:
    """Runs one item through the model and its tools, publishing every step as events.

    Args:
        publisher: Where the task's events go.
        history: Where its turns are recorded.
        provider: The model when there is no router.
        window: Builds each call's context and keeps its marks.
        hooks: The agent's part of the loop (see :class:`TaskHooks`).
        policy: The tools the agent may call; none without.
        approvals: Where calls needing the owner's approval wait.
        router: Retries and switches after failures; the provider alone without.
        max_iterations: Model calls one task may make.
        approval_timeout_s: How long an approval waits for the owner.
        gate: Delegate mode and plan approval, checked before each tool call.
        before_tool: The ``before_tool`` hook, asked before each tool call that may run.
    """

    def __init__(
        self,
        publisher: EventPublisher,
        history: History,
        provider: Provider,
        window: ContextWindow,
        hooks: TaskHooks,
        *,
        policy: ToolPolicy | None = None,
        approvals: Approvals | None = None,
        router: ModelRouter | None = None,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        approval_timeout_s: float = 600.0,
        gate: ToolGate | None = None,
        before_tool: BeforeTool | None = None,
    ) -> None:
        self._events = publisher
        self._history = history
        self._provider = provider
        self.window = window
        self._hooks = hooks
        self.router = router
        self.pending_switch: RouteDecision | None = None
        """A switch decided after a call succeeded (low headroom), made before the next."""
        self.policy = policy
        self._approvals = approvals
        self._tools = ToolCaller(
            publisher,
            hooks,
            policy=policy,
            approvals=approvals,
            approval_timeout_s=approval_timeout_s,
            gate=gate,
            before_tool=before_tool,
        )
        self.max_iterations = max_iterations
        self.headroom: Headroom | None = None

    @property
    def provider(self) -> Provider:
        """The model the next call goes to (the router's current one, if routed)."""
        return self.router.provider() if self.router is not None else self._provider

    # context --------------------------------------------------------------------------

    def tool_specs(self) -> list[JsonObject]:
        return self.policy.schemas() if self.policy is not None else []

    def build_context(self, new_input: str | None = None) -> ctxbuild.Context:
        """The next call's context (see :meth:`ContextWindow.build`)."""
        return self.window.build(new_input)

    @property
    def compacted_until(self) -> float:
        """Unix time up to which older turns are summarised and left out of the context."""
        return self.window.compacted_until

    # the loop -------------------------------------------------------------------------

    async def run(self, item: QueueItem, control: TaskControl) -> TaskOutcome:
        """Run ``item`` to its end; ``task.end`` is emitted whatever happens but a cancel.

        Only :class:`asyncio.CancelledError` (the worker is being torn down),
        :class:`~ateam.errors.LockLost` (a durable write was fenced off) and
        :class:`~ateam.errors.StorageFull` (a turn found no room on disk) escape; every
        other failure ends the task with an error and leaves the agent working.
        """
        ids = item.ids()
        started = time.monotonic()
        control.approvals = self._approvals
        self.window.current_task = item.id
        if not control.continuing:  # a task handed over from a coding agent has started
            self._events.emit(
                EventType.TASK_START,
                text=item.text,
                source=item.source,
                attempt=item.attempts,
                **ids,
            )
        progress = _Progress()
        try:
            await self._loop(item, control, ids, progress)
        except HandOver:
            raise  # switched to a coding agent: its runner goes on with this task
        except LockLost:
            # This instance may no longer write anything, the task's end included: the
            # agent stops and the successor runs the item again.
            raise
        except StorageFull:
            # Not the task's failure: a turn could not be recorded. The agent keeps the
            # item queued and runs it again once there is room (it ends then).
            raise
        except Exception as exc:  # a bug or a storage failure: end this task, not the agent
            log.exception("task %s failed unexpectedly", item.id)
            progress.error = f"internal error: {describe_error(exc)}"
            progress.code = Code.INTERNAL
            self._events.emit(EventType.ERROR, msg=progress.error, code="internal", **ids)
        return end_task(
            self._events,
            control,
            ids,
            started=started,
            error=progress.error,
            text=progress.text,
            tokens_in=progress.tokens_in,
            tokens_out=progress.tokens_out,
            iterations=progress.iterations,
            scrub=self._hooks.scrub_text,
            code=progress.code,
        )

    async def _loop(
        self, item: QueueItem, control: TaskControl, ids: TaskIds, progress: _Progress
    ) -> None:
        # A re-run (after a crash or a shutdown mid-task) continues the recorded turns
        # instead of asking the same question twice.
        # (A release does not count as an attempt, so the history is what tells.)
        rerun = self._has_user_turn(item.id)
        messages = self.build_context(None if rerun else item.text).messages
        if not rerun:
            self._record(self._turn("user", item.text, item, source=item.source), item)
        tools = self.tool_specs()
        while True:
            if progress.iterations >= self.max_iterations:
                progress.error = f"iteration limit reached ({self.max_iterations} model calls)"
                progress.code = Code.TASK_ITERATION_LIMIT
                self._events.emit(EventType.WARN, msg=progress.error, code=progress.code, **ids)
                return
            reply, model, messages = await self._call(messages, tools, control, item, ids)
            progress.iterations += 1
            calls = self._account(reply, model, messages, item, control, progress)
            if reply.error is not None:
                progress.error = describe_error(reply.error)
                failure = reply.error
                progress.code = failure.code if isinstance(failure, AteamError) else Code.INTERNAL
                self._events.emit(
                    EventType.ERROR, msg=f"model call failed: {progress.error}", **ids
                )
                return
            if control.interrupted.is_set() or not reply.calls:
                return
            messages.append(Message("assistant", reply.text, tool_calls=calls))
            for call in reply.calls:
                if control.interrupted.is_set():
                    return  # the remaining calls never ran; the context builder notes it
                result = await self._run_tool(call, item, control, ids)
                messages.append(Message("tool", result, tool_call_id=call.id))
            if control.interrupted.is_set():
                return  # stopped during the last tool: no further model call

    def _account(
        self,
        reply: _Reply,
        model: str,
        messages: list[Message],
        item: QueueItem,
        control: TaskControl,
        progress: _Progress,
    ) -> list[JsonObject]:
        """Count the call's tokens and record the assistant turn; returns its tool calls."""
        usage = reply.usage or Usage(sum(ctxbuild.message_tokens(m) for m in messages), 0)
        out = usage.tokens_out or estimate_tokens(reply.text)
        progress.tokens_in += usage.tokens_in
        progress.tokens_out += out
        progress.text = reply.text
        self.window.tokens = usage.tokens_in + out
        if reply.error is None:
            self.window.handoff_due = False  # the new model has seen it
            if self.router is not None:
                self.router.record_success(model, usage.tokens_in, out)
                if reply.headroom is not None and self.pending_switch is None:
                    # Move before the next call (this task's or the next one's) rather
                    # than wait for the 429.
                    self.pending_switch = self.router.headroom_low(reply.headroom.fraction)
        calls: list[JsonObject] = [dataclasses.asdict(call) for call in reply.calls]
        if reply.text or calls or (reply.error is None and not control.interrupted.is_set()):
            answer: dict[str, object] = {}
            if calls:
                answer["tool_calls"] = [
                    ToolCallRecord(id=call.id, name=call.name, args=call.args)
                    for call in reply.calls
                ]
            elif reply.error is None and not control.interrupted.is_set():
                # The task's answer: a replay after a crash before the queue heard of
                # it ends the task with this turn instead of asking the model again.
                answer["final"] = True
            turn = self._turn(
                "assistant",
                reply.text,
                item,
                source="model",
                tokens_in=usage.tokens_in,
                tokens_out=out,
                model=model,
                **answer,
            )
            self._record(turn, item)
        return calls

    async def _call(
        self,
        messages: list[Message],
        tools: list[JsonObject],
        control: TaskControl,
        item: QueueItem,
        ids: TaskIds,
    ) -> tuple[_Reply, str, list[Message]]:
        """One model call, with the router's retries and switches; returns the final try."""
        attempt = 0
        compacted = False
        tried = {self.provider.model}
        if self.pending_switch is not None:  # low headroom after the previous call
            pending, self.pending_switch = self.pending_switch, None
            await self._switch(pending, self.provider.model, item, ids)
            messages = self.build_context(None).messages
            tried.add(self.provider.model)
        while True:
            model = self.provider.model
            reply = await self._stream(messages, tools, control, ids)
            if reply.error is None or control.interrupted.is_set():
                return reply, model, messages
            if isinstance(reply.error, ContextTooLong) and not compacted:
                # Summarise first (SPEC §7); only if that is not enough does the router
                # look for a model with a larger window.
                compacted = True
                if await self._hooks.compact(ids):
                    messages = self.build_context(None).messages
                    continue
            decision = self._route_failure(model, reply.error, attempt, ids)
            if decision is None or decision.action is Action.FAIL:
                return reply, model, messages
            if decision.action is Action.SWITCH and decision.to in tried:
                # Every model of the route failed this call once: give up rather than
                # bounce between them for as long as their cool-downs allow.
                return reply, model, messages
            if decision.action is Action.RETRY:
                attempt += 1
                await _sleep_unless(control, decision.delay_s)
                if control.interrupted.is_set():
                    return _Reply(), model, messages
                continue
            await self._switch(decision, model, item, ids)
            tried.add(self.provider.model)
            # Everything so far is in the history: the new model's context is rebuilt
            # from it, with the handoff on top.
            messages = self.build_context(None).messages
            attempt = 0

    def _route_failure(
        self, model: str, exc: BaseException, attempt: int, ids: TaskIds
    ) -> RouteDecision | None:
        if self.router is None:
            return None
        decision = self.router.after_failure(model, exc, attempt)
        what = describe_error(exc)
        if decision.action is Action.RETRY:
            self._events.emit(
                EventType.WARN,
                msg=f"{model}: {what}; retrying in {decision.delay_s:.1f} s",
                code="provider.retry",
                **ids,
            )
        return decision

    async def _switch(
        self, decision: RouteDecision, model: str, item: QueueItem, ids: TaskIds
    ) -> None:
        assert self.router is not None and decision.to is not None
        await self._hooks.switch_model(model, decision.to, decision.reason, ids)
        self.expect_handoff()
        if self.router.is_runtime(decision.to):
            # A coding agent runs whole tasks itself: this one goes on there.
            raise HandOver(decision.to)

    def expect_handoff(self) -> None:
        """The model changed: its next call carries the handoff."""
        self.window.expect_handoff()

    def _has_user_turn(self, task_id: str) -> bool:
        return self._history.has_input(task_id, HISTORY_CANDIDATES)

    async def _stream(
        self,
        messages: list[Message],
        tools: list[JsonObject],
        control: TaskControl,
        ids: TaskIds,
    ) -> _Reply:
        """One model call, streamed as ``token`` frames; never raises a provider error."""
        reply = _Reply()
        parts: list[str] = []

        def token_frame(frame: JsonObject) -> None:
            self._events.emit_redacted(EventType.TOKEN, frame, **ids)

        # The framer redacts what it frames, with the end of the text already sent as
        # context: a model that pauses inside a key's first characters leaks no rest.
        coalescer = Coalescer(token_frame, redactor=self._hooks.redactor)

        async def consume() -> None:
            async for chunk in self.provider.stream(messages, tools=tools or None):
                if isinstance(chunk, TextDelta):
                    parts.append(chunk.text)
                    coalescer.feed(chunk.text)
                elif isinstance(chunk, ToolCall):
                    reply.calls.append(chunk)
                elif isinstance(chunk, Usage):
                    reply.usage = chunk
                elif isinstance(chunk, Headroom):
                    reply.headroom = self.headroom = chunk
                if control.interrupted.is_set():
                    reply.calls.clear()  # a cut-short reply's calls are not acted on
                    return

        control.stream_task = asyncio.create_task(consume())
        try:
            await control.stream_task
        except asyncio.CancelledError:
            if not control.hard:
                raise
            reply.calls.clear()
        except Exception as exc:  # a provider failure ends the task, not the agent
            reply.error = exc
        finally:
            control.stream_task = None
            coalescer.close()
        reply.text = "".join(parts)
        return reply

    async def _run_tool(
        self, call: ToolCall, item: QueueItem, control: TaskControl, ids: TaskIds
    ) -> str:
        """Run one tool call and record its result; returns what the model is told."""
        result, ok = await self._tools.run(call, item, control, ids)
        turn = self._turn(
            "tool", result, item, source=call.name, tool_call_id=call.id, name=call.name, ok=ok
        )
        self._record(turn, item)
        return result

    # recording ------------------------------------------------------------------------

    def _record(self, turn: Turn, item: QueueItem | None = None) -> None:
        clean = self._hooks.scrub_turn(turn)
        self._history.append(clean)
        if item is not None:
            self._hooks.on_turn(item, clean)

    def _turn(
        self, role: str, content: str, item: QueueItem, *, source: str, **fields: object
    ) -> Turn:
        """A new turn of ``item``: every field set, so the line spells each one out."""
        base: dict[str, object] = {
            "ts": time.time(),
            "role": role,
            "source": source,
            "content": content,
            "tokens_in": 0,
            "tokens_out": 0,
            "model": self.provider.model,
            "task_id": item.id,
            "trace_id": item.trace_id,
            "fence": self._hooks.fence(),
        }
        return Turn.model_validate({**base, **fields})


async def _sleep_unless(control: TaskControl, seconds: float) -> None:
    """Sleep, but wake at once when the task is interrupted."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await control.interrupted.wait()
