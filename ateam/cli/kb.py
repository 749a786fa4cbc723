"""``ateam kb add|search|ls``: an agent's knowledge base, one scope at a time."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ateam.cli._run import print_table, run_verb
from ateam.client import KbProgress, Team
from ateam.console.tables import KB_HIT_COLUMNS, kb_hit_rows, kb_progress_line


class _PlainProgress:
    """Ingest progress for a pipe or a file: one ``kb agent: 3/10 path`` line per file."""

    def __init__(self, scope: str, *, quiet: bool = False) -> None:
        self.scope = scope
        self.quiet = quiet

    def seen(self, progress: KbProgress) -> None:
        if not self.quiet:
            print(kb_progress_line(progress))

    def __enter__(self) -> _PlainProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


class _BarProgress(_PlainProgress):
    """Ingest progress on a terminal: a bar that fills as files are read, redrawn in place."""

    def __init__(self, scope: str, *, quiet: bool = False) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        super().__init__(scope, quiet=quiet)
        self._bar = Progress(
            TextColumn(f"kb {scope}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
        )
        self._task = self._bar.add_task("", total=None)

    def __enter__(self) -> _PlainProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._bar.stop()

    def seen(self, progress: KbProgress) -> None:
        self._bar.update(
            self._task,
            completed=progress.done,
            total=progress.total,
            description=Path(progress.path).name,
        )


_PROGRESS: dict[bool, type[_PlainProgress]] = {True: _BarProgress, False: _PlainProgress}
"""Whether stdout is a terminal → how ingest progress is shown."""


def cmd_kb_add(args: argparse.Namespace) -> int:
    # A path that exists here is sent absolute (the CLI and the agent usually share a
    # host); anything else is the agent's to resolve against its cwd.
    paths = [str(Path(p).expanduser().resolve()) if Path(p).exists() else p for p in args.paths]

    async def work(team: Team) -> int:
        # With --json, stdout is the report alone: progress lines would break it.
        progress = _PROGRESS[sys.stdout.isatty() and not args.json]
        with progress(args.scope, quiet=args.json) as show:
            report = await team.agent(args.id).kb.ingest(
                args.scope, paths, on_progress=show.seen, takeover=args.takeover
            )
        if args.json:
            print(json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=True))
            return 0
        print(
            f"kb {args.scope} of {args.id}: {len(report.ingested)} document(s) ingested, "
            f"{report.chunks} chunk(s), {len(report.skipped)} skipped"
        )
        for doc in report.ingested:
            print(f"  + {doc.doc_id} {doc.path} ({doc.chunks} chunks)")
        for skipped in report.skipped:
            dup = f" (duplicate of {skipped.duplicate_of})" if skipped.duplicate_of else ""
            print(f"  - {skipped.path}: {skipped.reason}{dup}")
        return 0

    return run_verb(args, "kb", work)


def cmd_kb_search(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        hits = await team.agent(args.id).kb.search(args.scope, " ".join(args.query), args.k)
        if args.json:
            print(json.dumps(hits, indent=2, sort_keys=True))
        elif not hits:
            print(f"no passage in the {args.scope} kb of {args.id} scores above the minimum")
        else:
            print_table(kb_hit_rows(hits), KB_HIT_COLUMNS)
        return 0

    return run_verb(args, "kb", work)


def cmd_kb_ls(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        docs = await team.agent(args.id).kb.list(args.scope)
        if args.json:
            print(json.dumps(docs, indent=2, sort_keys=True))
        elif not docs:
            print(f"the {args.scope} kb of {args.id} is empty")
        else:
            print_table(docs, ["doc_id", "path", "chunks", "source_agent"])
        return 0

    return run_verb(args, "kb", work)


# arguments: the agent first, then the action's own, then what every action takes ------------
