"""``ateam context ls|search|post``: the team's context items."""

from __future__ import annotations

import argparse
import json

from ateam.cli._run import redaction_notice, run_in_project
from ateam.client import ContextItem, Team
from ateam.console.tables import table_lines

CONTEXT_COLUMNS = ["id", "urgency", "type", "scope", "source", "title"]


def _print_items(items: list[ContextItem], as_json: bool, empty: str) -> None:
    rows = [item.to_wire() for item in items]
    if as_json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    elif not rows:
        print(empty)
    else:
        for row in rows:
            row["source"] = row["source_agent"] or row["source_runtime"]
        for line in table_lines(rows, CONTEXT_COLUMNS):
            print(line)


def cmd_context_ls(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        items = await team.context.ls(project, min_urgency=args.urgency, limit=args.limit)
        _print_items(items, args.json, f"no context items in {project}")
        return 0

    return run_in_project(args, "context", work)


def cmd_context_search(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        query = " ".join(args.query)
        items = await team.context.search(project, query, limit=args.limit)
        _print_items(items, args.json, f"no context item in {project} matches {query!r}")
        return 0

    return run_in_project(args, "context", work)


def cmd_context_post(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        item = await team.context.post(
            project,
            type=args.type,
            title=" ".join(args.title),
            content=args.content,
            urgency=args.urgency or "background",
            scope=args.scope,
            tags=[t.strip() for t in (args.tags or "").split(",") if t.strip()],
            source_runtime="cli",
        )
        if args.json:
            print(
                json.dumps({**item.to_wire(), "redacted": item.redacted}, indent=2, sort_keys=True)
            )
        else:
            print(f"posted {item.id} to {project} ({item.scope}, {item.urgency})")
        redaction_notice(item.notice())
        return 0

    return run_in_project(args, "context", work)


# arguments: each action's own; project_verb_options come after them ---------------------------
