"""The team as a typed Python API: the one library every front end stands on.

``ateam`` verbs, the plain and panes consoles, and any later front end (MCP, web) talk
to the bus only through this package::

    team = await Team.connect(resolve_target(None, None))
    for status in await team.agents(): ...
    sent = await team.agent("hello/zeus").send("hi",)
    async for item in team.agent("hello/zeus").tail(from_offset=1): ...

See ``docs/python-api.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ateam._lazy import exports

if TYPE_CHECKING:
    from ateam.bus.backoff import CONNECTION_ERRORS
    from ateam.bus.events import Event, EventType, Gap, decode_chunk
    from ateam.client.agent import AgentHandle, Attachment, PlanApi
    from ateam.client.board import TasksApi
    from ateam.client.kb import KB_INGEST_TIMEOUT_S, KbApi
    from ateam.client.member import TeamMember
    from ateam.client.modes import ModesApi, ModesResult
    from ateam.client.notices import RESUMED, Notice, NoticeKind, Notices
    from ateam.client.outcomes import Outcomes, TaskResult, TaskWatch
    from ateam.client.redaction import local_redactor, project_at, redactor_for, secrets_notice
    from ateam.client.server import server_command
    from ateam.client.tail import Tail
    from ateam.client.target import (
        Target,
        bus_errors,
        redeem_bootstrap,
        resolve_target,
    )
    from ateam.client.team import ContextApi, Team, session_id
    from ateam.client.work import (
        Discarded,
        Landed,
        WorkDiff,
        WorkPlace,
        discard_work,
        merge_work,
        work_diff,
        work_place,
    )
    from ateam.wire.board import BoardTask, TaskStatus, blocked_by, blocked_note
    from ateam.wire.context_items import LOCAL_RUNTIMES, ContextItem, ContextType, Scope, Urgency
    from ateam.wire.events import (
        Chunk,
        KbProgress,
        Malformed,
        Payload,
        TaskEnd,
        TaskStart,
        ToolEnd,
        ToolStart,
    )
    from ateam.wire.ownership import OwnerInfo, OwnerKind
    from ateam.wire.registry import AgentStatus
    from ateam.wire.results import InputResult, KbReport, PlanReadResult, PlanWriteResult
    from ateam.wire.turns import Turn

# Loaded at first use (ateam._lazy): a verb pays only for the modules of the names
# it uses.
_LAZY = {
    "ateam.bus.backoff": ("CONNECTION_ERRORS",),
    "ateam.bus.events": ("Event", "EventType", "Gap", "decode_chunk"),
    "ateam.client.agent": ("AgentHandle", "Attachment", "PlanApi"),
    "ateam.client.kb": ("KB_INGEST_TIMEOUT_S", "KbApi"),
    "ateam.client.board": ("TasksApi",),
    "ateam.client.member": ("TeamMember",),
    "ateam.client.modes": ("ModesApi", "ModesResult"),
    "ateam.client.notices": ("RESUMED", "Notice", "NoticeKind", "Notices"),
    "ateam.client.outcomes": ("Outcomes", "TaskResult", "TaskWatch"),
    "ateam.client.redaction": ("local_redactor", "project_at", "redactor_for", "secrets_notice"),
    "ateam.client.server": ("server_command",),
    "ateam.client.tail": ("Tail",),
    "ateam.client.target": ("Target", "bus_errors", "redeem_bootstrap", "resolve_target"),
    "ateam.client.team": ("ContextApi", "Team", "session_id"),
    "ateam.client.work": (
        "Discarded",
        "Landed",
        "WorkDiff",
        "WorkPlace",
        "discard_work",
        "merge_work",
        "work_diff",
        "work_place",
    ),
    "ateam.wire.board": ("BoardTask", "TaskStatus", "blocked_by", "blocked_note"),
    "ateam.wire.context_items": (
        "LOCAL_RUNTIMES",
        "ContextItem",
        "ContextType",
        "Scope",
        "Urgency",
    ),
    "ateam.wire.events": (
        "Chunk",
        "KbProgress",
        "Malformed",
        "Payload",
        "TaskEnd",
        "TaskStart",
        "ToolEnd",
        "ToolStart",
    ),
    "ateam.wire.ownership": ("OwnerInfo", "OwnerKind"),
    "ateam.wire.registry": ("AgentStatus",),
    "ateam.wire.results": ("InputResult", "KbReport", "PlanReadResult", "PlanWriteResult"),
    "ateam.wire.turns": ("Turn",),
}
__getattr__, __dir__ = exports(__name__, _LAZY)

__all__ = [
    "CONNECTION_ERRORS",
    "KB_INGEST_TIMEOUT_S",
    "LOCAL_RUNTIMES",
    "RESUMED",
    "AgentHandle",
    "AgentStatus",
    "Attachment",
    "BoardTask",
    "Chunk",
    "ContextApi",
    "ContextItem",
    "ContextType",
    "Discarded",
    "Event",
    "EventType",
    "Gap",
    "InputResult",
    "KbApi",
    "KbProgress",
    "KbReport",
    "Landed",
    "Malformed",
    "ModesApi",
    "ModesResult",
    "Notice",
    "NoticeKind",
    "Notices",
    "Outcomes",
    "OwnerInfo",
    "OwnerKind",
    "Payload",
    "PlanApi",
    "PlanReadResult",
    "PlanWriteResult",
    "Scope",
    "Tail",
    "Target",
    "TaskEnd",
    "TaskResult",
    "TaskStart",
    "TaskStatus",
    "TaskWatch",
    "TasksApi",
    "Team",
    "TeamMember",
    "ToolEnd",
    "ToolStart",
    "Turn",
    "Urgency",
    "WorkDiff",
    "WorkPlace",
    "blocked_by",
    "blocked_note",
    "bus_errors",
    "decode_chunk",
    "discard_work",
    "local_redactor",
    "merge_work",
    "project_at",
    "redactor_for",
    "redeem_bootstrap",
    "resolve_target",
    "secrets_notice",
    "server_command",
    "session_id",
    "work_diff",
    "work_place",
]
