"""``/broadcast TEXT``: one input to every running agent of the console's project."""

from __future__ import annotations

from ateam.console.commands.base import Call, Command
from ateam.console.projects import team_project


async def broadcast(call: Call) -> None:
    if not call.args:
        raise call.bad("broadcast needs TEXT")
    console = call.console
    project = await team_project(console)
    report = await console.team.mail.broadcast(project, " ".join(call.args), source="console")
    rows = report["agents"] if isinstance(report["agents"], list) else []
    if not rows:
        call.view.info(f"no agent of {project} is running")
        return
    table = []
    for row in rows:
        if not isinstance(row, dict):
            continue
        error = row.get("error")
        result = (
            f"refused: {error.get('code')}: {error.get('message')}"
            if isinstance(error, dict)
            else f"queued {row.get('id')}"
        )
        table.append({"agent": row.get("to"), "result": result})
    call.view.table(table, ["agent", "result"])


COMMANDS = (
    Command(
        "broadcast",
        broadcast,
        "TEXT",
        "queue TEXT at every running agent of the project, each acknowledged",
    ),
)
