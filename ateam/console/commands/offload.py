"""``/offload``: hand the attached agent's work to a new agent, on its own proposal.

The agent proposes the new agent (``offload.propose``); the owner edits the proposal
field by field (:class:`~ateam.console.offload.OffloadForm`) and confirms, and the new
agent starts here under a keeper or elsewhere from a bootstrap token.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from ateam import fleet
from ateam.console.commands.base import Call, Command
from ateam.console.launch import LocalPlan, issue_remote, launch_local, plan_local, refuse_running
from ateam.console.offload import LONG_FIELDS, OffloadForm
from ateam.console.projects import configured_names, local_config
from ateam.console.session import ConsoleSession
from ateam.errors import AteamError, UsageError
from ateam.wire.results import OffloadProposal
from ateam.wire.rpc import OffloadProposeParams, build_params

QUESTION = (
    "change a field with FIELD=VALUE ('edit FIELD' opens $EDITOR), 'yes' to start it, "
    "anything else cancels: "
)


async def offload(call: Call) -> None:
    parsed = call.parse(options=("--name",), flags=("--remote", "--worktree", "--attach"))
    if parsed.positional:
        raise call.bad()
    console, view = call.console, call.view
    parent = console.require_writer()
    name = parsed.options.get("--name")
    # No --name (or an empty one) sends no name field, as before; a free name is found below.
    params = build_params(OffloadProposeParams, "offload.propose", name=name) if name else None
    proposal = await console.agent(parent).request("offload.propose", OffloadProposal, params)
    form = OffloadForm.from_proposal(
        proposal.wire(),
        where="remote" if "--remote" in parsed.flags else "here",
        worktree="--worktree" in parsed.flags,
    )
    form = form.set("name", name) if name else replace(form, name=await _free_name(console, form))
    view.info(f"{parent} proposes this agent to take over its work:")
    while True:
        for line in form.lines():
            view.info(line)
        answer = (await view.ask(QUESTION)).strip()
        if answer.lower() == "yes":
            try:
                plan = await _plan(console, form)
            except AteamError as exc:  # a value that can't work: fix it, don't start
                view.info(exc.one_line())
                continue
            await _start(console, form, plan, attach="--attach" in parsed.flags)
            return
        try:
            if answer.startswith("edit "):
                form = await _edit_field(console, form, answer[5:].strip())
            elif "=" in answer or answer.partition(":")[0].strip() in LONG_FIELDS:
                form = form.apply(answer)
            else:
                view.info("offload cancelled")
                return
        except UsageError as exc:
            view.info(exc.one_line())


async def _edit_field(console: ConsoleSession, form: OffloadForm, name: str) -> OffloadForm:
    if name not in LONG_FIELDS:
        raise UsageError(f"edit works on {', '.join(LONG_FIELDS)}; use {name}=VALUE")
    edited = await console.edit_text(str(getattr(form, name)), suffix=".md")
    if edited is None:
        raise UsageError("the editor failed; the field is unchanged")
    return form.set(name, edited)


async def _free_name(console: ConsoleSession, form: OffloadForm) -> str:
    """The proposed name if free, else the first ``NAME-N`` neither running nor configured."""
    await console.refresh_agents(announce=False)
    configured = await asyncio.to_thread(configured_names, Path(form.cwd))
    base = form.name
    stem, _, number = base.rpartition("-")
    stem = stem if stem and number.isdigit() else base
    for candidate in (base, *(f"{stem}-{n}" for n in range(2, 100))):
        if f"{form.project}/{candidate}" not in console.known and candidate not in configured:
            return candidate
    return base


async def _plan(console: ConsoleSession, form: OffloadForm) -> LocalPlan | None:
    """Validate the form for its destination; ``None`` for a remote start."""
    if form.where == "remote":
        if form.worktree:
            raise UsageError("worktree=yes is for agents on this host, not where=remote")
        await refuse_running(console, form.agent_id)
        return None
    return await plan_local(console, form.agent_id, form.cwd, form.model, worktree=form.worktree)


async def _start(
    console: ConsoleSession, form: OffloadForm, plan: LocalPlan | None, *, attach: bool
) -> None:
    view = console.view
    # The first task becomes a queue line here or a bootstrap record in Redis.
    system_prompt, first_task = console.clean(form.system_prompt, form.first_task)
    seed = fleet.Seed(system_prompt=system_prompt, first_task=first_task)
    if plan is None:
        request = fleet.SpawnRequest(form.project, form.name, Path(form.cwd), form.model)
        await issue_remote(console, request, with_cwd=True, seed=seed)
        view.info(f"{form.parent} keeps working; the new agent starts on the handoff")
        if form.kb_ids:
            # A token is no place for documents: they follow once it has joined.
            view.info(
                f"once it has joined: /attach {form.agent_id}, then /kb copy-from "
                f"{form.parent} --ids {','.join(form.kb_ids)}"
            )
        return
    if form.kb_ids:
        chunks = await console.agent(form.parent).kb.export("agent", list(form.kb_ids))
        seed = replace(seed, kb_chunks=tuple(chunks), copied_from=form.parent)
    parent = await local_config(form.parent, Path(form.cwd))
    agent_yaml = fleet.parent_agent_yaml(parent) if parent is not None else {}
    agent_yaml.pop("cwd", None)  # the new agent's cwd is given on its command line
    agent_yaml["model"] = form.model
    agent_yaml["description"] = f"offloaded from {form.parent}"
    base = None
    if parent is not None and parent.base_prompt_path.is_file():
        base = await asyncio.to_thread(parent.base_prompt_path.read_text, encoding="utf-8")
    joined = await launch_local(
        console, plan, attach=attach, seed=seed, agent_yaml=agent_yaml, base_prompt=base
    )
    view.info(f"{form.parent} keeps working; {joined.id} starts on the handoff")


COMMANDS = (
    Command(
        "offload",
        offload,
        "[--name N] [--remote] [--worktree] [--attach]",
        "hand the attached agent's work to a new agent (its proposal, editable; asks)",
    ),
)
