"""``/context``: the team's context items (SPEC §9), listed or posted from the console."""

from __future__ import annotations

import time

from ateam.client import ContextItem
from ateam.console.commands.base import Call, Command, Parsed, csv
from ateam.console.projects import team_project

CONTEXT_COLUMNS = ["id", "age", "type", "urgency", "scope", "source", "title"]
_OPTIONS = ("--type", "--urgency", "--scope", "--tags", "--content", "--tag")


async def context(call: Call) -> None:
    args = call.args
    action = args[0] if args and not args[0].startswith("--") else "ls"
    parsed = call.parse(args[1:] if args and args[0] == action else args, options=_OPTIONS)
    if action == "post":
        await _post(call, parsed)
    elif action == "search" and parsed.positional:
        await _search(call, parsed)
    elif action == "ls" and not parsed.positional:
        await _ls(call, parsed)
    else:
        raise call.bad()


async def _post(call: Call, parsed: Parsed) -> None:
    if not parsed.positional:
        raise call.bad("post needs a TITLE")
    console = call.console
    project = await team_project(console)
    options = parsed.options
    title, content = console.clean(" ".join(parsed.positional), options.get("--content", ""))
    item = await console.team.context.post(
        project,
        type=options.get("--type", "status"),
        title=title,
        content=content,
        urgency=options.get("--urgency", "background"),
        scope=options.get("--scope", "project"),
        tags=csv(options.get("--tags")),
        source_runtime="console",
    )
    call.view.info(f"posted {item.id} to {project} ({item.scope}, {item.urgency})")


async def _ls(call: Call, parsed: Parsed) -> None:
    console = call.console
    project = await team_project(console)
    options = parsed.options
    items = await console.team.context.ls(
        project,
        types=csv(options.get("--type")),
        scopes=csv(options.get("--scope")),
        tags=csv(options.get("--tag") or options.get("--tags")),
        min_urgency=options.get("--urgency"),
    )
    _show(call, items, f"no context items in {project}")


async def _search(call: Call, parsed: Parsed) -> None:
    console = call.console
    project = await team_project(console)
    query = " ".join(parsed.positional)
    items = await console.team.context.search(project, query)
    _show(call, items, f"no context item in {project} matches {query!r}")


def _show(call: Call, items: list[ContextItem], empty: str) -> None:
    if not items:
        call.view.info(empty)
        return
    now = time.time()
    rows = [
        {
            "id": item.id,
            "age": f"{max(0, int(now - item.created_at))}s",
            "type": str(item.type),
            "urgency": str(item.urgency),
            "scope": str(item.scope),
            "source": item.source_agent or item.source_runtime,
            "title": item.title[:80],
        }
        for item in items
    ]
    call.view.table(rows, CONTEXT_COLUMNS)


COMMANDS = (
    Command(
        "context",
        context,
        "[ls|post|search] [--type T] [--urgency U] [--scope S] [--tags A,B] [--content C] "
        "[TITLE|QUERY]",
        "the team's context items; post shares one, search ranks them by meaning",
    ),
)
