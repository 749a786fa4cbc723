"""Configuration: discovery of ``.ateam/`` directories, merge rules and typed schemas (SPEC §3).

Typical use::

    project = load_project(Path.cwd())
    zeus = project.agent("zeus")
    entry = zeus.model_entry()  # the primary model's registry entry

Every failure raises :class:`~ateam.errors.ConfigError` naming the file, the field path
and the problem.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ateam._lazy import exports

if TYPE_CHECKING:
    from ateam.config.discovery import CONFIG_DIR, discover
    from ateam.config.loader import (
        AgentConfig,
        ProjectConfig,
        agent_dir_for,
        load_project,
        project_here,
        project_name,
        standalone_agent,
    )
    from ateam.config.schema import (
        ECHO_MODEL,
        AgentSpec,
        AgentToolsSpec,
        Approval,
        ExecSpec,
        FsSpec,
        ModelEntry,
        ModelSettings,
        ModelsFile,
        Prices,
        ProjectFile,
        PromptsSpec,
        Provider,
        RedactFile,
        RedactPattern,
        SwitchingSpec,
        ToolPolicy,
        ToolsFile,
        TransportSpec,
    )
    from ateam.errors import ConfigError

# Loaded at first use (ateam._lazy): a verb pays only for the modules of the names
# it uses.
_LAZY = {
    "ateam.config.discovery": (
        "CONFIG_DIR",
        "discover",
    ),
    "ateam.config.loader": (
        "AgentConfig",
        "ProjectConfig",
        "agent_dir_for",
        "load_project",
        "project_here",
        "project_name",
        "standalone_agent",
    ),
    "ateam.config.schema": (
        "ECHO_MODEL",
        "AgentSpec",
        "AgentToolsSpec",
        "Approval",
        "ExecSpec",
        "FsSpec",
        "ModelEntry",
        "ModelSettings",
        "ModelsFile",
        "Prices",
        "ProjectFile",
        "PromptsSpec",
        "Provider",
        "RedactFile",
        "RedactPattern",
        "SwitchingSpec",
        "ToolPolicy",
        "ToolsFile",
        "TransportSpec",
    ),
    "ateam.errors": ("ConfigError",),
}
__getattr__, __dir__ = exports(__name__, _LAZY)

__all__ = [
    "CONFIG_DIR",
    "ECHO_MODEL",
    "AgentConfig",
    "AgentSpec",
    "AgentToolsSpec",
    "Approval",
    "ConfigError",
    "ExecSpec",
    "FsSpec",
    "ModelEntry",
    "ModelSettings",
    "ModelsFile",
    "Prices",
    "ProjectConfig",
    "ProjectFile",
    "PromptsSpec",
    "Provider",
    "RedactFile",
    "RedactPattern",
    "SwitchingSpec",
    "ToolPolicy",
    "ToolsFile",
    "TransportSpec",
    "agent_dir_for",
    "discover",
    "load_project",
    "project_here",
    "project_name",
    "standalone_agent",
]
