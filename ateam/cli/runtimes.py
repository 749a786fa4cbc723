"""``ateam runtimes``: the coding agents this project can run, installed or not."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from ateam.cli._run import print_table
from ateam.config import load_project
from ateam.config.runtimes import KNOWN
from ateam.config.schema import ModelEntry, Provider

COLUMNS = ["id", "found", "version", "auth", "note"]


def cmd_runtimes(args: argparse.Namespace) -> int:
    # Imported here: the ACP SDK is only for the verbs that talk to a runtime.
    from ateam.agent.acp.probe import probe_runtimes
    from ateam.tools.exec_values import ExecLimits

    root = Path(args.dir).resolve()
    project = load_project(root)
    configured = [entry for entry in project.models.values() if entry.is_runtime]
    # The known ones the project does not name are shown too: that is how a user finds
    # out what `ateam init --runtime` or a models.yaml entry would give them.
    names = {entry.id for entry in configured}
    extra = [
        ModelEntry(id=known.id, provider=Provider.ACP, model=known.id, command=known.command)
        for known in KNOWN.values()
        if known.id not in names
    ]
    entries = configured + extra
    reports = asyncio.run(probe_runtimes(entries, cwd=root, limits=ExecLimits()))
    rows = []
    for report in reports:
        row = report.to_wire()
        row["configured"] = report.id in names
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    table = []
    for row in rows:
        note = row["error"] if row["found"] else f"install: {row['install']}"
        if not row["configured"]:
            note = f"(not in models.yaml) {note or ''}".strip()
        auth = ", ".join(str(m.get("id")) for m in row["auth_methods"]) or "-"
        table.append(
            {
                "id": row["id"],
                "found": row["path"] or "no",
                "version": row["version"] or "-",
                "auth": auth,
                "note": note or "",
            }
        )
    print_table(table, COLUMNS)
    return 0
