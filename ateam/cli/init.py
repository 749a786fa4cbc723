"""``ateam init [DIR]``: a new project, ready for ``ateam up``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ateam.cli._verb import add_json_option
from ateam.config.runtimes import KNOWN


def cmd_init(args: argparse.Namespace) -> int:
    from ateam.config.scaffold import init_project

    made = init_project(
        Path(args.dir),
        name=args.name,
        agent=args.agent,
        runtime=args.runtime,
        example=args.example,
    )
    if args.json:
        record = {
            "project": made.project,
            "root": str(made.root),
            "agent": made.agent,
            "files": [str(path) for path in made.files],
        }
        print(json.dumps(record, indent=2, sort_keys=True))
        return 0
    print(f"created project {made.project} in {made.root}:")
    for path in made.files:
        print(f"  {path}")
    if args.runtime:
        print(f"its agent runs {args.runtime}: check it is installed with `ateam runtimes`")
    print(f'start it with `ateam up {args.dir}`; then `ateam send {made.agent} "hello"`')
    return 0


def init_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "dir", nargs="?", default=".", help="where to create .ateam/ (default: the current one)"
    )
    p.add_argument("--name", help="the project's name (default: the directory's name)")
    p.add_argument("--agent", default="zeus", help="the first agent's name (default: zeus)")
    p.add_argument(
        "--runtime",
        choices=sorted(KNOWN),
        help="run the agent on a coding agent you use (over ACP) instead of the echo model",
    )
    p.add_argument(
        "--example",
        action="store_true",
        help="write the commented template of every configuration file (a project that "
        "runs as it is, on the echo model) instead of the short one",
    )
    add_json_option(p, "project, root, agent, files")
