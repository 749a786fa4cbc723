"""Commands about how the attached agent thinks: its prompt, tools, models and memory."""

from __future__ import annotations

import json

from ateam.console.commands.base import Call, Command
from ateam.console.session import ConsoleSession
from ateam.errors import UsageError
from ateam.wire.results import (
    HandoffShowResult,
    HistoryClearResult,
    ModelListResult,
    ModelSaveResult,
    ModelUseResult,
    PromptOverlayResult,
    PromptReloadResult,
    PromptShowResult,
    PromptVersionResult,
    SummarizeResult,
    ToolsListResult,
)
from ateam.wire.rpc import (
    AnyTextParams,
    HistoryClearParams,
    ModelUseParams,
    TextParams,
    build_params,
)


async def add_overlay_line(console: ConsoleSession, text: str) -> None:
    """``# text``: a standing instruction, appended to the overlay for the next turn."""
    if not text:
        raise UsageError("usage: # TEXT (a line for the agent's system prompt overlay)")
    (text,) = console.clean(text)
    agent = console.agent(console.require_writer())
    params = build_params(TextParams, "prompt.append", text=text)
    reply = await agent.request("prompt.append", PromptVersionResult, params)
    console.view.info(f"overlay updated (prompt v{reply.version}); applies to the next turn")


async def sys(call: Call) -> None:
    await call.action(_SYS_ACTIONS, "show")(call)


async def _sys_show(call: Call) -> None:
    console = call.console
    reply = await console.agent(console.require_attached()).request("prompt.show", PromptShowResult)
    for line in reply.marked.splitlines():
        call.view.info(line)


async def _sys_edit(call: Call) -> None:
    console = call.console
    agent = console.agent(console.require_writer())
    current = await agent.request("prompt.overlay", PromptOverlayResult)
    edited = await console.edit_text(current.text, suffix=".md")
    if edited is None or edited == current.text:
        call.view.info("overlay unchanged")
        return
    (edited,) = console.clean(edited)
    params = build_params(AnyTextParams, "prompt.set", text=edited)
    reply = await agent.request("prompt.set", PromptVersionResult, params)
    call.view.info(f"overlay saved (prompt v{reply.version})")


_SYS_ACTIONS = {"show": _sys_show, "edit": _sys_edit}


async def reload(call: Call) -> None:
    agent = call.console.agent(call.console.require_writer())
    reply = await agent.request("prompt.reload", PromptReloadResult)
    when = "now" if reply.applied else "after the current task"
    call.view.info(f"prompt files reload {when}")


async def tools(call: Call) -> None:
    agent = call.console.agent(call.console.require_attached())
    reply = await agent.request("tools.list", ToolsListResult)
    for item in reply.tools:
        call.view.info(f"{item.name:<14} [{item.approval}] {item.description}")
    if not reply.tools:
        call.view.info("no tools allowed (tools.allow in agent.yaml)")


async def models(call: Call) -> None:
    agent = call.console.agent(call.console.require_attached())
    reply = await agent.request("model.list", ModelListResult)
    pinned = f", pinned {reply.pinned}" if reply.pinned else ""
    call.view.info(f"route: {' → '.join(reply.route)}; current {reply.current}{pinned}")
    for row in reply.models:
        mark = "*" if row.current else " "
        health = "healthy" if row.healthy else f"unhealthy ({row.last_error})"
        if row.cooling_down_s:
            health += f", cooling down {row.cooling_down_s}s"
        call.view.info(
            f"{mark} {row.id:<16} {row.provider:<10} window {row.context_window:<8} "
            f"{health}; {row.tokens_in} in / {row.tokens_out} out, cost {row.cost}"
        )


async def use(call: Call) -> None:
    if len(call.args) != 1:
        raise call.bad("MODEL pins it, --auto unpins")
    model = None if call.args[0] == "--auto" else call.args[0]
    agent = call.console.agent(call.console.require_writer())
    # Sent even when None: a null model is how the agent is told to unpin.
    params = build_params(ModelUseParams, "model.use", model=model)
    reply = await agent.request("model.use", ModelUseResult, params)
    if reply.pinned:
        call.view.info(f"pinned to {reply.pinned}: no automatic switching until /use --auto")
    else:
        call.view.info(f"automatic switching on; current model {reply.current}")


async def save(call: Call) -> None:
    agent = call.console.agent(call.console.require_writer())
    reply = await agent.request("model.save", ModelSaveResult)
    call.view.info(f"saved the current model to {reply.saved}")


async def handoff(call: Call) -> None:
    agent = call.console.agent(call.console.require_attached())
    reply = await agent.request("handoff.show", HandoffShowResult)
    verdict = "verifies" if reply.valid else f"does NOT verify ({reply.reason})"
    call.view.info(f"handoff {verdict}")
    if reply.record is not None:
        for line in json.dumps(reply.record, indent=2, ensure_ascii=False).splitlines():
            call.view.info(line)


async def summarize(call: Call) -> None:
    agent = call.console.agent(call.console.require_writer())
    reply = await agent.request("context.summarize", SummarizeResult, timeout=120)
    if reply.ok:
        call.view.info(f"working context summarised ({reply.attempts} attempt(s))")
    else:
        call.view.info(f"summary not changed: {reply.reason}; the raw turns are kept")


async def clearhistory(call: Call) -> None:
    if call.args:
        raise call.bad("it erases the attached agent's history")
    agent = call.console.require_writer()
    answer = await call.view.ask(
        f"this erases every turn of {agent}'s history and cannot be undone; "
        f"type the agent id {agent} to confirm: "
    )
    if answer.strip() != agent:
        call.view.info("clearhistory cancelled: the answer was not the agent id")
        return
    params = build_params(HistoryClearParams, "history.clear", confirm_id=agent)
    await call.console.agent(agent).request("history.clear", HistoryClearResult, params)
    call.view.info(f"history of {agent} cleared")


COMMANDS = (
    Command("sys", sys, "show|edit", "show the system prompt or edit the overlay"),
    Command("reloadsysprompt", reload, "", "reload the prompt files"),
    Command("tools", tools, "", "tools the attached agent may call"),
    Command("models", models, "", "models with their health and the route"),
    Command("use", use, "MODEL|--auto", "pin a model; --auto unpins"),
    Command("save", save, "", "write the current model to agent.yaml"),
    Command("handoff", handoff, "", "the handoff record, and if it verifies"),
    Command("summarize", summarize, "", "re-summarise the working context"),
    Command(
        "clearhistory",
        clearhistory,
        "",
        "erase the attached agent's history for good (asks for its id)",
    ),
)
