"""The task loop (SPEC §5.4): one queue item in, a streamed, recorded answer out.

For each item: ``task.start``; build the context from durable state (:mod:`.context`);
stream the model's reply as ``token`` frames; run each requested tool call
(``tool.start`` → ``tool.output``* → ``tool.end``) and feed the results back; repeat
until the model answers without tool calls or the iteration limit is hit; ``task.end``.
Every turn — the input, each assistant reply with its tool calls, each tool result — is
appended to the history (fsynced) as soon as it exists, so a crash mid-task loses
nothing that happened, and every event carries the task's ``task_id`` and ``trace_id``.

Stopping: ``interrupt`` is cooperative — the stream stops after the current chunk, a
running command gets SIGINT (then SIGTERM, SIGKILL), an open approval is rejected, and
no further tool call or model call starts. ``cancel --hard`` kills the running command's
whole process group and abandons the model stream at once. Either way the loop records
what happened and ends the task; the agent then takes the next item.

A tool's failure — denied, bad arguments, a sandbox refusal, a timeout — is not the
task's failure: the model gets the one-line error with its stable code as the tool
result and decides what to do next, like a developer reading an error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ateam.agent import context as ctxbuild
from ateam.agent.history import History
from ateam.agent.queue import QueueItem
from ateam.agent.router import Action, ModelRouter
from ateam.agent.router import Decision as RouteDecision
from ateam.bus.events import Coalescer, EventPublisher, EventType, decode_chunk, encode_chunk
from ateam.config.schema import Approval
from ateam.errors import AteamError, ContextTooLong, LockLost, StorageFull, ToolDenied
from ateam.providers.base import (
    Headroom,
    Message,
    Provider,
    TextDelta,
    ToolCall,
    Usage,
    estimate_tokens,
)
from ateam.tools.approvals import Answer, Approvals, Decision
from ateam.tools.registry import ToolContext, ToolPolicy

log = logging.getLogger(__name__)

DEFAULT_MAX_ITERATIONS = 25
HISTORY_CANDIDATES = 400
"""How many of the newest history turns are offered to the context builder."""


class Stoppable(Protocol):
    """A running tool process as the loop can stop it (see :class:`ateam.tools.pty`)."""

    def interrupt(self) -> None: ...
    def kill(self) -> None: ...


@dataclass
class TaskControl:
    """How the outside world stops a running task."""

    interrupted: asyncio.Event = field(default_factory=asyncio.Event)
    hard: bool = False
    stream_task: asyncio.Task[None] | None = None
    tool_task: asyncio.Task[Any] | None = None
    process: Stoppable | None = None
    approvals: Approvals | None = None
    reason: str | None = None
    """Why the task was stopped, when neither a person's interrupt nor cancel did it."""

    def interrupt(self, *, hard: bool = False, reason: str | None = None) -> None:
        if reason is not None and self.reason is None:
            self.reason = reason
        self.interrupted.set()
        if self.approvals is not None:
            self.approvals.reject_all("interrupted" if not hard else "cancelled")
        if hard:
            self.hard = True
            # A hard cancel does not wait for the next chunk: stop the stream now, and
            # kill the running command's whole group.
            if self.stream_task is not None:
                self.stream_task.cancel()
            if self.process is not None:
                self.process.kill()
            elif self.tool_task is not None:
                self.tool_task.cancel()
        elif self.process is not None:
            self.process.interrupt()

    def track(self, process: Any) -> None:
        self.process = process
        # An interrupt that raced the start of the command still reaches it.
        if process is not None and self.interrupted.is_set():
            process.kill() if self.hard else process.interrupt()


@dataclass
class TaskOutcome:
    ok: bool
    error: str | None
    text: str
    tokens_in: int
    tokens_out: int
    iterations: int = 0


@dataclass
class _Progress:
    """What a task has done so far, kept outside the loop so a failure can report it."""

    tokens_in: int = 0
    tokens_out: int = 0
    iterations: int = 0
    text: str = ""
    error: str | None = None


@dataclass
class _Reply:
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    headroom: Headroom | None = None
    error: AteamError | Exception | None = None


SwitchHook = Callable[[str, str, Any, dict[str, Any]], Awaitable[None]]
"""``on_switch(from_model, to_model, reason, ids)``: the agent's part of a switch."""

ContextFactory = Callable[[QueueItem, Approval, Callable[[bytes], None], TaskControl], ToolContext]


class TaskRunner:
    """Runs one item through the model and its tools, publishing every step as events."""

    def __init__(
        self,
        publisher: EventPublisher,
        history: History,
        provider: Provider,
        *,
        system_prompt: Callable[[], str],
        summaries: Callable[[], list[dict[str, Any]]] | None = None,
        policy: ToolPolicy | None = None,
        approvals: Approvals | None = None,
        tool_context: ContextFactory | None = None,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        approval_timeout_s: float = 600.0,
        fence: Callable[[], int] = lambda: 0,
        scrub: Callable[[dict[str, Any]], dict[str, Any]] = lambda turn: turn,
        scrub_text: Callable[[str], str] = lambda text: text,
        scrub_bytes: Callable[[bytes], bytes] = lambda data: data,
        router: ModelRouter | None = None,
        on_switch: SwitchHook | None = None,
        on_turn: Callable[[QueueItem, dict[str, Any]], None] | None = None,
        extra_context: Callable[[], str] | None = None,
        handoff_context: Callable[[], str] | None = None,
        compact: Callable[[dict[str, Any]], Awaitable[bool]] | None = None,
        compacted_until: float = 0.0,
    ) -> None:
        self._events = publisher
        self._history = history
        self._provider = provider
        self.router = router
        self._on_switch = on_switch
        self._on_turn = on_turn
        self._extra_context = extra_context
        self._handoff_context = handoff_context
        self._inject_handoff = False
        """Set by a switch: the next model call's context carries the handoff."""
        self._compact = compact
        self.compacted_until = compacted_until
        """Unix time up to which older turns are summarised and left out of the context."""
        self._current_task: str | None = None
        self.pending_switch: RouteDecision | None = None
        """A switch decided after a call succeeded (low headroom), made before the next."""
        self._system_prompt = system_prompt
        self._summaries = summaries
        self.policy = policy
        self._approvals = approvals
        self._tool_context = tool_context
        self.max_iterations = max_iterations
        self._approval_timeout_s = approval_timeout_s
        self._fence = fence
        self._scrub = scrub
        self._scrub_text = scrub_text
        self._scrub_bytes = scrub_bytes
        self.context_tokens = 0
        """Estimated or reported tokens of the last model call's context plus its reply."""
        self.headroom: Headroom | None = None

    @property
    def provider(self) -> Provider:
        """The model the next call goes to (the router's current one, if routed)."""
        return self.router.provider() if self.router is not None else self._provider

    # context --------------------------------------------------------------------------

    def tool_specs(self) -> list[dict[str, Any]]:
        return self.policy.schemas() if self.policy is not None else []

    def build_context(self, new_input: str | None = None) -> ctxbuild.Context:
        """System prompt + summaries + the newest turns that fit + ``new_input``."""
        system = self._system_prompt()
        extra = self._extra_context() if self._extra_context is not None else ""
        if self._inject_handoff and self._handoff_context is not None:
            extra = f"{self._handoff_context()}\n\n{extra}".strip()
        if extra:
            system = f"{system}\n\n{extra}"
        turns = self._history.tail(HISTORY_CANDIDATES)
        if self.compacted_until:
            # Turns the working-context summary now stands for stay on disk but leave
            # the context; the running task's own turns always stay.
            turns = [
                t
                for t in turns
                if float(t.get("ts") or 0) > self.compacted_until
                or t.get("task_id") == self._current_task
            ]
        return ctxbuild.build(
            system=system,
            summaries=self._summaries() if self._summaries is not None else [],
            turns=turns,
            new_input=new_input,
            window=self.provider.context_window,
        )

    # the loop -------------------------------------------------------------------------

    async def run(self, item: QueueItem, control: TaskControl) -> TaskOutcome:
        """Run ``item`` to its end; ``task.end`` is emitted whatever happens but a cancel.

        Only :class:`asyncio.CancelledError` (the worker is being torn down),
        :class:`~ateam.errors.LockLost` (a durable write was fenced off) and
        :class:`~ateam.errors.StorageFull` (a turn found no room on disk) escape; every
        other failure ends the task with an error and leaves the agent working.
        """
        ids = {"task_id": item.id, "trace_id": item.trace_id}
        started = time.monotonic()
        control.approvals = self._approvals
        self._current_task = item.id
        self._events.emit(
            EventType.TASK_START, text=item.text, source=item.source, attempt=item.attempts, **ids
        )
        progress = _Progress()
        try:
            await self._loop(item, control, ids, progress)
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
            progress.error = f"internal error: {_describe(exc)}"
            self._events.emit(EventType.ERROR, msg=progress.error, code="internal", **ids)
        error = progress.error
        if control.interrupted.is_set() and error is None:
            error = control.reason or ("cancelled" if control.hard else "interrupted")
        if error is not None:
            # It goes on to the queue file, the registry and the working context.
            error = self._scrub_text(error)
        self._events.emit(
            EventType.TASK_END,
            ok=error is None,
            error=error,
            duration_s=round(time.monotonic() - started, 4),
            tokens_in=progress.tokens_in,
            tokens_out=progress.tokens_out,
            iterations=progress.iterations,
            **ids,
        )
        return TaskOutcome(
            error is None,
            error,
            progress.text,
            progress.tokens_in,
            progress.tokens_out,
            progress.iterations,
        )

    async def _loop(
        self, item: QueueItem, control: TaskControl, ids: dict[str, Any], progress: _Progress
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
                self._events.emit(
                    EventType.WARN, msg=progress.error, code="task.iteration_limit", **ids
                )
                return
            reply, model, messages = await self._call(messages, tools, control, item, ids)
            progress.iterations += 1
            calls = self._account(reply, model, messages, item, control, progress)
            if reply.error is not None:
                progress.error = _describe(reply.error)
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
    ) -> list[dict[str, Any]]:
        """Count the call's tokens and record the assistant turn; returns its tool calls."""
        usage = reply.usage or Usage(sum(ctxbuild.message_tokens(m) for m in messages), 0)
        out = usage.tokens_out or estimate_tokens(reply.text)
        progress.tokens_in += usage.tokens_in
        progress.tokens_out += out
        progress.text = reply.text
        self.context_tokens = usage.tokens_in + out
        if reply.error is None:
            self._inject_handoff = False  # the new model has seen it
            if self.router is not None:
                self.router.record_success(model, usage.tokens_in, out)
                if reply.headroom is not None and self.pending_switch is None:
                    # Move before the next call (this task's or the next one's) rather
                    # than wait for the 429.
                    self.pending_switch = self.router.headroom_low(reply.headroom.fraction)
        calls = [dataclasses.asdict(call) for call in reply.calls]
        if reply.text or calls or (reply.error is None and not control.interrupted.is_set()):
            turn = self._turn("assistant", reply.text, item, source="model")
            turn.update(tokens_in=usage.tokens_in, tokens_out=out, model=model)
            if calls:
                turn["tool_calls"] = calls
            self._record(turn, item)
        return calls

    async def _call(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        control: TaskControl,
        item: QueueItem,
        ids: dict[str, Any],
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
            if isinstance(reply.error, ContextTooLong) and not compacted and self._compact:
                # Summarise first (SPEC §7); only if that is not enough does the router
                # look for a model with a larger window.
                compacted = True
                if await self._compact(ids):
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
        self, model: str, exc: BaseException, attempt: int, ids: dict[str, Any]
    ) -> RouteDecision | None:
        if self.router is None:
            return None
        decision = self.router.after_failure(model, exc, attempt)
        what = _describe(exc)
        if decision.action is Action.RETRY:
            self._events.emit(
                EventType.WARN,
                msg=f"{model}: {what}; retrying in {decision.delay_s:.1f} s",
                code="provider.retry",
                **ids,
            )
        return decision

    async def _switch(
        self, decision: RouteDecision, model: str, item: QueueItem, ids: dict[str, Any]
    ) -> None:
        assert self.router is not None and decision.to is not None
        if self._on_switch is not None:
            await self._on_switch(model, decision.to, decision.reason, ids)
        else:
            self.router.switch(decision.to)
        self.expect_handoff()

    def expect_handoff(self) -> None:
        """The model changed: its next call carries the handoff."""
        self._inject_handoff = True

    def _has_user_turn(self, task_id: str) -> bool:
        return any(
            turn.get("task_id") == task_id and turn.get("role") == "user"
            for turn in self._history.tail(HISTORY_CANDIDATES)
        )

    async def _stream(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        control: TaskControl,
        ids: dict[str, Any],
    ) -> _Reply:
        """One model call, streamed as ``token`` frames; never raises a provider error."""
        reply = _Reply()
        parts: list[str] = []

        def token_frame(frame: dict[str, Any]) -> None:
            self._events.emit(EventType.TOKEN, **frame, **ids)

        coalescer = Coalescer(token_frame)

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
        self, call: ToolCall, item: QueueItem, control: TaskControl, ids: dict[str, Any]
    ) -> str:
        """Run one tool call with its events; returns what the model is told."""
        started = time.monotonic()
        base = {"call_id": call.id, "name": call.name, **ids}
        self._events.emit(EventType.TOOL_START, input=call.args, **base)

        def output_frame(frame: dict[str, Any]) -> None:
            # Text frames are scrubbed with every event payload; a base64 frame would
            # hide a key from that, so it is redacted as bytes here. Whole frames (cut
            # at newlines when output is slow) rather than single reads, so a key is
            # rarely split across two pieces.
            if "b64" in frame:
                frame = encode_chunk(self._scrub_bytes(decode_chunk(frame)))
            self._events.emit(EventType.TOOL_OUTPUT, **frame, **base)

        coalescer = Coalescer.for_output(output_frame)
        end: dict[str, Any] = {}
        try:
            value = await self._invoke(call, item, control, coalescer, ids)
            result = _result_text(value)
            end.update(_end_fields(value))
            end.setdefault("ok", True)
        except asyncio.CancelledError:
            if not control.hard:
                raise
            result = "error [cancelled]: the tool was cancelled by the owner"
            end.update(ok=False, code="cancelled", error="cancelled")
        except AteamError as exc:
            result = exc.one_line()
            end.update(ok=False, code=exc.code, error=exc.message)
        except OSError as exc:
            result = f"error [os.error]: {exc.strerror or exc}" + (
                f": {exc.filename}" if exc.filename else ""
            )
            end.update(ok=False, code="os.error", error=result)
        except Exception as exc:  # a broken tool (a plugin, say) fails its call only
            log.exception("tool %s raised", call.name)
            result = f"error [internal]: tool {call.name} failed: {_describe(exc)}"
            end.update(ok=False, code="internal", error=result)
        finally:
            coalescer.close()
            control.tool_task = None
        result = self._scrub_text(result)
        log.info("task %s: %s %s -> %s", item.id, call.name, _status(end), _clip(result))
        self._events.emit(
            EventType.TOOL_END, duration_s=round(time.monotonic() - started, 4), **end, **base
        )
        turn = self._turn("tool", result, item, source=call.name)
        turn.update(tool_call_id=call.id, name=call.name, ok=end.get("ok", False))
        self._record(turn, item)
        return result

    async def _invoke(
        self,
        call: ToolCall,
        item: QueueItem,
        control: TaskControl,
        coalescer: Coalescer,
        ids: dict[str, Any],
    ) -> Any:
        if self.policy is None or self._tool_context is None:
            raise _denied(call.name)
        approval = self.policy.check(call.name)  # ToolDenied for anything not allowed
        tool = self.policy.tools[call.name]
        if approval is Approval.ASK and not tool.self_approving:
            answer = await self._ask("tool", call, ids, {}, control)
            if answer.decision is not Decision.APPROVE:
                return {"ok": False, "rejected": True, "result": _rejection(answer)}
        if control.interrupted.is_set():
            # An approval and an interrupt that land together: the interrupt wins.
            return {"ok": False, "rejected": True, "result": "not run: the task was interrupted"}

        context = self._tool_context(item, approval, coalescer.feed, control)
        if tool.self_approving:
            context = dataclasses.replace(
                context, ask=lambda kind, extra: self._ask(kind, call, ids, extra, control)
            )
        control.tool_task = asyncio.create_task(self.policy.call(call.name, call.args, context))
        return await control.tool_task

    async def _ask(
        self,
        kind: str,
        call: ToolCall,
        ids: dict[str, Any],
        extra: dict[str, Any],
        control: TaskControl,
    ) -> Answer:
        if self._approvals is None:
            raise _denied(call.name, "needs approval and nobody can answer")
        if control.interrupted.is_set():
            # Asked after the interrupt already rejected everything open: don't wait.
            return Answer(Decision.REJECT, reason="the task was interrupted")
        return await self._approvals.ask(
            kind=kind,
            tool=call.name,
            args=call.args,
            task_id=ids.get("task_id"),
            trace_id=ids.get("trace_id"),
            timeout_s=self._approval_timeout_s,
            extra=extra,
        )

    # recording ------------------------------------------------------------------------

    def _record(self, turn: dict[str, Any], item: QueueItem | None = None) -> None:
        clean = self._scrub(turn)
        self._history.append(clean)
        if self._on_turn is not None and item is not None:
            self._on_turn(item, clean)

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


def _denied(name: str, why: str = "is not available") -> ToolDenied:
    return ToolDenied(f"tool {name} {why}", detail={"tool": name})


async def _sleep_unless(control: TaskControl, seconds: float) -> None:
    """Sleep, but wake at once when the task is interrupted."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await control.interrupted.wait()


def _rejection(answer: Answer) -> str:
    if answer.by is None:  # nobody decided: a timeout, an interrupt or a shutdown
        return f"not run: {answer.reason or 'no answer'}"
    return "rejected by the owner"


def _status(end: dict[str, Any]) -> str:
    if "exit_code" in end:
        return f"exit {end['exit_code']} ({end.get('reason')})"
    return "ok" if end.get("ok") else f"failed [{end.get('code')}]"


def _clip(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, AteamError):
        return exc.one_line()
    return f"{type(exc).__name__}: {exc}"


def _result_text(value: Any) -> str:
    """What the model reads: text as is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    text_for_model = getattr(value, "text_for_model", None)
    if callable(text_for_model):
        return str(text_for_model())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.dumps(value, ensure_ascii=False, default=str)


def _end_fields(value: Any) -> dict[str, Any]:
    """Extra ``tool.end`` fields: a command's exit code and how it ended."""
    if isinstance(value, dict) and value.get("rejected"):
        return {"ok": False, "code": "tool.rejected", "error": value.get("result")}
    fields: dict[str, Any] = {}
    for name in ("exit_code", "signal", "reason", "total_bytes", "truncated"):
        if hasattr(value, name):
            fields[name] = getattr(value, name)
    if "exit_code" in fields:
        fields["ok"] = fields["exit_code"] == 0
    return fields


async def cancel_quietly(task: asyncio.Task[Any] | None, *, grace: float = 2.0) -> None:
    """Cancel ``task`` and wait for it, but never longer than ``grace`` seconds."""
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.wait({task}, timeout=grace)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved
