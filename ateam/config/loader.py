"""Find, merge and validate the ``.ateam/`` directories that apply to a place (SPEC §3).

Discovery walks from a start directory up through its parents collecting every
``.ateam/`` directory, nearest first, then adds the per-user ``~/.ateam`` (or
``$ATEAM_HOME``). Each of the files ``project.yaml``, ``models.yaml``, ``tools.yaml`` and
``redact.yaml`` is merged across those directories *as raw YAML* and validated once:

- scalars: the nearest file wins;
- mappings: merged key by key, recursively;
- lists: concatenated nearest first and de-duplicated by the items' ``id`` or ``name``
  (plain values by value); the first occurrence wins.

Agents are not merged: ``agents/<name>/`` of the nearest directory that has one with an
``agent.yaml`` is taken whole.

Error attribution: while merging, every mapping key and list item of the merged document
remembers the file it came from and its path inside that file. A validation error's
location is mapped back through the longest recorded prefix, so the message names the
file the user has to edit and the path *in that file* (list indices included), even when
the bad value came from a farther directory.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ateam.config._files import PREPARE, read_yaml, resolve_path
from ateam.config.discovery import CONFIG_DIR, discover, find_project_root
from ateam.config.layers import Layer as _Layer
from ateam.config.layers import Origins, path_text
from ateam.config.layers import locate as _locate
from ateam.config.layers import validate as _validate
from ateam.config.problems import Problems, unknown_model
from ateam.config.schema import (
    ECHO_MODEL,
    AgentSpec,
    Approval,
    EmbeddingsSpec,
    ExecSpec,
    HooksSpec,
    ModelEntry,
    ModelsFile,
    ProjectFile,
    RedactFile,
    RedactPattern,
    ToolPolicy,
    ToolsFile,
    TransportSpec,
    check_name,
)
from ateam.constants import DEFAULT_NAMESPACE
from ateam.errors import ConfigError, UsageError
from ateam.paths import ateam_home

_BUILTIN = Path("<built-in>")


# --- public values --------------------------------------------------------------------


@dataclass(frozen=True)
class AgentConfig:
    """Everything an agent process needs from configuration, paths resolved."""

    name: str
    """Agent name, unique within the project."""
    project: str
    """Name of the project the agent belongs to."""
    dir: Path
    """The agent's directory (``.ateam/agents/<name>/``, or under ``~/.ateam/projects/``)."""
    cwd: Path
    """Absolute working directory of the agent's tools."""
    model: str
    """Id of the primary model (``spec.model`` or the project default)."""
    spec: AgentSpec
    """The validated ``agent.yaml`` as written."""
    exec: ExecSpec
    """Effective ``os.exec`` limits: ``agent.yaml`` ``exec`` merged over ``tools.yaml``."""
    tools_allow: tuple[str, ...]
    """Allowed tool globs: the agent's own, then the project's."""
    tools_deny: tuple[str, ...]
    """Denied tool globs from ``tools.yaml``; deny wins over allow."""
    fs_whitelist: tuple[Path, ...]
    """Absolute directories the fs tools may touch besides ``cwd``."""
    models: Mapping[str, ModelEntry] = field(repr=False)
    """Every model known to the project, by id."""
    source: Path | None = None
    """The ``agent.yaml`` this came from; ``None`` for an agent without configuration."""
    hooks: HooksSpec = field(default_factory=HooksSpec)
    """Effective quality-gate hooks: ``agent.yaml`` ``hooks`` over ``project.yaml``'s."""

    @property
    def id(self) -> str:
        """The agent id ``project/name`` used on the bus."""
        return f"{self.project}/{self.name}"

    @property
    def state_dir(self) -> Path:
        """Where the queue, history, handoff and log live."""
        return self.dir / "state"

    @property
    def fallbacks(self) -> tuple[str, ...]:
        """Ordered fallback model ids."""
        return self.spec.fallbacks

    @property
    def approval(self) -> Mapping[str, Approval]:
        """Tool glob → approval policy."""
        return self.spec.tools.approval

    @property
    def base_prompt_path(self) -> Path:
        """The base system prompt file."""
        return resolve_path(self.dir, self.spec.prompts.base)

    @property
    def overlay_prompt_path(self) -> Path:
        """The user-editable overlay prompt file."""
        return resolve_path(self.dir, self.spec.prompts.overlay)

    def model_entry(self, model_id: str | None = None) -> ModelEntry:
        """The registry entry of ``model_id`` (default: the primary model).

        Raises:
            ConfigError: no model has that id.
        """
        wanted = self.model if model_id is None else model_id
        entry = self.models.get(wanted)
        if entry is None:
            raise ConfigError(
                unknown_model(wanted, self.models),
                file=str(self.source) if self.source else None,
            )
        return entry


@dataclass(frozen=True)
class ProjectConfig:
    """The merged, validated configuration of one project."""

    name: str
    """Project name: ``project.yaml`` ``name``, else the project root's directory name."""
    root: Path | None
    """Directory containing the nearest project ``.ateam/``; ``None`` if there is none."""
    dirs: list[Path]
    """Every ``.ateam/`` directory that contributed, nearest first (``~/.ateam`` last)."""
    namespace: str
    """Redis key prefix: ``project.yaml``, else ``transport.namespace``, else the default."""
    transport: TransportSpec
    """Redis transport with the effective password and URL scheme filled in."""
    tools: ToolPolicy
    """Project-wide tool allow/deny globs."""
    exec: ExecSpec
    """Project-wide ``os.exec`` defaults."""
    models: dict[str, ModelEntry]
    """Model registry by id; always contains ``echo``."""
    default_model: str
    """Model of agents that name none."""
    redact_patterns: tuple[RedactPattern, ...]
    """Extra redaction patterns from ``redact.yaml``."""
    agents: dict[str, AgentConfig]
    """Configured agents by name, nearest directory's first."""
    embeddings: EmbeddingsSpec | None = None
    """``models.yaml`` ``embeddings``: the knowledge bases' embedder (``None``: offline)."""
    hooks: HooksSpec = field(default_factory=HooksSpec)
    """``project.yaml`` ``hooks``: every agent's, and ``task_created`` of the front ends."""

    def agent(self, name: str) -> AgentConfig:
        """The configured agent called ``name``.

        Raises:
            ConfigError: no agent of that name is configured.
        """
        found = self.agents.get(name)
        if found is None:
            known = ", ".join(self.agents) or "none"
            raise ConfigError(
                f"unknown agent {name!r} in project {self.name!r}; configured: {known}"
            )
        return found


# --- names and places -----------------------------------------------------------------


def project_name(explicit: str | None, start: Path | None = None) -> str:
    """``explicit`` (a ``--project``), else the name of the project nearest to ``start``.

    Raises:
        UsageError: no ``explicit`` name and no project around ``start`` (default: the cwd).
        ConfigError: the nearest project's configuration does not load.
    """
    if explicit is not None:
        return explicit
    root = find_project_root(start)
    if root is None:
        where = (start or Path.cwd()).resolve()
        raise UsageError(
            f"no project here: no {CONFIG_DIR}/project.yaml in {where} or its parents; "
            "give --project NAME or a full id PROJECT/NAME (`ateam init` creates a project)"
        )
    return load_project(root=root).name


def project_here(start: Path | None = None) -> str | None:
    """The name of the project around ``start`` (default: the cwd) if one is there and
    loads; ``None`` otherwise (a front end that only orders or scopes by it goes on)."""
    try:
        return project_name(None, start)
    except (UsageError, ConfigError):
        return None


def agent_dir_for(project: str, name: str) -> Path:
    """Directory of an agent that has no configuration (it still needs a state dir).

    Raises:
        ConfigError: ``project`` or ``name`` is not a valid name (so it can't escape).
    """
    _require_name(project, "project")
    _require_name(name, "agent")
    return ateam_home() / "projects" / project / "agents" / name


# --- loading --------------------------------------------------------------------------


def load_project(start: Path | None = None, *, root: Path | None = None) -> ProjectConfig:
    """Discover, merge and validate the configuration that applies to a directory.

    Args:
        start: where discovery begins; defaults to the current directory.
        root: a project root that must itself contain ``.ateam/``; discovery starts
            there and ``start`` is ignored. Used for ``ateam up DIR``.

    Raises:
        ConfigError: a file is unreadable, not valid YAML, fails its schema, or names an
            unknown model; the message gives the file, the field path and the problem —
            of every problem found, in every file and every agent (its ``problems``).
    """
    if root is not None:
        origin = root.expanduser().resolve()
        if not (origin / CONFIG_DIR).is_dir():
            raise ConfigError(f"no {CONFIG_DIR}/ directory in {origin}")
    else:
        origin = (start if start is not None else Path.cwd()).expanduser().resolve()
        if not origin.exists():
            raise ConfigError(f"no such directory: {origin}")
    dirs = discover(origin)
    home = ateam_home().expanduser().resolve()
    # ~/.ateam holds user-wide defaults, so it never makes its parent a project root.
    project_dirs = [d for d in dirs if d.resolve() != home]
    project_root = project_dirs[0].parent if project_dirs else None
    base = project_root or (origin if origin.is_dir() else origin.parent)
    # Each step that fails leaves its problems here and a stand-in behind, so the load
    # goes on and one run reports every problem of every file and agent.
    problems = Problems()
    layers = {name: _read_layers(dirs, name, problems) for name in PREPARE}

    project_file = problems.attempt(
        lambda: _validate(ProjectFile, layers["project.yaml"])[0], ProjectFile()
    )
    before = len(problems)
    no_origins: Origins = {}
    models_file, model_origins = problems.attempt(
        lambda: _validate(ModelsFile, [*layers["models.yaml"], _builtin_models()]),
        (ModelsFile(models=(ECHO_MODEL,)), no_origins),
    )
    # A registry that failed to load would make every agent's model look unknown.
    models_known = len(problems) == before
    tools_file = problems.attempt(
        lambda: _validate(ToolsFile, layers["tools.yaml"])[0], ToolsFile()
    )
    redact_file = problems.attempt(
        lambda: _validate(RedactFile, layers["redact.yaml"])[0], RedactFile()
    )

    models = {entry.id: entry for entry in models_file.models}
    default_model = models_file.default or ECHO_MODEL.id
    if default_model not in models:
        file, _ = _locate(model_origins, ("default",))
        problems.add(
            ConfigError(unknown_model(default_model, models), file=path_text(file), field="default")
        )
        default_model = ECHO_MODEL.id

    transport = _effective_transport(tools_file.transport)
    name = project_file.name or problems.attempt(
        lambda: _default_name(base, project_dirs), "project"
    )
    defaults = _AgentDefaults(
        project=name,
        base=base,
        models=models,
        models_known=models_known,
        default_model=default_model,
        tools_layers=layers["tools.yaml"],
        policy=tools_file.tools,
        hooks=project_file.hooks,
    )
    loaded = {
        agent: _load_agent(agent, agent_dir, defaults, problems)
        for agent, agent_dir in _find_agents(dirs, problems).items()
    }
    problems.raise_found()
    agents = {agent: config for agent, config in loaded.items() if config is not None}
    return ProjectConfig(
        name=name,
        root=project_root,
        dirs=dirs,
        namespace=project_file.namespace or transport.namespace or DEFAULT_NAMESPACE,
        transport=transport,
        tools=tools_file.tools,
        exec=tools_file.exec,
        models=models,
        default_model=default_model,
        redact_patterns=redact_file.patterns,
        agents=agents,
        embeddings=models_file.embeddings,
        hooks=project_file.hooks,
    )


def standalone_agent(
    project: str, name: str, cwd: Path, *, config: ProjectConfig | None = None
) -> AgentConfig:
    """The configuration of an agent started without an ``agent.yaml``.

    Its directory is :func:`agent_dir_for` and its model the project default (``echo``
    without configuration). Pass the ``config`` loaded for ``cwd``, if any, so the agent
    still gets the models, exec defaults and tool policy of ``~/.ateam`` and the project.

    Raises:
        ConfigError: ``project`` or ``name`` is not a valid name.
    """
    directory = agent_dir_for(project, name)
    resolved = cwd.expanduser().resolve()
    return AgentConfig(
        name=name,
        project=project,
        dir=directory,
        cwd=resolved,
        model=config.default_model if config else ECHO_MODEL.id,
        spec=AgentSpec(),
        exec=config.exec if config else ExecSpec(),
        tools_allow=config.tools.allow if config else (),
        tools_deny=config.tools.deny if config else (),
        fs_whitelist=(),
        models=config.models if config else {ECHO_MODEL.id: ECHO_MODEL},
        source=None,
        hooks=config.hooks if config else HooksSpec(),
    )


# --- agents ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _AgentDefaults:
    """What every agent of a project inherits."""

    project: str
    base: Path
    models: dict[str, ModelEntry]
    models_known: bool
    """Whether ``models`` is the whole registry (``models.yaml`` loaded without problems)."""
    default_model: str
    tools_layers: list[_Layer]
    policy: ToolPolicy
    hooks: HooksSpec


class _ExecOnly(BaseModel):
    """Wrapper so an agent's merged ``exec`` validates with the same error paths."""

    # Built at its first use (an agent.yaml with an ``exec`` section), not at import.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    exec: ExecSpec = ExecSpec.model_construct()  # all defaults: nothing to check


def _find_agents(dirs: Sequence[Path], problems: Problems) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for config_dir in dirs:
        agents_root = config_dir / "agents"
        if not agents_root.is_dir():
            continue
        try:
            entries = sorted(agents_root.iterdir())
        except OSError as exc:
            problems.add(ConfigError(f"cannot list: {exc.strerror or exc}", file=str(agents_root)))
            continue
        for entry in entries:
            # Hidden entries are editor or VCS droppings, not agents.
            if entry.name.startswith(".") or entry.name in found:
                continue
            if not (entry / "agent.yaml").is_file():
                continue
            try:
                check_name(entry.name, "agent")
            except ValueError as exc:
                problems.add(ConfigError(str(exc), file=str(entry)))
                continue
            found[entry.name] = entry
    return found


def _load_agent(
    name: str, agent_dir: Path, defaults: _AgentDefaults, problems: Problems
) -> AgentConfig | None:
    """The agent's configuration; ``None`` when it has problems (kept in ``problems``)."""
    source = agent_dir / "agent.yaml"
    before = len(problems)
    raw = problems.attempt(lambda: read_yaml(source), None)
    if raw is None:
        return None
    spec = problems.attempt(lambda: _validate(AgentSpec, [(source, raw)])[0], None)
    wanted = [] if spec is None or not defaults.models_known else _models_named(spec)
    for model_id, where in wanted:
        if model_id not in defaults.models:
            problems.add(
                ConfigError(unknown_model(model_id, defaults.models), file=str(source), field=where)
            )

    # The agent's exec section is one more, nearest, layer over tools.yaml's.
    exec_layers: list[_Layer] = [(source, {"exec": raw.get("exec", {})})]
    exec_layers += [
        (file, {"exec": doc["exec"]}) for file, doc in defaults.tools_layers if "exec" in doc
    ]
    effective_exec = problems.attempt(lambda: _validate(_ExecOnly, exec_layers)[0].exec, None)
    if spec is None or effective_exec is None or len(problems) > before:
        return None
    return AgentConfig(
        name=name,
        project=defaults.project,
        dir=agent_dir,
        cwd=resolve_path(defaults.base, spec.cwd) if spec.cwd else defaults.base,
        model=spec.model or defaults.default_model,
        spec=spec,
        exec=effective_exec,
        tools_allow=tuple(dict.fromkeys((*spec.tools.allow, *defaults.policy.allow))),
        tools_deny=defaults.policy.deny,
        fs_whitelist=tuple(resolve_path(defaults.base, p) for p in spec.fs.whitelist),
        models=defaults.models,
        source=source,
        hooks=spec.hooks.over(defaults.hooks),
    )


def _models_named(spec: AgentSpec) -> list[tuple[str, str]]:
    """The model ids ``agent.yaml`` names, each with its field."""
    named = [(spec.model, "model")] if spec.model is not None else []
    return named + [(f, f"fallbacks[{index}]") for index, f in enumerate(spec.fallbacks)]


def _require_name(value: str, what: str) -> None:
    try:
        check_name(value, what)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _default_name(base: Path, project_dirs: Sequence[Path]) -> str:
    try:
        return check_name(base.name, "project")
    except ValueError as exc:
        file = project_dirs[0] / "project.yaml" if project_dirs else None
        raise ConfigError(f"{exc}; set `name:` in project.yaml", file=path_text(file)) from None


def _effective_transport(spec: TransportSpec) -> TransportSpec:
    updates: dict[str, Any] = {}
    if spec.password_env and spec.password_env in os.environ:
        updates["password"] = os.environ[spec.password_env]
    if spec.tls and spec.url and spec.url.startswith(("redis://", "redis+")):
        updates["url"] = "rediss" + spec.url.removeprefix("redis")
    return spec.model_copy(update=updates) if updates else spec


# --- reading files --------------------------------------------------------------------


def _read_layers(dirs: Sequence[Path], file_name: str, problems: Problems) -> list[_Layer]:
    """Every ``file_name`` of ``dirs`` that reads; one that does not is left out of the
    merge (its problems kept), so the others are still checked."""
    layers: list[_Layer] = []
    for config_dir in dirs:
        path = config_dir / file_name
        if not path.exists():
            continue
        before = len(problems)
        empty: dict[str, Any] = {}
        raw = problems.attempt(functools.partial(read_yaml, path), empty)
        problems.attempt(functools.partial(PREPARE[file_name], path, raw), None)
        if len(problems) == before:
            layers.append((path, raw))
    return layers


def _builtin_models() -> _Layer:
    # The farthest layer of all: a models.yaml entry with id `echo` overrides it.
    return (_BUILTIN, {"models": [{"id": ECHO_MODEL.id, "provider": ECHO_MODEL.provider.value}]})
