"""The types of event on the wire (SPEC §4.2), apart from the models of their payloads.

An agent writes events of these types and never reads a payload back; consumers parse
payloads (:mod:`ateam.wire.events`, which re-exports :class:`EventType`). Kept apart so
that an agent's start does not define the payload models it never uses (issue 28 §2:
about 5 ms of pydantic class building).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["EventType"]


class EventType(StrEnum):
    TOKEN = "token"
    TOOL_START = "tool.start"
    TOOL_OUTPUT = "tool.output"
    TOOL_END = "tool.end"
    TASK_START = "task.start"
    TASK_END = "task.end"
    WARN = "warn"
    ERROR = "error"
    STATE = "state"
    MODEL_SWITCH = "model.switch"
    HANDOFF = "handoff"
    DIFF_PROPOSED = "diff.proposed"
    APPROVAL_REQUEST = "approval.request"
    APPROVAL_RESOLVED = "approval.resolved"
    PROMPT = "prompt"
    OWNERSHIP = "ownership"
    CONTEXT = "context"
    KB_PROGRESS = "kb.progress"
    TEAM_CONTEXT = "team.context"
    """Team context items fed to the agent's model for a task (SPEC §9)."""
    HOOK_RUN = "hook.run"
    """A quality-gate hook ran (issue 26): which, how it ended, whether it refused."""
    TEAM_NOTICE = "team.notice"
    """A teammate finished or failed a board task, or went idle (issue 26)."""
