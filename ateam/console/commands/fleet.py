"""Commands about the team's members: which exist, starting new ones, stopping them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ateam import fleet
from ateam.config import CONFIG_DIR, load_project
from ateam.console.commands.base import Call, Command
from ateam.console.launch import (
    LOCAL_HOW,
    issue_remote,
    launch_local,
    plan_local,
    poll,
    refuse_running,
    show_spawn,
    spawn_identity,
)
from ateam.console.projects import home_project
from ateam.console.wizard import AgentWizard
from ateam.errors import UsageError
from ateam.wire.results import ShutdownResult

STOP_WAIT_S = 15.0
"""How long /stop waits for the agent to leave the registry."""
AGENT_COLUMNS = ["id", "state", "model", "cwd", "description"]


async def agents(call: Call) -> None:
    console = call.console
    project = await home_project(console)
    running = {v.id: v for v in await console.refresh_agents(announce=False)}
    rows: list[dict[str, Any]] = []
    for _, config in sorted(project.agents.items()):
        view = running.pop(config.id, None)
        rows.append(
            {
                "id": config.id,
                "state": view.state if view else "stopped",
                "model": view.entry.model if view else config.model,
                "cwd": str(config.cwd),
                "description": config.spec.description,
            }
        )
    for agent, view in sorted(running.items()):
        if agent.split("/", 1)[0] == project.name:
            rows.append(
                {
                    "id": agent,
                    "state": view.state,
                    "model": view.entry.model,
                    "cwd": view.entry.cwd,
                    "description": "(not configured)",
                }
            )
    if not rows:
        where = project.root or Path.cwd()
        call.view.info(f"no agents configured in {where}; /agent new creates one")
        return
    call.view.table(rows, AGENT_COLUMNS)


async def agent(call: Call) -> None:
    if call.args != ["new"]:
        raise call.bad()
    console, view = call.console, call.view
    project = await home_project(console)
    if project.root is None:
        raise UsageError(
            "no .ateam/ project here to add an agent to; create .ateam/project.yaml first"
        )
    wizard = AgentWizard(project, taken=set(console.known), ask=view.ask, say=view.info)
    answers = await wizard.run()
    if answers is None:
        view.info("agent new cancelled")
        return
    plan = await plan_local(
        console, f"{project.name}/{answers.name}", str(answers.cwd), None, worktree=False
    )
    show_spawn(view, plan.request, where=plan.where, model=answers.model, how=LOCAL_HOW)
    view.info(f"  {'config':<8} {project.root / CONFIG_DIR / 'agents' / answers.name}")
    if not await console.confirm("create and start it?"):
        view.info("agent new cancelled")
        return
    (overlay,) = console.clean(answers.overlay or "")
    seed = fleet.Seed(system_prompt=overlay or None, source="console")
    await launch_local(console, plan, attach=False, seed=seed, agent_yaml=answers.agent_yaml())


async def spawn(call: Call) -> None:
    parsed = call.parse(options=("--cwd", "--model"), flags=("--worktree", "--remote", "--attach"))
    if len(parsed.positional) != 1:
        raise call.bad()
    if "--remote" in parsed.flags:
        if parsed.flags & {"--worktree", "--attach"}:
            raise UsageError("--worktree and --attach are for agents on this host, not --remote")
        await _spawn_remote(call, parsed.positional[0], parsed.options)
    else:
        await _spawn_local(call, parsed.positional[0], parsed.options, parsed.flags)


async def _spawn_local(call: Call, text: str, options: dict[str, str], flags: set[str]) -> None:
    console = call.console
    plan = await plan_local(
        console, text, options.get("--cwd"), options.get("--model"), worktree="--worktree" in flags
    )
    model = plan.request.model or plan.config.model
    show_spawn(call.view, plan.request, where=plan.where, model=model, how=LOCAL_HOW)
    if not await console.confirm("start it?"):
        call.view.info("spawn cancelled")
        return
    await launch_local(console, plan, attach="--attach" in flags)


async def _spawn_remote(call: Call, text: str, options: dict[str, str]) -> None:
    console = call.console
    given = options.get("--cwd")
    here = None if "/" in text or console.attached else await asyncio.to_thread(load_project)
    project_name, name = spawn_identity(console, text, here.name if here else "")
    request = fleet.SpawnRequest(project_name, name, Path(given or "."), options.get("--model"))
    await refuse_running(console, request.agent_id)
    show_spawn(
        call.view,
        request,
        where=given or "(where the command is run)",
        model=request.model or "(the agent's configured model)",
        how="another host, admitted once by a bootstrap token valid for 5 minutes",
    )
    if not await console.confirm("issue the token?"):
        call.view.info("spawn cancelled")
        return
    await issue_remote(console, request, with_cwd=given is not None)


async def stop(call: Call) -> None:
    parsed = call.parse(flags=("--takeover",))
    if len(parsed.positional) != 1:
        raise call.bad()
    console = call.console
    agent = await console.resolve_agent(parsed.positional[0])
    if not await console.confirm(f"stop {agent}? its current task goes back to its queue;"):
        call.view.info("stop cancelled")
        return
    takeover = "--takeover" in parsed.flags
    reply = await console.call_as_writer(agent, "shutdown", ShutdownResult, takeover=takeover)
    call.view.info(f"stopping {agent} (pid {reply.pid})")

    async def gone() -> bool:
        return await console.team.status(agent) is None

    left = await poll(gone, STOP_WAIT_S)
    if agent == console.attached:
        await console.detach()
    if left:
        call.view.info(f"stopped {agent}")
    else:
        call.view.banner(f"{agent} was asked to stop but is still registered", level="warn")


async def ack(call: Call) -> None:
    """``/ack ID``: the ALERT in ``/ps`` was seen; clear the damage reports, or a final exit."""
    parsed = call.parse(flags=("--takeover",))
    if len(parsed.positional) != 1:
        raise call.bad()
    console = call.console
    agent = await console.resolve_agent(parsed.positional[0])
    done = await console.team.acknowledge(agent, takeover="--takeover" in parsed.flags)
    call.view.info(done.line())
    await console.refresh_agents(announce=False)  # an acknowledged exit leaves the list


COMMANDS = (
    Command("agents", agents, "", "configured agents of the project, running or not"),
    Command("agent", agent, "new", "create and start a configured agent (wizard)"),
    Command(
        "spawn",
        spawn,
        "[PROJECT/]NAME [--cwd D] [--model M] [--worktree] [--remote] [--attach]",
        "start a new agent here or elsewhere (asks)",
    ),
    Command("stop", stop, "ID [--takeover]", "stop an agent gracefully (asks)", takes_agent=True),
    Command(
        "ack",
        ack,
        "ID [--takeover]",
        "clear an agent's ALERT in /ps: damage found, or a final exit",
        takes_agent=True,
    ),
)
