"""``ateam context ls|search|post``: the team's context items."""

from __future__ import annotations

import argparse
import json

from ateam.cli._run import redaction_notice, run_in_project
from ateam.client import ContextItem, Team
from ateam.console.tables import table_lines

CONTEXT_COLUMNS = ["id", "urgency", "type", "scope", "source", "title"]
CONTEXT_TYPES = ["discovery", "decision", "status", "request", "alert"]
URGENCIES = ["background", "attention", "blocking"]


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


def context_ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--urgency", choices=URGENCIES, help="only items at least this urgent")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (default 50)")


SEARCH_EPILOG = (
    "Items are ranked with the embedder models.yaml configures (embeddings:). The offline "
    "default (hashing) matches words, not meaning: configure an embeddings endpoint to find "
    "paraphrases."
)


def context_search_args(p: argparse.ArgumentParser) -> None:
    p.epilog = SEARCH_EPILOG
    p.add_argument("query", nargs="+", metavar="WORD", help="what to look for, in any words")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="at most N (default 20)")


def context_post_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("title", nargs="+", metavar="WORD", help="the item's title")
    p.add_argument(
        "--type", default="status", choices=CONTEXT_TYPES, help="what kind of item (default status)"
    )
    p.add_argument(
        "--urgency",
        choices=URGENCIES,
        help="background (default), attention (a banner) or blocking (a task for agents)",
    )
    p.add_argument(
        "--scope",
        default="project",
        choices=["task", "project", "global"],
        help="who sees it (default project; global: every project)",
    )
    p.add_argument("--tags", metavar="A,B", help="tags agents subscribe to, comma-separated")
    p.add_argument("--content", default="", metavar="TEXT", help="the body, beyond the title")
