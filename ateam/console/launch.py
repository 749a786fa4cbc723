"""Starting agents from the console: checked plans, kept processes, bootstrap tokens.

A local start is planned first (:func:`plan_local` checks everything and changes
nothing), shown, confirmed, then launched under a keeper that restarts the agent if it
crashes (:func:`launch_local`). A start on another host is a one-time bootstrap token
and the command that redeems it (:func:`issue_remote`).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from ateam import fleet
from ateam.client import AgentStatus
from ateam.config import CONFIG_DIR, AgentConfig, load_project
from ateam.config.names import check_name
from ateam.console.session import ConsoleSession, ConsoleView
from ateam.errors import SpawnFailed, UsageError

__all__ = [
    "LOCAL_HOW",
    "LocalPlan",
    "issue_remote",
    "launch_local",
    "plan_local",
    "poll",
    "refuse_running",
    "show_spawn",
    "spawn_identity",
]

SPAWN_TIMEOUT_S = 20.0
"""How long a start waits for the new agent to serve before giving up on it."""
SERVING_STATES = ("idle", "busy", "waiting")
LOCAL_HOW = "this host, detached, restarted if it crashes, log state/agent.log"

_T = TypeVar("_T")


@dataclass(frozen=True)
class LocalPlan:
    """A checked local start: who, where, with which configuration, in which worktree."""

    request: fleet.SpawnRequest
    config: AgentConfig
    worktree: fleet.Worktree | None
    where: str
    """The cwd as shown to people (with the worktree's repository and branch)."""


async def plan_local(
    console: ConsoleSession, text: str, given_cwd: str | None, model: str | None, *, worktree: bool
) -> LocalPlan:
    """Check everything a local start needs, changing nothing; raises AteamError."""
    cwd = _spawn_cwd(console, given_cwd)
    here = await asyncio.to_thread(load_project, cwd)
    project, name = spawn_identity(console, text, here.name)
    request = fleet.SpawnRequest(project, name, cwd, model)
    await refuse_running(console, request.agent_id)
    if here.namespace != console.target.namespace:
        raise UsageError(
            f"{cwd} belongs to namespace {here.namespace!r} but this console is on "
            f"{console.target.namespace!r}; the agent would be invisible here"
        )
    config = fleet.agent_config_for(here, project, name, cwd, explicit_cwd=True)
    config.model_entry(request.model)  # an unknown model fails here, not in the log
    planned = None
    where = str(cwd)
    if worktree:
        planned = await asyncio.to_thread(fleet.plan_worktree, cwd, name, here.root)
        where = f"{planned.cwd} (new git worktree of {planned.repo}, branch {planned.branch})"
    return LocalPlan(request, config, planned, where)


async def launch_local(
    console: ConsoleSession,
    plan: LocalPlan,
    *,
    attach: bool,
    seed: fleet.Seed | None = None,
    agent_yaml: dict[str, Any] | None = None,
    base_prompt: str | None = None,
) -> AgentStatus:
    """Start a planned agent under a keeper and wait until it serves.

    ``agent_yaml`` configures the agent in its project's ``.ateam/agents/`` when it
    is not configured there yet (a project-less directory keeps it unconfigured);
    ``seed`` is written before it starts.
    """
    view = console.view
    request = plan.request
    if plan.worktree is not None:
        await asyncio.to_thread(fleet.add_worktree, plan.worktree)
        view.info(f"created worktree {plan.worktree.path} on branch {plan.worktree.branch}")
        request = replace(request, cwd=plan.worktree.cwd)
    project = await asyncio.to_thread(load_project, request.cwd)
    configured = project.name == request.project and request.name in project.agents
    if agent_yaml is not None and not configured and project.root is not None:
        agents_dir = project.root / CONFIG_DIR / "agents"
        made = await asyncio.to_thread(
            fleet.create_agent_dir, agents_dir, request.name, agent_yaml, base_prompt=base_prompt
        )
        view.info(f"configured {request.agent_id} in {made}")
        project = await asyncio.to_thread(load_project, request.cwd)
        # Its agent.yaml names the model: no pin, so automatic switching stays on.
        request = replace(request, model=None)
    config = fleet.agent_config_for(
        project, request.project, request.name, request.cwd, explicit_cwd=True
    )
    if seed is not None:
        await asyncio.to_thread(fleet.seed_agent, config, seed)
    log = config.state_dir / "agent.log"
    # The embedded server's password is not in its URL: let the agent find it itself.
    url = None if console.target.source == "embedded" else console.target.url
    keeper = await asyncio.to_thread(fleet.start_kept, request, log=log, redis_url=url)
    console.keepers.append(keeper)
    joined = await _wait_serving(console, request.agent_id, keeper, log)
    view.info(
        f"spawned {joined.id} (pid {joined.entry.pid}, model {joined.entry.model}, cwd "
        f"{joined.entry.cwd}); its keeper is pid {keeper.pid}; log {log}"
    )
    if attach:
        await console.attach(joined.id)
    return joined


async def issue_remote(
    console: ConsoleSession,
    request: fleet.SpawnRequest,
    *,
    with_cwd: bool,
    seed: fleet.Seed | None = None,
) -> None:
    """Mint a one-time token for ``request`` and print the command that redeems it."""
    spec: dict[str, Any] = {
        key: value
        for key, value in (
            ("cwd", str(request.cwd) if with_cwd else None),
            ("model", request.model),
        )
        if value
    }
    if seed is not None:
        spec.update(seed.to_spec())
    token = await console.team.issue_bootstrap(request.agent_id, spec)
    target, view = console.target, console.view
    view.info("run this on the other host (the token works once, within 5 minutes):")
    view.info(fleet.remote_command(request, redis_url=target.url, token=token, with_cwd=with_cwd))
    if target.url.startswith("unix://"):
        view.info("note: this Redis is a local unix socket; give the other host a URL")
    elif target.password and "@" not in target.url:
        view.info("note: the Redis password is not in the URL; the other host needs it")


def _spawn_cwd(console: ConsoleSession, given: str | None) -> Path:
    attached = console.known.get(console.attached) if console.attached else None
    if given:
        path = Path(given).expanduser()
    elif attached is not None and attached.entry.cwd:
        path = Path(attached.entry.cwd)  # beside the attached agent
    else:
        path = Path.cwd()
    path = path.resolve()
    if not path.is_dir():
        hint = "" if given else "; pass --cwd D"
        raise UsageError(f"{path} is not a directory on this host{hint}")
    return path


def spawn_identity(console: ConsoleSession, text: str, default_project: str) -> tuple[str, str]:
    """``PROJECT/NAME``, or NAME in the attached agent's project, else the cwd's."""
    project, _, name = text.rpartition("/")
    if not project:
        project = console.attached.split("/", 1)[0] if console.attached else default_project
    for value, what in ((project, "project"), (name, "agent")):
        try:
            check_name(value, what)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return project, name


async def refuse_running(console: ConsoleSession, agent: str) -> None:
    view = await console.team.status(agent)
    if view is not None and view.connected:
        raise UsageError(f"{agent} is already running (pid {view.entry.pid} on {view.entry.host})")


def show_spawn(
    view: ConsoleView, request: fleet.SpawnRequest, *, where: str, model: str, how: str
) -> None:
    view.info(f"spawn {request.agent_id}:")
    for label, value in (
        ("project", request.project),
        ("name", request.name),
        ("cwd", where),
        ("model", model),
        ("runs on", how),
    ):
        view.info(f"  {label:<8} {value}")


async def _wait_serving(
    console: ConsoleSession, agent: str, keeper: subprocess.Popen[bytes], log: Path
) -> AgentStatus:
    """Until ``agent`` serves; a keeper that gave up or a timeout is a SpawnFailed."""

    async def serving() -> AgentStatus | None:
        view = await console.team.status(agent)
        if view is not None and view.connected and view.state in SERVING_STATES:
            return view
        code = keeper.poll()
        if code is not None:
            raise SpawnFailed(
                f"{agent} exited with {code} before joining: {fleet.last_log_line(log)} (log {log})"
            )
        return None

    view = await poll(serving, SPAWN_TIMEOUT_S)
    if view is None:
        keeper.terminate()  # never leave a crash-looping agent behind
        raise SpawnFailed(
            f"{agent} did not join within {SPAWN_TIMEOUT_S:g} s and was stopped; "
            f"last log line: {fleet.last_log_line(log)} (log {log})"
        )
    return view


async def poll(probe: Callable[[], Awaitable[_T | None]], timeout: float) -> _T | None:
    """``probe()`` every 100 ms until it returns something; ``None`` after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if value is not None and value is not False:
            return value
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(0.1)
