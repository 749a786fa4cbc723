"""Commands about the console itself: which agents it writes to and watches, and leaving."""

from __future__ import annotations

import json

from ateam.console.commands.base import Call, Command
from ateam.console.tables import PS_COLUMNS, ps_rows
from ateam.errors import UsageError

UI_MODES = {"on": "panes", "off": "plain"}


async def help_(call: Call) -> None:
    if call.args:
        command = call.table.get(call.args[0].lstrip("/"))
        if command is None:
            raise UsageError(f"unknown command /{call.args[0]}")
        call.view.info(f"{command.usage}  — {command.help}")
        return
    for command in call.table.values():
        call.view.info(f"{command.usage:<28} {command.help}")
    call.view.info("plain text is sent to the attached agent")
    keys = KEYS.get(call.console.front_end)
    if keys:
        call.view.info(keys)


KEYS = {
    "panes": (
        "keys: F1 agents · F2 tasks · F3 side panes · TAB complete (again: list, then step) · "
        "PageUp/PageDown, Ctrl+Home/Ctrl+End scroll · Ctrl+F find · Ctrl+C interrupt · "
        "Ctrl+Q quit"
    ),
    "plain": (
        "keys (on a terminal): TAB complete (again: list, then step) · F1 agents · "
        "Ctrl+C interrupt · Ctrl+D leave"
    ),
}
"""The keys of each front end, as ``/help`` ends with them."""


async def ps(call: Call) -> None:
    parsed = call.parse(options=("--state",), flags=("--json",))
    views = await call.console.refresh_agents(announce=False)
    state = parsed.options.get("--state")
    if state:
        views = [v for v in views if v.state == state]
    rows = ps_rows(views)
    if "--json" in parsed.flags:
        call.view.info(json.dumps(rows, sort_keys=True))
    else:
        call.view.table(rows, PS_COLUMNS)


async def attach(call: Call) -> None:
    parsed = call.parse(flags=("--takeover",))
    if len(parsed.positional) != 1:
        raise call.bad()
    agent = await call.console.resolve_agent(parsed.positional[0])
    await call.console.attach(agent, takeover="--takeover" in parsed.flags)


async def detach(call: Call) -> None:
    await call.console.detach()


async def who(call: Call) -> None:
    console = call.console
    agent = await console.resolve_agent(call.args[0]) if call.args else console.require_attached()
    owner = await console.agent(agent).owner()
    me = " (this console)" if owner and owner.session == console.session else ""
    call.view.info(f"{agent}: owner {owner.describe()}{me}" if owner else f"{agent}: no owner")
    if owner is not None:
        door = "allowed" if owner.external else "refused"
        call.view.info(f"external input (ateam mcp): {door}")
    call.view.info(f"this console: {console.session}")


async def allow(call: Call) -> None:
    """``/allow external on|off``: let MCP clients queue input to the attached agent."""
    if len(call.args) != 2 or call.args[0] != "external" or call.args[1] not in _ON_OFF:
        raise call.bad()
    console = call.console
    agent = console.require_attached()
    allowed = _ON_OFF[call.args[1]]
    if not await console.agent(agent).allow_external(allowed):
        raise UsageError(f"this console no longer owns {agent}; /attach it first")
    state = "may now queue input to" if allowed else "can no longer queue input to"
    call.view.info(f"external runtimes (ateam mcp clients) {state} {agent}")


_ON_OFF = {"on": True, "off": False}


async def tail(call: Call) -> None:
    if len(call.args) != 1:
        raise call.bad()
    agent = await call.console.resolve_agent(call.args[0])
    call.console.tailed.add(agent)
    call.console.follow(agent)
    call.view.info(f"tailing {agent} (read-only)")


async def untail(call: Call) -> None:
    if len(call.args) != 1:
        raise call.bad()
    console = call.console
    agent = await console.resolve_agent(call.args[0])
    console.tailed.discard(agent)
    if agent != console.attached:
        console.tail.remove(agent)


async def ui(call: Call) -> None:
    console = call.console
    args = call.args
    if len(args) != 2 or args[0] != "panes" or args[1] not in UI_MODES:
        raise call.bad()
    wanted = UI_MODES[args[1]]
    if wanted == console.front_end:
        call.view.info(f"already in {wanted} mode")
        return
    if wanted == "panes" and not console.panes_possible:
        raise UsageError(
            "this terminal cannot show panes: it needs a TTY on both ends and a TERM "
            "other than dumb"
        )
    console.switch_to = wanted
    console.quit_requested = True  # this front end ends; the caller starts the other


async def quit_(call: Call) -> None:
    call.console.quit_requested = True


COMMANDS = (
    Command("help", help_, "[COMMAND]", "list commands or explain one"),
    Command("ps", ps, "[--json] [--state S]", "agents on the bus"),
    Command("attach", attach, "ID [--takeover]", "become the agent's writer", takes_agent=True),
    Command("detach", detach, "", "release the attached agent"),
    Command("who", who, "[ID]", "which console owns an agent", takes_agent=True),
    Command(
        "allow",
        allow,
        "external on|off",
        "let external runtimes (ateam mcp) queue input to the attached agent",
    ),
    Command("tail", tail, "ID", "watch an agent read-only (several allowed)", takes_agent=True),
    Command("untail", untail, "ID", "stop watching an agent", takes_agent=True),
    Command("ui", ui, "panes on|off", "switch between panes and plain mode live"),
    Command("quit", quit_, "", "leave the console (agents keep running)"),
)
