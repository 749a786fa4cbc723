"""The ``task_created`` gate of the front ends (issue 26): ``ateam tasks add``, ``/tasks add``
and MCP ``task_add``.

An agent asks its own hooks (:mod:`ateam.agent.loop.gates`). A task added from outside
any agent is judged by the ``task_created`` hook of the project it goes to, as that
project's ``project.yaml`` (merged like every configuration) says, run in the project
root with the environment policy of its ``tools.yaml`` ``exec``. The configuration is the
one found from the current directory when that is the project; else the one at the root
``ateam up`` or a started agent noted for it (:func:`~ateam.config.discovery.remembered_root`),
so a coding agent's own ``ateam mcp``, started outside the project, is judged too. A
project never started on this machine has none at hand, and the add goes on unjudged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from ateam.config import ProjectConfig, load_project
from ateam.config.discovery import remembered_root
from ateam.errors import ConfigError
from ateam.tools.hooks import Hook, HookRunner, hook_limits

__all__ = ["TaskGate", "project_task_gate"]

log = logging.getLogger(__name__)

TaskGate = Callable[[str, Mapping[str, Any]], Awaitable[str | None]]
"""Asked before a task is added to ``project``'s board: raises ``GateRefused`` to refuse;
returns a line to show when the hook failed (the add goes on), else ``None``."""


def _config_of(project: str, start: Path | None) -> ProjectConfig | None:
    remembered = remembered_root(project)
    for where in (start, *([remembered] if remembered is not None else [])):
        try:
            config = load_project(where)
        except ConfigError:  # the front end reports a broken configuration where it reads it
            continue
        if config.name == project and config.root is not None:
            return config
    return None


async def project_task_gate(
    project: str, event: Mapping[str, Any], *, start: Path | None = None
) -> str | None:
    """Ask the ``task_created`` hook of ``project`` (found from ``start``, default the cwd)."""
    config = _config_of(project, start)
    if config is None or config.root is None:
        return None
    runner = HookRunner(config.hooks, cwd=config.root, limits=hook_limits(config.exec))
    run = await runner.run(Hook.TASK_CREATED, {"project": project, **event})
    if run is None:
        return None
    if run.refused:
        raise run.refusal()
    if run.failed:
        failure = run.failure()
        log.warning("%s", failure.message)
        return failure.one_line()
    return None
