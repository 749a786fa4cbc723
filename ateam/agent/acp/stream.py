"""One prompt's session updates, turned into ateam's events, history turns and plan.

What a runtime reports while it works maps onto what a native agent emits, so every
console, ``tail``, MCP ``agent_tail`` and the browser show it the same way:

==========================  ===========================================================
``agent_message_chunk``     ``token`` frames (masked as they are framed)
``agent_thought_chunk``     ``token`` frames marked ``thinking`` (shown dimmed)
``tool_call``               ``tool.start`` (title, kind, the paths it touches, its input)
``tool_call_update``        ``tool.output`` for new text, ``tool.end`` once it completes
                            or fails (exit code, output, the diff of an edit)
``plan``                    the agent's plan file (``/plan``)
``usage_update``            the context's size; a cost delta into the usage ledger
``current_mode_update``     the runtime's mode, as ``ps`` shows it
anything else               left alone (available commands, session info, replays)
==========================  ===========================================================

History follows the native shape, so a context rebuilt from it for another model (after
a switch to a native model) reads like any other: the text before a tool call becomes
an assistant turn carrying that call, the call's result a ``tool`` turn, and the text at
the end the final answer.
"""

from __future__ import annotations

import difflib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import schema

from ateam._json import JsonObject
from ateam.agent.state.plan import write_plan
from ateam.agent.state.queue_item import QueueItem, TaskIds
from ateam.bus.coalesce import Coalescer
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.redact import Redactor
from ateam.wire.turns import ToolCallRecord, Turn

__all__ = ["PromptStream", "ToolCallState"]

log = logging.getLogger(__name__)

RESULT_CHARS = 16 * 1024
"""Characters of a tool's result kept in its history turn (the end of it)."""

_PLAN_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
_DONE = frozenset({"completed", "failed"})

TurnSink = Callable[[Turn], None]
"""Records one turn (masked, appended to the history, handed to the handoff keeper)."""


@dataclass
class ToolCallState:
    """What is known of one tool call so far."""

    id: str
    title: str
    kind: str | None = None
    status: str = "pending"
    raw_input: Any = None
    raw_output: Any = None
    paths: list[str] = field(default_factory=list)
    content: str = ""
    """The text content the runtime reported last (ACP: each report replaces it)."""
    tail: str = ""
    """The end of everything shown as its output (content and terminal output)."""
    diffs: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    announced: bool = False
    """Whether its ``tool.start`` went out."""
    ended: bool = False

    def shown(self, text: str) -> None:
        if len(text) >= RESULT_CHARS:  # a flood's piece: no copy of what it replaces
            self.tail = text[-RESULT_CHARS:]
        else:
            self.tail = (self.tail + text)[-RESULT_CHARS:]

    def result_text(self) -> str:
        parts = [self.tail]
        parts.extend(self.diffs)
        if not parts[0] and self.raw_output is not None:
            parts[0] = _raw_output_text(self.raw_output)
        text = "\n".join(part for part in parts if part)
        return text if len(text) <= RESULT_CHARS else "…" + text[-RESULT_CHARS:]


class PromptStream:
    """Receives one prompt's updates and publishes and records them.

    Args:
        item: The queue item the prompt runs.
        events: Where events go.
        redactor: Masks secrets in the framed text.
        record: Records a turn.
        turn: Builds a turn of ``item`` (role, content, fields).
        plan_path: The agent's plan file.
        on_mode: Told of a change of the runtime's mode.
        on_usage: Told of each usage update: tokens in context, window, cumulative cost.
    """

    def __init__(
        self,
        item: QueueItem,
        *,
        events: EventPublisher,
        redactor: Redactor,
        record: TurnSink,
        turn: Callable[..., Turn],
        plan_path: Path,
        on_mode: Callable[[str], None],
        on_usage: Callable[[int, int, float | None], None],
    ) -> None:
        self.item = item
        self.ids: TaskIds = item.ids()
        self._events = events
        self._record = record
        self._turn = turn
        self._plan_path = plan_path
        self._on_mode = on_mode
        self._on_usage = on_usage
        self._text: list[str] = []
        """Answer text since the last recorded turn."""
        self.answer: list[str] = []
        """All the answer text of the prompt."""
        self.calls: dict[str, ToolCallState] = {}
        self._order: list[str] = []
        self._tokens = Coalescer(self._token_frame, redactor=redactor)
        self._outputs: dict[str | None, Coalescer] = {}
        """Per tool call, the framer of its output (as a native command's is framed)."""
        self._thoughts = Coalescer(self._thought_frame, redactor=redactor)
        self._redactor = redactor
        self.updates = 0

    # frames ---------------------------------------------------------------------------

    def _token_frame(self, frame: JsonObject) -> None:
        self._events.emit_redacted(EventType.TOKEN, frame, **self.ids)

    def _thought_frame(self, frame: JsonObject) -> None:
        self._events.emit_redacted(EventType.TOKEN, frame, thinking=True, **self.ids)

    # updates --------------------------------------------------------------------------

    def update(self, update: Any) -> None:
        """Take one session update (any of the SDK's update models)."""
        self.updates += 1
        kind = getattr(update, "session_update", None)
        handler = _HANDLERS.get(str(kind))
        if handler is None:
            log.debug("session update %s left alone", kind)
            return
        handler(self, update)

    def _message(self, update: schema.AgentMessageChunk) -> None:
        text = _block_text(update.content)
        if text:
            self._thoughts.flush()  # the reasoning so far goes out before the answer
            first = not self.answer
            self._text.append(text)
            self.answer.append(text)
            self._tokens.feed(text)
            if first:
                # The first words of an answer go out at once, not a framing window
                # later: that wait is what a person watching notices.
                self._tokens.flush()

    def _thought(self, update: schema.AgentThoughtChunk) -> None:
        text = _block_text(update.content)
        if text:
            self._tokens.flush()
            self._thoughts.feed(text)

    def _tool_call(self, update: schema.ToolCallStart) -> None:
        known = self.calls.get(update.tool_call_id)
        if known is not None:  # a second start for one id: treat it as an update
            self._progress(known, self._merge(known, update))
            return
        call = ToolCallState(id=update.tool_call_id, title=update.title or "tool")
        self.calls[call.id] = call
        self._order.append(call.id)
        self._progress(call, self._merge(call, update))

    def _tool_update(self, update: schema.ToolCallProgress) -> None:
        call = self.calls.get(update.tool_call_id)
        if call is None:  # an update for a call never started: start it now
            start = schema.ToolCallStart(
                session_update="tool_call",
                tool_call_id=update.tool_call_id,
                title=update.title or "tool",
                kind=update.kind,
                status=update.status,
                content=update.content,
                locations=update.locations,
                raw_input=update.raw_input,
                raw_output=update.raw_output,
            )
            self._tool_call(start)
            return
        self._progress(call, self._merge(call, update))

    def _merge(self, call: ToolCallState, update: Any) -> str:
        """Take what ``update`` says of ``call``; returns its new output text."""
        if update.title:
            call.title = update.title
        if update.kind:
            call.kind = str(update.kind)
        if update.status:
            call.status = str(update.status)
        if update.raw_input is not None and update.raw_input != {}:
            call.raw_input = update.raw_input
        if update.raw_output is not None:
            call.raw_output = update.raw_output
        for location in update.locations or ():
            if location.path not in call.paths:
                call.paths.append(location.path)
        fresh = ""
        if update.content is not None:
            # Content replaces what the call showed before (ACP): what extends the last
            # report is new output; anything else is new content as a whole.
            texts, diffs = _contents(update.content)
            if texts:
                joined = "".join(texts)
                fresh = joined[len(call.content) :] if joined.startswith(call.content) else joined
                call.content = joined
            if diffs:
                call.diffs = diffs
        return fresh

    def _progress(self, call: ToolCallState, fresh: str = "") -> None:
        # A call is announced once it says what it does: Claude Code first reports a
        # bare "Terminal" and its command a moment later.
        if not call.announced and (_described(call) or fresh or call.status in _DONE):
            self._announce(call)
        if fresh:
            self.output(call.id, fresh.encode(), fresh)
        if call.status in _DONE and not call.ended:
            self._end(call)

    def _announce(self, call: ToolCallState) -> None:
        call.announced = True
        self._flush_text(with_call=call)
        self._thoughts.flush()
        self._tokens.flush()  # what it said before the call is shown before it
        self._events.emit(
            EventType.TOOL_START,
            call_id=call.id,
            name=call.title,
            kind=call.kind,
            input=_jsonable(call.raw_input),
            paths=call.paths or None,
            **self.ids,
        )

    def terminal_output(self, call_id: str | None, data: bytes) -> None:
        """Output of a command ateam runs for the runtime, under the call it belongs to."""
        self.output(call_id, data)

    def output(self, call_id: str | None, data: bytes, text: str | None = None) -> None:
        """Output of ``call_id`` (``None``: of no call), framed and masked as native output;
        ``text`` is ``data`` as text, where the caller has it."""
        call = self.calls.get(call_id) if call_id is not None else None
        if call is not None:
            if not call.announced:
                self._announce(call)
            call.shown(text if text is not None else data.decode("utf-8", "replace"))
        framer = self._outputs.get(call_id)
        if framer is None:
            name = call.title if call is not None else "terminal"

            def frame(body: JsonObject) -> None:
                self._events.emit_redacted(
                    EventType.TOOL_OUTPUT, body, call_id=call_id, name=name, **self.ids
                )

            framer = self._outputs[call_id] = Coalescer.for_output(frame, redactor=self._redactor)
        framer.feed(data)

    def _close_output(self, call_id: str | None) -> None:
        framer = self._outputs.pop(call_id, None)
        if framer is not None:
            framer.close()

    def _end(self, call: ToolCallState) -> None:
        if not call.announced:
            self._announce(call)
        call.ended = True
        self._close_output(call.id)  # its last output goes before its end
        ok = call.status == "completed"
        end: dict[str, Any] = {"ok": ok}
        exit_code = _exit_code(call.raw_output)
        if exit_code is not None:
            end["exit_code"] = exit_code
        if call.diffs:
            end["diff"] = "\n".join(call.diffs)
        if not ok:
            end.update(code="tool.failed", error=_first_line(call.result_text()) or "failed")
        self._events.emit(
            EventType.TOOL_END,
            call_id=call.id,
            name=call.title,
            duration_s=round(time.monotonic() - call.started, 4),
            **end,
            **self.ids,
        )
        self._record(
            self._turn(
                "tool",
                call.result_text(),
                source=call.title,
                tool_call_id=call.id,
                name=call.title,
                ok=ok,
            )
        )

    def _plan(self, update: schema.AgentPlanUpdate) -> None:
        lines = [f"- {_PLAN_MARKS.get(str(e.status), '[ ]')} {e.content}" for e in update.entries]
        try:
            write_plan(self._plan_path, "\n".join(lines) + "\n" if lines else "")
        except (OSError, ValueError) as exc:
            log.warning("the runtime's plan was not written: %s", exc)

    def _usage(self, update: schema.UsageUpdate) -> None:
        cost = update.cost.amount if update.cost is not None else None
        self._on_usage(update.used, update.size, cost)

    def _mode(self, update: schema.CurrentModeUpdate) -> None:
        self._on_mode(update.current_mode_id)

    # the end ----------------------------------------------------------------------------

    def _flush_text(self, *, with_call: ToolCallState | None = None) -> None:
        """Record the text so far as an assistant turn (carrying ``with_call``, if any)."""
        text = "".join(self._text)
        self._text.clear()
        if not text and with_call is None:
            return
        fields: dict[str, Any] = {}
        if with_call is not None:
            args = with_call.raw_input if isinstance(with_call.raw_input, dict) else {}
            fields["tool_calls"] = [
                ToolCallRecord(id=with_call.id, name=with_call.title, args=_jsonable(args))
            ]
        self._record(self._turn("assistant", text, source="model", **fields))

    def close(self, *, final: bool) -> str:
        """Flush the frames, end calls left open, record the answer; returns the answer."""
        self._tokens.close()
        self._thoughts.close()
        self._close_output(None)
        for call_id in self._order:
            call = self.calls[call_id]
            if not call.ended:
                call.status = "completed" if final else "failed"
                self._end(call)
        text = "".join(self._text)
        self._text.clear()
        if text or final:
            self._record(self._turn("assistant", text, source="model", final=final))
        return "".join(self.answer)

    def open_call(self) -> str | None:
        """The newest call still running: a terminal created now belongs to it."""
        for call_id in reversed(self._order):
            if not self.calls[call_id].ended:
                return call_id
        return None


_HANDLERS: dict[str, Callable[[PromptStream, Any], None]] = {
    "agent_message_chunk": PromptStream._message,
    "agent_thought_chunk": PromptStream._thought,
    "tool_call": PromptStream._tool_call,
    "tool_call_update": PromptStream._tool_update,
    "plan": PromptStream._plan,
    "usage_update": PromptStream._usage,
    "current_mode_update": PromptStream._mode,
}


def _described(call: ToolCallState) -> bool:
    """Whether a call says what it does yet (its input, its files, its content)."""
    return bool(call.raw_input) or bool(call.paths) or bool(call.diffs) or bool(call.content)


def _block_text(block: Any) -> str:
    text = getattr(block, "text", None)
    return text if isinstance(text, str) else ""


def _contents(content: list[Any]) -> tuple[list[str], list[str]]:
    texts: list[str] = []
    diffs: list[str] = []
    for part in content:
        kind = getattr(part, "type", None)
        if kind == "content":
            text = _block_text(part.content)
            if text:
                texts.append(text)
        elif kind == "diff":
            diffs.append(unified(part.old_text or "", part.new_text, part.path))
    return texts, diffs


def unified(old: str, new: str, path: str) -> str:
    """A unified diff of one file's change, as consoles show diffs."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path.lstrip('/')}",
        tofile=f"b/{path.lstrip('/')}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _exit_code(raw: Any) -> int | None:
    if not isinstance(raw, dict):
        return None
    for key in ("exit_code", "exitCode", "code"):
        value = raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _raw_output_text(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, dict):
        for key in ("formatted_output", "aggregated_output", "stdout", "output"):
            value = raw.get(key)
            if isinstance(value, str) and value:
                return value
    return json.dumps(raw, ensure_ascii=False, default=str)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def _jsonable(value: Any) -> Any:
    """A runtime's raw input as plain JSON (it is the runtime's own shape)."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)
