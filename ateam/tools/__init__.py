"""Tools: the registry and approval policy, and the built-in tools (SPEC §5.5)."""

from ateam.tools.registry import (
    DEFAULT_TIMEOUT_S,
    ENTRY_POINT_GROUP,
    Tool,
    ToolContext,
    ToolPolicy,
    ToolRegistry,
    default_approval_for,
    default_timeout_for,
    tool,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ENTRY_POINT_GROUP",
    "Tool",
    "ToolContext",
    "ToolPolicy",
    "ToolRegistry",
    "default_approval_for",
    "default_timeout_for",
    "tool",
]
