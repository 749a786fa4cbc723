"""One tool call of a task (SPEC §5.5): policy, approval, the call itself and its events.

``tool.start`` → ``tool.output``* → ``tool.end``, whatever happens. A tool's failure —
denied, bad arguments, a sandbox refusal, a timeout, a bug in a plugin — is not the
task's failure: the model gets the one-line error with its stable code as the result
and decides what to do next. Output is streamed as it comes, its secrets masked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ateam.agent.loop.control import TaskControl
from ateam.agent.state.queue_item import QueueItem, TaskIds
from ateam.bus.coalesce import Coalescer
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.config.schema import Approval
from ateam.errors import AteamError, ToolDenied
from ateam.providers.base import ToolCall
from ateam.redact import Redactor
from ateam.tools.approvals import Answer, Approvals, Decision
from ateam.tools.registry import ToolContext, ToolPolicy

__all__ = ["BeforeTool", "ToolCaller", "ToolGate", "ToolHooks", "describe_error"]

BeforeTool = Callable[[str, Mapping[str, Any], TaskIds, Path], Awaitable[None]]
"""Asked before a call runs (the ``before_tool`` hook), in the directory the call will run
in (a board task's worktree with ``worktree: task``); raises to refuse it."""

log = logging.getLogger(__name__)


class ToolHooks(Protocol):
    """What a tool call asks of the agent around it."""

    def scrub_text(self, text: str) -> str:
        """Text with its secrets masked (tool results, errors)."""
        ...

    @property
    def redactor(self) -> Redactor:
        """What masks secrets in the tool's output, as it streams."""
        ...

    def tool_context(
        self,
        item: QueueItem,
        approval: Approval,
        on_output: Callable[[bytes], None],
        control: TaskControl,
    ) -> ToolContext:
        """What one tool call of ``item`` is given."""
        ...


class ToolGate(Protocol):
    """The agent's run-time modes (delegate, a plan awaiting approval): may this call run?"""

    async def check(self, tool: str, item: QueueItem) -> None:
        """Raise the refusal of ``tool`` within ``item``, if any."""
        ...


class ToolCaller:
    """Runs the tool calls of a task's model replies, one at a time.

    Args:
        publisher: Where the call's events go.
        hooks: The agent's redaction and the services a call is given.
        policy: The tools the agent may call; none without.
        approvals: Where calls needing the owner's approval wait.
        approval_timeout_s: How long an approval waits for the owner.
        gate: The agent's run-time modes, checked after the policy.
        before_tool: Asked before each call that may run; what it raises is the result.
    """

    def __init__(
        self,
        publisher: EventPublisher,
        hooks: ToolHooks,
        *,
        policy: ToolPolicy | None,
        approvals: Approvals | None,
        approval_timeout_s: float,
        gate: ToolGate | None = None,
        before_tool: BeforeTool | None = None,
    ) -> None:
        self._before_tool = before_tool
        self._events = publisher
        self._hooks = hooks
        self.gate = gate
        self.policy = policy
        self._approvals = approvals
        self._approval_timeout_s = approval_timeout_s

    async def run(
        self, call: ToolCall, item: QueueItem, control: TaskControl, ids: TaskIds
    ) -> tuple[str, bool]:
        """Run one tool call with its events; returns what the model is told, and whether it
        succeeded."""
        started = time.monotonic()
        base = {"call_id": call.id, "name": call.name, **ids}
        self._events.emit(EventType.TOOL_START, input=call.args, **base)

        def output_frame(frame: dict[str, Any]) -> None:
            self._events.emit_redacted(EventType.TOOL_OUTPUT, frame, **base)

        # The framer redacts what it frames: whole frames (cut at whitespace) rather
        # than single reads, so a key streamed in pieces is redacted whole, and checked
        # read by read as they come, so that a flood is not held up by it.
        coalescer = Coalescer.for_output(output_frame, redactor=self._hooks.redactor)
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
            result = f"error [internal]: tool {call.name} failed: {describe_error(exc)}"
            end.update(ok=False, code="internal", error=result)
        finally:
            coalescer.close()
            control.tool_task = None
        result = self._hooks.scrub_text(result)
        log.info("task %s: %s %s -> %s", item.id, call.name, _status(end), _clip(result))
        self._events.emit(
            EventType.TOOL_END, duration_s=round(time.monotonic() - started, 4), **end, **base
        )
        return result, bool(end.get("ok", False))

    async def _invoke(
        self,
        call: ToolCall,
        item: QueueItem,
        control: TaskControl,
        coalescer: Coalescer,
        ids: TaskIds,
    ) -> Any:
        if self.policy is None:
            raise _denied(call.name)
        approval = self.policy.check(call.name)  # ToolDenied for anything not allowed
        if self.gate is not None:  # delegate mode, a plan awaiting approval
            await self.gate.check(call.name, item)
        tool = self.policy.tools[call.name]
        if approval is Approval.ASK and not tool.self_approving:
            answer = await self._ask("tool", call, ids, {}, control)
            if answer.decision not in (Decision.APPROVE, Decision.ALWAYS):
                return {"ok": False, "rejected": True, "result": _rejection(answer)}
        if control.interrupted.is_set():
            # An approval and an interrupt that land together: the interrupt wins.
            return {"ok": False, "rejected": True, "result": "not run: the task was interrupted"}
        context = self._hooks.tool_context(item, approval, coalescer.feed, control)
        if self._before_tool is not None:  # after the policy, modes and owner: calls that may run
            await self._before_tool(call.name, call.args, ids, context.cwd)

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
        ids: TaskIds,
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


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, AteamError):
        return exc.one_line()
    return f"{type(exc).__name__}: {exc}"


def _denied(name: str, why: str = "is not available") -> ToolDenied:
    return ToolDenied(f"tool {name} {why}", detail={"tool": name})


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
