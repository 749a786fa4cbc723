"""``/kb``: the attached agent's knowledge bases (SPEC §10)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from ateam.client import KB_INGEST_TIMEOUT_S
from ateam.console.commands.base import Call, Command, Parsed, csv, int_option
from ateam.console.tables import KB_HIT_COLUMNS, kb_hit_rows

KB_SCOPE = "agent"
"""The scope a ``/kb`` command works on unless ``--scope`` says otherwise."""


async def kb(call: Call) -> None:
    handler = call.action(_ACTIONS, "")
    parsed = call.parse(call.args[1:], options=("--scope", "--ids", "--k"))
    await handler(call, parsed)


def _local_paths(paths: list[str]) -> list[str]:
    return [str(Path(p).expanduser().resolve()) if Path(p).exists() else p for p in paths]


async def _add(call: Call, parsed: Parsed) -> None:
    if not parsed.positional:
        raise call.bad("add needs PATH…")
    console = call.console
    agent = console.agent(console.require_writer())
    # A path that exists here is sent absolute (the console and the agent usually
    # share a host); anything else is the agent's to resolve against its cwd.
    sent = await asyncio.to_thread(_local_paths, parsed.positional)
    scope = parsed.options.get("--scope", KB_SCOPE)
    report = await agent.kb.ingest(scope, sent, timeout=KB_INGEST_TIMEOUT_S, claim=False)
    call.view.info(
        f"kb {scope}: {len(report.ingested)} document(s) ingested, "
        f"{report.chunks} chunk(s), {len(report.skipped)} skipped"
    )
    for doc in report.ingested:
        call.view.info(f"  + {doc.doc_id} {doc.path} ({doc.chunks} chunks)")
    for skipped in report.skipped:
        dup = f" (duplicate of {skipped.duplicate_of})" if skipped.duplicate_of else ""
        call.view.info(f"  - {skipped.path}: {skipped.reason}{dup}")


async def _search(call: Call, parsed: Parsed) -> None:
    if not parsed.positional:
        raise call.bad("search needs a QUERY")
    console = call.console
    agent = console.agent(console.require_attached())
    k = int_option(parsed.options["--k"], "--k") if "--k" in parsed.options else None
    scope = parsed.options.get("--scope", KB_SCOPE)
    hits = await agent.kb.search(scope, " ".join(parsed.positional), k)
    if not hits:
        call.view.info("no passage scores above the minimum (0.35)")
        return
    call.view.table(kb_hit_rows(hits), list(KB_HIT_COLUMNS))


async def _ls(call: Call, parsed: Parsed) -> None:
    agent = call.console.require_attached()
    scope = parsed.options.get("--scope", KB_SCOPE)
    docs = await call.console.agent(agent).kb.list(scope)
    if not docs:
        call.view.info(f"the {scope} knowledge base of {agent} is empty")
        return
    call.view.table(docs, ["doc_id", "path", "chunks", "source_agent"])


async def _copy_from(call: Call, parsed: Parsed) -> None:
    ids = list(csv(parsed.options.get("--ids")))
    if len(parsed.positional) != 1 or not ids:
        raise call.bad("copy-from takes one ID and --ids A,B: only chosen documents")
    console = call.console
    target = console.require_writer()
    source = await console.resolve_agent(parsed.positional[0])
    scope = parsed.options.get("--scope", KB_SCOPE)
    report = await console.agent(target).kb.copy_from(
        source, ids, scope=scope, timeout=KB_INGEST_TIMEOUT_S, claim=False
    )
    call.view.info(
        f"copied {len(report.ingested)} document(s) from {source} into the {scope} "
        f"knowledge base of {target}; {len(report.skipped)} already there"
    )


_ACTIONS: dict[str, Callable[[Call, Parsed], Awaitable[None]]] = {
    "add": _add,
    "search": _search,
    "ls": _ls,
    "copy-from": _copy_from,
}

COMMANDS = (
    Command(
        "kb",
        kb,
        "add|search|ls|copy-from [--scope agent|project|user] … "
        "(add PATH…, search QUERY, copy-from ID --ids A,B)",
        "the knowledge base of the attached agent",
    ),
)
