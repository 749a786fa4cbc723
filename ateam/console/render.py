"""One event as styled lines: the renderer plain mode and the panes both draw from.

:func:`render` turns an event into either a :class:`Chunk` of streamed text (model
tokens, tool output: the front end joins chunks into lines itself) or a tuple of whole
:class:`Line` s, each with a :class:`Tone` saying what the line is. A front end decides
only how a tone looks: plain mode prefixes the agent and colours diff lines with ANSI
codes; the panes give each tone a Rich style. What a line says is written once, here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from ateam.client import Event, EventType, Gap
from ateam.console.tables import handoff_line, kb_progress_line
from ateam.wire import events as wire
from ateam.wire.notices import notice_line

__all__ = ["Chunk", "Line", "Rendered", "Tone", "render", "render_gap"]


class Tone(StrEnum):
    """What a line is; each front end maps tones to its own look."""

    TEXT = "text"
    QUIET = "quiet"
    """Bookkeeping worth a glance: ownership, prompt versions, kb progress."""
    RULE = "rule"
    """A task begins or ends well."""
    RULE_FAILED = "rule-failed"
    TOOL = "tool"
    """A tool call starts."""
    TOOL_DONE = "tool-done"
    TOOL_FAILED = "tool-failed"
    WARN = "warn"
    ERROR = "error"
    STATE = "state"
    """A state the user should notice (waiting, blocked, shutting down)."""
    SWITCH = "switch"
    """The agent moved to another model."""
    HEADING = "heading"
    ASK = "ask"
    """The agent waits for an answer from its owner."""
    ANSWER = "answer"
    DIFF_FILE = "diff-file"
    DIFF_HUNK = "diff-hunk"
    DIFF_ADD = "diff-add"
    DIFF_DEL = "diff-del"


@dataclass(frozen=True)
class Line:
    """One whole line of an agent's stream."""

    text: str
    tone: Tone = Tone.TEXT


@dataclass(frozen=True)
class Chunk:
    """Streamed text, to be joined into lines by the front end."""

    text: str
    output: bool = False
    """Tool output (its colours carry over between lines) rather than model text."""
    thinking: bool = False
    """A coding agent's reasoning, not its answer: front ends dim it."""


Rendered = Chunk | tuple[Line, ...]

SHOWN_STATES = frozenset({"waiting", "blocked", "shutdown"})
"""States that get a line of their own in the stream; the others only change lists."""


def render(event: Event) -> Rendered:
    """``event`` as a chunk of streamed text or as whole lines (possibly none)."""
    payload = event.payload
    if isinstance(payload, wire.Malformed):
        return (Line(f"malformed event #{event.offset}: {payload.problem}", Tone.WARN),)
    renderer = _RENDERERS.get(event.type)
    if renderer is None:  # a newer agent's event: shown, not lost
        return (Line(f"{event.type} {_json(event.data, ascii=True)}", Tone.QUIET),)
    return renderer(payload, event)


def render_gap(gap: Gap) -> Line:
    """A hole in an agent's stream (events expired before this console read them)."""
    return Line(gap.message(), Tone.WARN)


def _json(value: Any, *, ascii: bool = False) -> str:
    # Arguments and payloads may hold bytes (a tool writing a binary file): shown as
    # their repr, never an exception in the middle of a stream.
    return json.dumps(value, ensure_ascii=ascii, default=str)


_RENDERERS: dict[str, Callable[[wire.Payload, Event], Rendered]] = {}
"""Event type → its renderer, filled by :func:`_renders`."""

_M = TypeVar("_M", bound=wire.Payload)


def _renders(
    model: type[_M], *types: EventType
) -> Callable[[Callable[[_M, Event], Rendered]], Callable[[_M, Event], Rendered]]:
    """Register a renderer of ``types``, whose payloads are ``model``s (``ateam.wire``)."""

    def register(fn: Callable[[_M, Event], Rendered]) -> Callable[[_M, Event], Rendered]:
        def checked(payload: wire.Payload, event: Event) -> Rendered:
            if not isinstance(payload, model):  # parse_payload picked another model
                return (Line(f"{event.type} {_json(event.data, ascii=True)}", Tone.QUIET),)
            return fn(payload, event)

        for etype in types:
            _RENDERERS[etype] = checked
        return fn

    return register


def _text(chunk: wire.Chunk) -> str:
    if chunk.text is not None and chunk.bin is None and chunk.b64 is None:
        return chunk.text
    # Bytes as written: output that is not UTF-8 shows replacement marks instead of
    # breaking the line, and colour escapes pass through for the front end to read.
    return chunk.data().decode("utf-8", "replace")


@_renders(wire.Chunk, EventType.TOKEN)
def _token(chunk: wire.Chunk, event: Event) -> Rendered:
    return Chunk(_text(chunk), thinking=chunk.thinking)


@_renders(wire.Chunk, EventType.TOOL_OUTPUT)
def _tool_output(chunk: wire.Chunk, event: Event) -> Rendered:
    return Chunk(_text(chunk), output=True)


@_renders(wire.ToolStart, EventType.TOOL_START)
def _tool_start(start: wire.ToolStart, event: Event) -> Rendered:
    args = start.input or {}
    command = _command_of(start, args)
    if command is not None:
        shown = f"$ {command}"
    elif start.kind is not None:  # a coding agent's call: its title says what it does
        where = f" ({', '.join(start.paths)})" if start.paths else ""
        shown = f"{start.name}{where}"
    else:
        shown = f"{start.name} {_json(args)}"
    return (Line(f"▶ {shown}", Tone.TOOL),)


def _command_of(start: wire.ToolStart, args: object) -> str | None:
    """The shell command a tool call runs: ``os.exec``'s, or a coding agent's ``execute``."""
    if not isinstance(args, dict):
        return None
    if start.name == "os.exec":
        return str(args.get("cmd"))
    if start.kind == "execute":
        command = args.get("command") or args.get("cmd")
        if isinstance(command, list):
            return " ".join(str(part) for part in command)
        if isinstance(command, str):
            return command
    return None


@_renders(wire.ToolEnd, EventType.TOOL_END)
def _tool_end(end: wire.ToolEnd, event: Event) -> Rendered:
    reason = end.reason
    if end.exit_code is not None or reason not in (None, "exited"):
        status = f"exit {end.exit_code}"
        if reason not in (None, "exited"):
            status += f" ({reason})"
        failed = end.exit_code != 0
    elif end.ok:
        status, failed = "ok", False
    else:
        status, failed = f"failed [{end.code}]: {end.error}", True
    text = f"◀ {end.name} {status} ({end.duration_s}s)"
    done = Line(text, Tone.TOOL_FAILED if failed else Tone.TOOL_DONE)
    if not end.diff:
        return (done,)
    return (*(Line(line, _diff_tone(line)) for line in end.diff.splitlines()), done)


@_renders(wire.TaskStart, EventType.TASK_START)
def _task_start(start: wire.TaskStart, event: Event) -> Rendered:
    # Input from a teammate, an MCP client, the board or a blocking context item says so:
    # the owner must see that this task was not typed at a console.
    origin = f" (from {start.source})" if start.source.startswith(_FOREIGN) else ""
    return (Line(f"task {start.task_id}{origin}: {start.text}", Tone.RULE),)


_FOREIGN = ("agent:", "mcp:", "board:", "context:")
"""Sources of input that did not come from a person at a console or a script."""


@_renders(wire.TaskEnd, EventType.TASK_END)
def _task_end(end: wire.TaskEnd, event: Event) -> Rendered:
    outcome = "done" if end.ok else f"failed: {end.error}"
    timing = f" ({end.duration_s}s)" if end.duration_s is not None else ""
    tone = Tone.RULE if end.ok else Tone.RULE_FAILED
    return (Line(f"task {end.task_id} {outcome}{timing}", tone),)


@_renders(wire.Notice, EventType.WARN)
def _warn(notice: wire.Notice, event: Event) -> Rendered:
    return (Line(f"warn: {notice.msg}", Tone.WARN),)


@_renders(wire.Notice, EventType.ERROR)
def _error(notice: wire.Notice, event: Event) -> Rendered:
    code = f" [{notice.code}]" if notice.code else ""
    return (Line(f"error{code}: {notice.msg}", Tone.ERROR),)


@_renders(wire.StateChange, EventType.STATE)
def _state(change: wire.StateChange, event: Event) -> Rendered:
    return (Line(f"state: {change.state}", Tone.STATE),) if change.state in SHOWN_STATES else ()


@_renders(wire.OwnershipChange, EventType.OWNERSHIP)
def _ownership(change: wire.OwnershipChange, event: Event) -> Rendered:
    return (Line(f"owner is now {change.owner or 'nobody'}", Tone.QUIET),)


@_renders(wire.ModelSwitch, EventType.MODEL_SWITCH)
def _model_switch(switch: wire.ModelSwitch, event: Event) -> Rendered:
    text = f"model switch: {switch.from_} → {switch.to} ({switch.reason})"
    return (Line(text, Tone.SWITCH),)


@_renders(wire.ApprovalRequest, EventType.DIFF_PROPOSED)
def _diff_proposed(request: wire.ApprovalRequest, event: Event) -> Rendered:
    return (
        Line(f"*** {request.tool} wants to change {request.path}:", Tone.HEADING),
        *(Line(line, _diff_tone(line)) for line in request.diff.splitlines()),
        Line(f"*** waiting for you: /apply, /reject or /edit {request.request_id}", Tone.ASK),
    )


@_renders(wire.ApprovalRequest, EventType.APPROVAL_REQUEST)
def _approval_request(request: wire.ApprovalRequest, event: Event) -> Rendered:
    text = (
        f"*** approval needed: {request.tool} {_json(request.args)} — "
        f"/approve or /reject {request.request_id}"
    )
    return (Line(text, Tone.ASK),)


@_renders(wire.ApprovalResolved, EventType.APPROVAL_RESOLVED)
def _approval_resolved(answer: wire.ApprovalResolved, event: Event) -> Rendered:
    reason = f" ({answer.reason})" if answer.reason else ""
    return (Line(f"{answer.request_id}: {answer.decision}{reason}", Tone.ANSWER),)


@_renders(wire.PromptChange, EventType.PROMPT)
def _prompt(change: wire.PromptChange, event: Event) -> Rendered:
    text = f"prompt {change.action} (v{change.version}): {change.reason}"
    return (Line(text, Tone.QUIET),)


@_renders(wire.KbProgress, EventType.KB_PROGRESS)
def _kb_progress(progress: wire.KbProgress, event: Event) -> Rendered:
    return (Line(kb_progress_line(progress), Tone.QUIET),)


@_renders(wire.ContextChange, EventType.CONTEXT)
def _context(change: wire.ContextChange, event: Event) -> Rendered:
    if change.action in ("summarized", "summary_failed"):
        why = f": {change.error}" if change.error else ""
        return (Line(f"working context {change.action}{why}", Tone.QUIET),)
    return (Line(f"context {_json(event.data, ascii=True)}", Tone.QUIET),)


@_renders(wire.TeamContextFed, EventType.TEAM_CONTEXT)
def _team_context(fed: wire.TeamContextFed, event: Event) -> Rendered:
    return tuple(
        Line(f"fed {i.id}: [{i.urgency}/{i.type}] {i.title} (from {i.source})", Tone.QUIET)
        for i in fed.items
    )


@_renders(wire.HookRun, EventType.HOOK_RUN)
def _hook_run(run: wire.HookRun, event: Event) -> Rendered:
    verdict = "refused" if run.refused else "failed" if run.failed else "accepted"
    said = f": {run.feedback}" if run.feedback and (run.refused or run.failed) else ""
    tone = Tone.WARN if run.refused or run.failed else Tone.QUIET
    return (Line(f"hook {run.hook} {verdict} (exit {run.exit}, {run.ms} ms){said}", tone),)


@_renders(wire.TeamNoticeSent, EventType.TEAM_NOTICE)
def _team_notice(notice: wire.TeamNoticeSent, event: Event) -> Rendered:
    # On the sender's stream it names who was told; on a receiver's it is news heard.
    said = notice_line(notice.sender, notice.kind, notice.board_task, notice.title, notice.text)
    told = f" (told {', '.join(notice.to)})" if notice.to else ""
    return (Line(f"notice: {said}{told}", Tone.STATE),)


@_renders(wire.Handoff, EventType.HANDOFF)
def _handoff(handoff: wire.Handoff, event: Event) -> Rendered:
    line = handoff_line(handoff)
    return (Line(line, Tone.QUIET),) if line else ()


# Order matters: "+++"/"---" file headers before "+"/"-" lines.
_DIFF_TONES: tuple[tuple[str, Tone], ...] = (
    ("+++", Tone.DIFF_FILE),
    ("---", Tone.DIFF_FILE),
    ("@@", Tone.DIFF_HUNK),
    ("+", Tone.DIFF_ADD),
    ("-", Tone.DIFF_DEL),
)


def _diff_tone(line: str) -> Tone:
    for start, tone in _DIFF_TONES:
        if line.startswith(start):
            return tone
    return Tone.TEXT
