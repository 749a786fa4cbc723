"""``/agent new``: the questions that define a new configured agent, each checked as typed.

The wizard only asks; the console shows the result, asks for confirmation and then writes
``.ateam/agents/NAME/agent.yaml`` and starts the agent. An empty answer takes the
default shown in brackets; an empty answer where there is no default (the name), or three
bad answers in a row, cancel — so a script that runs out of input never creates anything.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ateam._json import JsonObject
from ateam.agent.native.tools import BUILTIN_TOOLS
from ateam.config import ProjectConfig
from ateam.config.names import check_name
from ateam.errors import UsageError

__all__ = ["MAX_TRIES", "AgentWizard", "NewAgent"]

MAX_TRIES = 3
"""Bad answers to one question before the wizard gives up."""


@dataclass(frozen=True)
class NewAgent:
    """The answers, checked."""

    name: str
    cwd: Path
    model: str
    tools: tuple[str, ...]
    description: str
    overlay: str
    project_root: Path

    def agent_yaml(self) -> JsonObject:
        """The ``agent.yaml`` mapping; ``cwd`` relative to the project root when inside it."""
        spec: dict[str, Any] = {"model": self.model}
        if self.cwd != self.project_root:
            inside = self.cwd.is_relative_to(self.project_root)
            spec["cwd"] = str(self.cwd.relative_to(self.project_root) if inside else self.cwd)
        if self.tools:
            spec["tools"] = {"allow": list(self.tools)}
        if self.description:
            spec["description"] = self.description
        return spec


@dataclass(frozen=True)
class _Step:
    field: str
    question: str
    default: Callable[[AgentWizard], str | None]
    parse: Callable[[AgentWizard, str], Any]


class AgentWizard:
    """Asks the questions of :data:`STEPS` through ``ask`` and reports problems via ``say``."""

    def __init__(
        self,
        project: ProjectConfig,
        *,
        taken: set[str],
        ask: Callable[[str], Awaitable[str]],
        say: Callable[[str], None],
    ) -> None:
        if project.root is None:
            raise UsageError("/agent new needs a project with a .ateam/ directory")
        self.project = project
        self.root: Path = project.root
        self.taken = taken
        self._ask = ask
        self._say = say

    async def run(self) -> NewAgent | None:
        """The checked answers, or ``None`` if the user cancelled."""
        values: dict[str, Any] = {}
        for step in STEPS:
            value = await self._one(step)
            if value is None:
                return None
            values[step.field] = value
        return NewAgent(project_root=self.root, **values)

    async def _one(self, step: _Step) -> Any:
        default = step.default(self)
        shown = f" [{default}]" if default else ""
        for _ in range(MAX_TRIES):
            answer = (await self._ask(f"{step.question}{shown}: ")).strip()
            if not answer:
                if default is None:
                    return None
                answer = default
            try:
                return step.parse(self, answer)
            except UsageError as exc:
                self._say(exc.one_line())
        return None

    # checks ---------------------------------------------------------------------------

    def _name(self, value: str) -> str:
        try:
            check_name(value, "agent")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if value in self.project.agents:
            raise UsageError(f"{self.project.name}/{value} is already configured")
        if f"{self.project.name}/{value}" in self.taken:
            raise UsageError(f"{self.project.name}/{value} is already running")
        return value

    def _cwd(self, value: str) -> Path:
        path = Path(value).expanduser()
        path = (path if path.is_absolute() else self.root / path).resolve()
        if not path.is_dir():
            raise UsageError(f"{path} is not a directory")
        return path

    def _model(self, value: str) -> str:
        if value not in self.project.models:
            known = ", ".join(sorted(self.project.models))
            raise UsageError(f"unknown model {value!r}; known: {known}")
        return value

    def _tools(self, value: str) -> tuple[str, ...]:
        if value == "none":
            return ()
        globs = tuple(part.strip() for part in value.split(",") if part.strip())
        names = [item.name for item in BUILTIN_TOOLS]
        for glob in globs:
            if not fnmatch.filter(names, glob):
                raise UsageError(f"{glob!r} matches no tool; tools: {', '.join(names)}")
        return globs

    def _text(self, value: str) -> str:
        return "" if value == "none" else value


STEPS: tuple[_Step, ...] = (
    _Step("name", "name of the new agent", lambda w: None, AgentWizard._name),
    _Step("cwd", "working directory", lambda w: str(w.root), AgentWizard._cwd),
    _Step("model", "model", lambda w: w.project.default_model, AgentWizard._model),
    _Step(
        "tools",
        "tools it may call (globs, comma-separated, e.g. os.exec,fs.*,plan.*)",
        lambda w: "none",
        AgentWizard._tools,
    ),
    _Step("description", "one-line description", lambda w: "none", AgentWizard._text),
    _Step(
        "overlay", "a first line for its system prompt overlay", lambda w: "none", AgentWizard._text
    ),
)
"""The questions, in order; each field of :class:`NewAgent` but the project root."""
