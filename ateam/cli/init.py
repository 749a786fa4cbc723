"""``ateam init [DIR]``: a new project, ready for ``ateam up``."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_init(args: argparse.Namespace) -> int:
    from ateam.config.scaffold import init_project

    made = init_project(Path(args.dir), name=args.name, agent=args.agent)
    print(f"created project {made.project} in {made.root}:")
    for path in made.files:
        print(f"  {path}")
    print(f'start it with `ateam up {args.dir}`; then `ateam send {made.agent} "hello"`')
    return 0


def init_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", nargs="?", default=".")
    p.add_argument("--name", help="the project's name (default: the directory's name)")
    p.add_argument("--agent", default="zeus", help="the first agent's name (default: zeus)")
