"""``/delegate on|off [NAME]``: delegate mode (coordination tools only) for an agent."""

from __future__ import annotations

from ateam.console.commands.base import Call, Command

_SWITCH = {"on": True, "off": False}


async def delegate(call: Call) -> None:
    if not call.args or call.args[0] not in _SWITCH or len(call.args) > 2:
        raise call.bad()
    console = call.console
    agent = (
        await console.resolve_agent(call.args[1])
        if len(call.args) == 2
        else console.require_writer()
    )
    state = await console.agent(agent).modes.delegate(_SWITCH[call.args[0]])
    said = "on: coordination tools only" if state.delegate else "off: every allowed tool"
    call.view.info(f"delegate mode of {agent} {said}")


COMMANDS = (
    Command(
        "delegate",
        delegate,
        "on|off [ID]",
        "delegate mode for the attached agent (or ID): team, tasks, context, agents, plan "
        "and memory tools only; kept across restarts",
    ),
)
