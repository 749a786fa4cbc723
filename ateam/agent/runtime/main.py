"""How an agent process starts: from ``ateam agent``'s options to a running :class:`Agent`.

The CLI verb only parses its command line into :class:`AgentOptions` and calls
:func:`run_agent`; everything between those options and the agent's exit status is
here, in the order it happens:

1. the project (``--project``, else the nearest ``.ateam/project.yaml``) and the
   agent's configuration (:func:`agent_config_for`);
2. logging to stderr, each line named by the agent's id;
3. the bus, and a ``--bootstrap`` token redeemed before anything joins, with the
   :class:`Seed` it carries written once (:func:`seed_agent`);
4. the model's provider, and a pin on a model asked for by name;
5. the agent itself, whose exit status is the process's.

A refusal before the agent runs is one line on stderr and an agent exit status
(``agent_exit_code``: a supervisor reads 12 and 16 as final), not a front end's.

The bus is reached through :mod:`ateam.bus`, not :mod:`ateam.client`: the client is a
front end's library on the agent's own floor (``tests/unit/test_layers.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ateam import _gc, _telemetry_off
from ateam._fs import atomic_write
from ateam.agent.state.queue import DurableQueue
from ateam.bus.bootstrap import redeem_at
from ateam.bus.connection import RedisTarget, resolve_target
from ateam.config import AgentConfig, ProjectConfig, load_project, project_name, standalone_agent
from ateam.config.discovery import remember_root
from ateam.constants import KILLED_FROM_OUTSIDE, PREVIOUS_EXIT_ENV
from ateam.errors import AteamError, BootstrapRefused, ConfigError, SpawnFailed
from ateam.exits import agent_exit_code
from ateam.redact import Redactor

if TYPE_CHECKING:
    from ateam.providers.base import Provider

__all__ = [
    "FIRST_TASK_PRIORITY",
    "AgentOptions",
    "Seed",
    "agent_config_for",
    "run_agent",
    "seed_agent",
]

FIRST_TASK_PRIORITY = 10
"""Queue priority of a seeded first task: ahead of anything an old queue still holds."""


@dataclass(frozen=True)
class AgentOptions:
    """What ``ateam agent`` was asked to run (its command line, parsed)."""

    name: str
    """The agent's name within its project."""
    project: str | None = None
    """The project's name; ``None``: the project nearest to ``cwd``."""
    cwd: str | None = None
    """The working directory; ``None``: the process's own (and the configured one wins)."""
    model: str | None = None
    """A model id to run with and pin; ``None``: the configured model."""
    redis: str | None = None
    """``--redis``; ``None``: ATEAM_REDIS_URL, tools.yaml, else the embedded server."""
    bootstrap: str | None = None
    """A one-time token an offload or a remote spawn issued, to redeem before joining."""
    repl: bool = True
    """Offer the local REPL when stdin and stdout are both a terminal."""


def run_agent(options: AgentOptions) -> int:
    """Start the agent ``options`` names and run it until it stops.

    Returns:
        The process's exit status: the agent's own, or the agent exit code of what
        refused it before it ran.

    Raises:
        UsageError: no ``--project`` and no project around the working directory (a
            mistake on the command line, left to the front end's exit status).
    """
    start = Path(options.cwd) if options.cwd else None
    try:
        project = project_name(options.project, start)
    except ConfigError as exc:
        return _refused(exc)
    agent_id = f"{project}/{options.name}"
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {agent_id} %(levelname)s %(message)s",
    )
    _telemetry_off.pydantic_plugins_off()  # before the configuration's first validator
    try:
        ready = _prepare(options, project, agent_id)
    except AteamError as exc:
        return _refused(exc)
    for handler in logging.getLogger().handlers:
        handler.addFilter(ready.redactor.logging_filter())  # agent.log never holds a secret
    # Imported here: the agent's machinery is what this module starts, not what it needs
    # to say what an agent starts with (fleet reads Seed and agent_config_for from here).
    from ateam.agent.runtime.process import Agent

    agent = Agent(
        ready.config,
        ready.target,
        ready.provider,
        redactor=ready.redactor,
        repl=options.repl and sys.stdin.isatty() and sys.stdout.isatty(),
        project_root=ready.project_root,
        killed_before=_killed_before(),
    )
    if ready.model:
        # Asked for by name: a pin, or the idle switch-back would undo it in seconds.
        agent.parts.router.pinned = agent.parts.status.entry.pinned = ready.model
    _gc.settle()  # built: what the start made lives for hours (ateam/_gc.py)
    return asyncio.run(agent.run())


@dataclass(frozen=True)
class _Ready:
    """An agent's parts, checked, before the agent is built from them."""

    config: AgentConfig
    target: RedisTarget
    provider: Provider
    redactor: Redactor
    model: str | None
    """The model asked for by name (``--model``, else the bootstrap's), to pin."""
    project_root: Path | None


def _prepare(options: AgentOptions, agent_project: str, agent_id: str) -> _Ready:
    """Configuration, bus, bootstrap and provider: every refusal comes before the agent."""
    from ateam.agent.loop.workspaces import start_workspace
    from ateam.agent.runtime.build import model_factory

    cwd = Path(options.cwd).resolve() if options.cwd else Path.cwd()
    model = options.model
    project = load_project(cwd)
    config = agent_config_for(
        project, agent_project, options.name, cwd, explicit_cwd=bool(options.cwd)
    )
    # The repository checked (and with `worktree: agent` the agent moved into its
    # worktree) before anything joins: a refusal is a final exit, nothing half-made.
    config = start_workspace(config, project.root)
    entry = config.model_entry(model)
    if project.root is not None and project.name == agent_project:
        # Front ends started elsewhere (an ACP runtime's `ateam mcp`, a verb with
        # --project) find this project's hooks and embedder through this record.
        remember_root(project.name, project.root)
    target = _bus_target(options.redis, project)
    # The values of the variables passed through to its tools are secrets by name.
    redactor = Redactor.from_config(project).with_literals(
        os.environ[name] for name in config.spec.tools.env_passthrough if name in os.environ
    )
    if options.bootstrap is not None:
        # Redeemed before anything joins: an agent must never run on an unchecked token.
        record = asyncio.run(redeem_at(target, options.bootstrap, agent_id=agent_id))
        spec = record.get("spec")
        if not isinstance(spec, dict):
            raise BootstrapRefused("bootstrap token refused: its record holds no agent spec")
        asked = spec.get("model")
        if model is None and isinstance(asked, str):
            model = asked  # the model the console asked for, unless overridden
            entry = config.model_entry(model)
        # An offload's overlay and first task: written once, as the token works once.
        seed_agent(config, Seed.from_spec(spec).scrubbed(redactor.redact))
    provider = model_factory(config)(entry)
    return _Ready(config, target, provider, redactor, model, project.root)


def _bus_target(redis_url: str | None, project: ProjectConfig) -> RedisTarget:
    """:func:`~ateam.bus.embedded.bus_target`, whose module (the embedded server's, its
    file locks and records) is imported only when no server is named: an agent given
    ``--redis`` or ``ATEAM_REDIS_URL`` never starts one."""
    found = resolve_target(redis_url, transport=project.transport, namespace=project.namespace)
    if found is not None:
        return found
    from ateam.bus.embedded import bus_target

    return bus_target(redis_url, transport=project.transport, namespace=project.namespace)


def _refused(error: AteamError) -> int:
    print(error.one_line(), file=sys.stderr)
    return agent_exit_code(error)


def _killed_before() -> bool:
    """Whether a supervisor restarts this agent after it was killed (not crashed)."""
    raw = os.environ.pop(PREVIOUS_EXIT_ENV, "")
    try:
        return int(raw) in KILLED_FROM_OUTSIDE
    except ValueError:
        return False


# what an agent runs with --------------------------------------------------------------


def agent_config_for(
    project: ProjectConfig, project_name: str, name: str, cwd: Path, *, explicit_cwd: bool
) -> AgentConfig:
    """The configuration ``ateam agent --project … --name … [--cwd …]`` runs with.

    The configured agent when ``project`` (loaded for ``cwd``) is that project and
    configures ``name`` — moved to ``cwd`` when one was given — else an unconfigured
    agent with its state under ``~/.ateam/projects/``.

    Raises:
        ConfigError: ``project_name`` or ``name`` is not a valid name.
    """
    configured = project.agents.get(name) if project.name == project_name else None
    if configured is None:
        return standalone_agent(project_name, name, cwd, config=project)
    if explicit_cwd and configured.cwd != cwd:
        return replace(configured, cwd=cwd)
    return configured


@dataclass(frozen=True)
class Seed:
    """What a new agent starts with besides its configuration (``/offload``, ``/agent new``)."""

    system_prompt: str | None = None
    """Text for its ``system_overlay.md``; ``None`` leaves the file as it is."""
    first_task: str | None = None
    """Queued before it starts, ahead of anything else, so it is the first thing it does."""
    source: str = "offload"
    """The queue item's ``source``."""
    kb_chunks: tuple[dict[str, Any], ...] = ()
    """Exported knowledge-base documents (``kb.export``) for its ``agent`` scope store."""
    copied_from: str = ""
    """The agent the documents come from, kept as their provenance."""

    def to_spec(self) -> dict[str, str]:
        """The fields a bootstrap token carries to an agent on another host."""
        fields = (("system_prompt", self.system_prompt), ("first_task", self.first_task))
        spec = {key: value for key, value in fields if value}
        if spec:
            spec["source"] = self.source
        return spec

    def scrubbed(self, redact: Callable[[str], str]) -> Seed:
        """The seed with its texts redacted: they are queued and written as they are."""
        return replace(
            self,
            system_prompt=None if self.system_prompt is None else redact(self.system_prompt),
            first_task=None if self.first_task is None else redact(self.first_task),
        )

    @classmethod
    def from_spec(cls, spec: Mapping[str, object]) -> Seed:
        """The seed in a redeemed token's spec; fields of the wrong type are ignored."""

        def text(key: str) -> str | None:
            value = spec.get(key)
            return value if isinstance(value, str) and value else None

        return cls(text("system_prompt"), text("first_task"), text("source") or "offload")


def seed_agent(config: AgentConfig, seed: Seed) -> None:
    """Write the overlay, KB documents and first task of an agent that is not running yet.

    Raises:
        SpawnFailed: the overlay or the queue could not be written.
        KbUnavailable: documents were given but the ``kb`` extra is not installed.
    """
    try:
        if seed.system_prompt is not None:
            config.overlay_prompt_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write(config.overlay_prompt_path, seed.system_prompt.encode("utf-8"))
    except OSError as exc:
        raise SpawnFailed(f"cannot write {config.overlay_prompt_path}: {exc.strerror}") from None
    if seed.kb_chunks:
        from ateam.kb import KnowledgeBase, configured_embedder

        # The embedder the new agent will search with, or it would refuse its own store.
        embedder = configured_embedder(config.dir)
        with KnowledgeBase(
            config.dir / "kb", scope="agent", project=config.project, embedder=embedder
        ) as kb:
            kb.import_documents(seed.kb_chunks, copied_from=seed.copied_from)
    if not seed.first_task:
        return
    queue = DurableQueue(config.state_dir)
    try:
        queue.open()
        queue.append(seed.first_task, source=seed.source, priority=FIRST_TASK_PRIORITY)
    except AteamError as exc:
        raise SpawnFailed(f"cannot queue the first task of {config.id}: {exc}") from None
    finally:
        queue.close()
