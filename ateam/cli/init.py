"""``ateam init [DIR]``: a new project, ready for ``ateam up``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


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
