"""``ateam diff|merge|discard NAME|TASK``: an agent's or a task's branch, seen, landed or
thrown away (issue 27). Thin: :mod:`ateam.client.work` does the work, and
:mod:`ateam.console.diffs` draws the diff as the consoles do."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from rich.console import Console

from ateam.cli._run import run_verb
from ateam.client import Team, discard_work, merge_work, work_diff, work_place
from ateam.console.diffs import diff_text, landed_line
from ateam.errors import UsageError
from ateam.exits import Exit
from ateam.worktrees import find_work


def cmd_diff(args: argparse.Namespace) -> int:
    if args.max_bytes < 0:
        raise UsageError("--max-bytes must be 0 or more")
    try:
        diff = asyncio.run(work_diff(args.target, project=args.project, max_bytes=args.max_bytes))
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    if args.json:
        print(json.dumps(diff.to_wire(), indent=2, sort_keys=True))
        return 0
    shown = diff_text(diff, stat_only=args.stat)
    if sys.stdout.isatty():
        Console(highlight=False).print(shown, end="", soft_wrap=True)
    else:
        sys.stdout.write(shown.plain)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        landed = await merge_work(
            team,
            args.target,
            project=args.project,
            squash=args.squash,
            into=args.into,
            keep=args.keep,
        )
        if args.json:
            fields = ("branch", "into", "commit", "squashed", "removed")
            print(json.dumps({f: getattr(landed, f) for f in fields}, indent=2, sort_keys=True))
        else:
            print(landed_line(landed))
        return 0

    return run_verb(args, "merge", work)


def _confirmed(args: argparse.Namespace) -> bool:
    """``--yes``, else the user's answer on a terminal; no terminal is a usage error."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError("discard deletes work: give --yes when stdin is not a terminal")
    place = work_place(args.project)
    work = find_work(place.repo, args.target)
    where = f" and its worktree {work.worktree}" if work.worktree else ""
    answer = input(f"delete branch {work.branch}{where}? uncommitted changes are lost [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def cmd_discard(args: argparse.Namespace) -> int:
    if not _confirmed(args):
        print("discard cancelled")
        return Exit.FAILED

    async def work(team: Team) -> int:
        done = await discard_work(team, args.target, project=args.project, reopen=args.reopen)
        print(f"discarded {done.work.branch}")
        if done.reopened is not None:
            print(f"reopened {done.reopened.id}: {done.reopened.title}")
        return 0

    return run_verb(args, "discard", work)


# arguments -----------------------------------------------------------------------------
