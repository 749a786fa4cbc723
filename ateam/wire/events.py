"""Event types and the typed payload of each (SPEC §4.2).

An event on the wire is a msgpack map: ``type``, ``ts``, the envelope, and the fields
of its payload. :func:`parse_payload` turns those fields into the model of the event's
type, once, where a consumer first reads them; renderers and clients then read
attributes. Payloads are read leniently — an agent of another version may add fields
(kept, under ``model_extra``) or leave optional ones out (defaults) — and a payload that
does not fit its model at all becomes :class:`Malformed`, which a console shows as a
warning instead of failing on it.
"""

from __future__ import annotations

import base64
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ateam.wire.event_types import EventType as EventType  # re-exported: types and payloads


class Payload(BaseModel):
    """Fields every payload may carry: the task and trace it belongs to."""

    # defer_build: a validator is built on first use, not at import: a process
    # meets few of these models, and each built one costs start-up and memory.
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True, defer_build=True)

    task_id: str | None = None
    trace_id: str | None = None


class Chunk(Payload):
    """``token`` and ``tool.output``: a piece of text, or of bytes that are not UTF-8.

    Bytes come as ``bin`` (a msgpack binary); ``b64`` is what earlier agents sent.
    """

    text: str | None = None
    bin: bytes | None = None
    b64: str | None = None
    call_id: str | None = None
    name: str | None = None
    thinking: bool = False
    """A coding agent's reasoning (ACP ``agent_thought_chunk``), shown dimmed."""

    def data(self) -> bytes:
        """The chunk's bytes; undecodable base64 becomes a visible marker, not an error."""
        if self.bin is not None:
            return self.bin
        if self.b64 is not None:
            try:
                return base64.b64decode(self.b64, validate=True)
            except ValueError:
                return b"<undecodable binary chunk>"
        return (self.text or "").encode()


class ToolStart(Payload):
    call_id: str | None = None
    name: str = "?"
    input: Any = None
    kind: str | None = None
    """A coding agent's tool kind (``execute``, ``edit``, ``read`` ...); none for native tools."""
    paths: list[str] | None = None
    """The files a coding agent's tool call touches."""


class ToolEnd(Payload):
    call_id: str | None = None
    name: str = "?"
    ok: bool = False
    duration_s: int | float | None = None  # shown as sent: 1 stays "1", not "1.0"
    exit_code: int | None = None
    error: str | None = None
    code: str | None = None
    reason: str | None = None
    """Why a command ended (``exited``, ``timeout``, ``killed`` …)."""
    total_bytes: int | None = None
    """All the output a command wrote, including what was not kept."""
    truncated: bool | None = None
    diff: str | None = None
    """The unified diff of the files a coding agent's tool call changed."""


class TaskStart(Payload):
    text: str = ""
    source: str = ""
    attempt: int = 0


class TaskEnd(Payload):
    ok: bool = False
    error: str | None = None
    code: str | None = None
    """The error's stable code (``provider.auth``, ``task.interrupted`` ...); ``None``
    when the task succeeded, or from an agent older than the field."""
    duration_s: int | float | None = None  # shown as sent: 1 stays "1", not "1.0"
    tokens_in: int = 0
    tokens_out: int = 0
    iterations: int = 0
    recovered: bool = False
    """The end of an answer written before the process died, recorded at restart."""


class Notice(Payload):
    """``warn`` and ``error``: a message for people and, for a warning, a stable code."""

    msg: str = ""
    code: str | None = None


class StateChange(Payload):
    state: str = "?"


class ModelSwitch(Payload):
    from_: str | None = Field(default=None, alias="from")
    to: str | None = None
    reason: str | None = None
    usage: Any = None


class Handoff(Payload):
    action: str | None = None
    sequence: int | None = None
    checksum: str | None = None
    ready: bool | None = None
    next_steps: int = 0
    to: str | None = None
    """``used``: the model the handoff was given to."""


class ApprovalRequest(Payload):
    """``approval.request`` and ``diff.proposed``."""

    request_id: str = "?"
    kind: str = ""
    tool: str = ""
    args: dict[str, Any] = {}
    created: float | None = None
    expires: float | None = None
    path: str | None = None
    """``diff.proposed``: the file the patch changes."""
    diff: str = ""
    patch_id: str | None = None


class ApprovalResolved(Payload):
    request_id: str = "?"
    decision: str = ""
    by: str | None = None
    reason: str | None = None


class PromptChange(Payload):
    action: str = ""
    reason: str | None = None
    version: int | None = None


class OwnershipChange(Payload):
    owner: str | None = None
    previous: str | None = None
    kind: str | None = None
    """The new owner's claim: ``console`` or ``call`` (one call); None when nobody owns it."""


class ContextChange(Payload):
    action: str = ""
    reason: str | None = None
    error: str | None = None


class KbProgress(Payload):
    scope: str = ""
    done: int = 0
    total: int = 0
    path: str = ""


class FedItem(BaseModel):
    """One team context item as fed to an agent (the item itself stays in Redis)."""

    # defer_build: its validator is built at its first use, not at import (issue 28 §2).
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    id: str
    type: str = ""
    urgency: str = ""
    scope: str = ""
    title: str = ""
    source: str = ""


class TeamContextFed(Payload):
    items: list[FedItem] = []


class HookRun(Payload):
    """``hook.run``: one run of a quality-gate hook and its verdict."""

    hook: str = "?"
    exit: int | None = None
    """Its exit status; ``None`` when it did not exit on its own (a timeout)."""
    ms: int = 0
    refused: bool = False
    failed: bool = False
    """It could not judge (an exit other than 0 or 2): reported, the step went on."""
    feedback: str = ""
    tool: str | None = None
    """``before_tool``: the tool it judged."""


class TeamNoticeSent(Payload):
    """``team.notice``: on the sender's stream with ``to``, on a receiver's with ``sender``."""

    sender: str = ""
    kind: str = ""
    board_task: str = ""
    title: str = ""
    text: str = ""
    to: list[str] = []
    """The agents it was sent to (on the sender's stream only)."""


class Malformed(Payload):
    """A payload that did not fit its type's model; ``problem`` says how."""

    problem: str = ""


PAYLOADS: dict[str, type[Payload]] = {
    EventType.TOKEN: Chunk,
    EventType.TOOL_START: ToolStart,
    EventType.TOOL_OUTPUT: Chunk,
    EventType.TOOL_END: ToolEnd,
    EventType.TASK_START: TaskStart,
    EventType.TASK_END: TaskEnd,
    EventType.WARN: Notice,
    EventType.ERROR: Notice,
    EventType.STATE: StateChange,
    EventType.MODEL_SWITCH: ModelSwitch,
    EventType.HANDOFF: Handoff,
    EventType.DIFF_PROPOSED: ApprovalRequest,
    EventType.APPROVAL_REQUEST: ApprovalRequest,
    EventType.APPROVAL_RESOLVED: ApprovalResolved,
    EventType.PROMPT: PromptChange,
    EventType.OWNERSHIP: OwnershipChange,
    EventType.CONTEXT: ContextChange,
    EventType.KB_PROGRESS: KbProgress,
    EventType.TEAM_CONTEXT: TeamContextFed,
    EventType.HOOK_RUN: HookRun,
    EventType.TEAM_NOTICE: TeamNoticeSent,
}
"""Event type → the model of its payload; a type not listed (a newer agent's) is a bare
:class:`Payload` with every field kept as extra."""


def parse_payload(etype: str, data: dict[str, Any]) -> Payload:
    """The typed payload of an event of type ``etype``; never raises."""
    model = PAYLOADS.get(etype, Payload)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problem = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in problem["loc"])
        return Malformed(problem=f"{etype} event: '{where}' {problem['msg'].lower()}")
