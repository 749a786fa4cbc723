"""``/plan``: the attached agent's ``plan.md``, who on the team has one, and answering a
plan that awaits approval (``/plan approve NAME``, ``/plan reject NAME FEEDBACK``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from ateam.client import PlanReadResult, bus_errors
from ateam.console.commands.base import Call, Command
from ateam.errors import AteamError

PLAN_LIST_TIMEOUT_S = 2.0
"""How long ``/plan list`` waits for each agent: one slow agent must not hold the table."""


async def plan(call: Call) -> None:
    await call.action(_ACTIONS, "read")(call, " ".join(call.args[1:]))


async def _read(call: Call, text: str) -> None:
    console = call.console
    agent = await console.resolve_agent(text) if text else console.require_attached()
    found = await console.agent(agent).plan.get()
    if not found.text:
        call.view.info(f"{agent} has no plan yet ({found.path})")
        return
    for line in found.text.splitlines():
        call.view.info(line, agent)


async def _write(call: Call, text: str) -> None:
    console = call.console
    agent = console.require_writer()
    handle = console.agent(agent)
    if not text:
        current = await handle.plan.read()
        edited = await console.edit_text(current, suffix=".md")
        if edited is None or edited == current:
            call.view.info("plan unchanged")
            return
        text = edited
    written = await handle.plan.write(text, claim=False)
    console.tell_masked(written.redacted)
    call.view.info(f"plan of {agent} written ({written.bytes} bytes)")


async def _append(call: Call, text: str) -> None:
    if not text:
        raise call.bad("append needs TEXT")
    console = call.console
    agent = console.require_writer()
    written = await console.agent(agent).plan.append(text, claim=False)
    console.tell_masked(written.redacted)
    call.view.info(f"plan of {agent} now {written.bytes} bytes")


async def _delete(call: Call, text: str) -> None:
    console = call.console
    agent = console.require_writer()
    if not await console.confirm(f"delete the plan of {agent} for good?"):
        call.view.info("plan delete cancelled")
        return
    deleted = await console.agent(agent).plan.delete(claim=False)
    call.view.info(f"plan of {agent} deleted" if deleted else f"{agent} had no plan")


async def _list(call: Call, text: str) -> None:
    console = call.console
    views = [v for v in await console.refresh_agents(announce=False) if v.connected]

    async def plan_of(agent: str) -> PlanReadResult | None:
        with contextlib.suppress(AteamError), bus_errors():
            return await console.agent(agent).plan.get(timeout=PLAN_LIST_TIMEOUT_S)
        return None

    found = await asyncio.gather(*(plan_of(v.id) for v in views))
    rows: list[dict[str, Any]] = []
    for view, reply in zip(views, found, strict=True):
        if reply is None:
            rows.append({"id": view.id, "bytes": None, "first_line": "(no answer)"})
        elif reply.text:
            first = next((ln for ln in reply.text.splitlines() if ln.strip()), "")
            rows.append({"id": view.id, "bytes": reply.bytes, "first_line": first[:60]})
    if rows:
        call.view.table(rows, ["id", "bytes", "first_line"])
    else:
        call.view.info("no running agent has a plan")


async def _approve(call: Call, text: str) -> None:
    name, _, note = text.partition(" ")
    if not name:
        raise call.bad("approve needs NAME")
    agent = await call.console.resolve_agent(name)
    state = await call.console.agent(agent).modes.approve(note.strip())
    call.view.info(f"plan of {agent} approved ({state.task}): it may edit and run commands")


async def _reject(call: Call, text: str) -> None:
    name, _, feedback = text.partition(" ")
    if not name or not feedback.strip():
        raise call.bad("reject needs NAME and FEEDBACK")
    agent = await call.console.resolve_agent(name)
    state = await call.console.agent(agent).modes.reject(feedback.strip())
    call.view.info(f"plan of {agent} sent back ({state.task}); the feedback is its next input")


_ACTIONS: dict[str, Callable[[Call, str], Awaitable[None]]] = {
    "approve": _approve,
    "reject": _reject,
    "read": _read,
    "show": _read,
    "write": _write,
    "append": _append,
    "delete": _delete,
    "list": _list,
}

COMMANDS = (
    Command(
        "plan",
        plan,
        "[read|write|append|delete|list|approve|reject] [TEXT]",
        "the attached agent's plan.md; write without TEXT opens $EDITOR; approve NAME "
        "[NOTE] / reject NAME FEEDBACK answer a plan that awaits approval",
    ),
)
