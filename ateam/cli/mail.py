"""``ateam broadcast`` and ``ateam send --wait-for-start`` (issue 26).

``broadcast`` queues one text at every running agent of a project, each answering for
itself (exit 0 when every agent queued it, else 1 with the refusals listed).
``send --wait-for-start`` keeps a message for an agent that is not running in its mailbox,
which the agent queues at its next start; a running agent is sent to as usual.
"""

from __future__ import annotations

import argparse
import json
import sys

from ateam._json import JsonObject
from ateam.cli._run import project_or_none, run_in_project
from ateam.client import Team, secrets_notice

__all__ = ["cmd_broadcast", "keep_for_start"]


def cmd_broadcast(args: argparse.Namespace) -> int:
    async def work(team: Team, project: str) -> int:
        report = await team.mail.broadcast(
            project, " ".join(args.text), source="cli", takeover=args.takeover
        )
        listed = report["agents"]
        rows = [row for row in listed if isinstance(row, dict)] if isinstance(listed, list) else []
        if args.json:
            print(json.dumps(report, indent=2, sort_keys=True))
        elif not rows:
            print(f"no agent of {project} is running", file=sys.stderr)
        for row in [] if args.json else rows:
            error = row.get("error")
            if isinstance(error, dict):
                print(f"{row['to']}: refused: {error.get('code')}: {error.get('message')}")
            else:
                print(f"{row['to']}: {row.get('id')}")
        return 1 if report["failed"] else 0

    return run_in_project(args, "broadcast", work)


async def keep_for_start(
    team: Team, args: argparse.Namespace, request_id: str | None
) -> JsonObject | None:
    """``send --wait-for-start``: the kept message, printed; ``None`` when the agent runs."""
    project = project_or_none()
    their_project, _, name = str(args.id).partition("/")
    configured = project is not None and project.name == their_project and name in project.agents
    kept = await team.mail.keep(
        args.id,
        " ".join(args.text),
        source="cli",
        request_id=request_id,
        configured=configured,
    )
    if kept is None:
        return None
    notice = secrets_notice(int(str(kept.get("redacted") or 0)))
    if notice:
        print(notice, file=sys.stderr)
    print(json.dumps(kept, indent=2, sort_keys=True) if args.json else kept["note"])
    return kept
