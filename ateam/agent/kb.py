"""The agent's knowledge bases, one per scope, as its RPCs, REPL and tools use them.

Stores open lazily (importing chromadb costs a second, and most agents never touch a
KB) and stay open for the agent's life. Chroma calls block, so every method here runs
them on a worker thread; the store's own lock keeps two calls on one scope in order.
Ingestion is confined to the agent's sandbox (its cwd and ``fs.whitelist``): whatever
the console asks, files outside are refused with ``kb.ingest.denied``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ateam.kb import DEFAULT_K, SCOPES, KnowledgeBase, scope_dir

__all__ = ["AgentKb"]

Progress = Callable[[int, int, str], None]


class AgentKb:
    """The ``agent``, ``project`` and ``user`` stores of one agent."""

    def __init__(
        self,
        *,
        agent_id: str,
        agent_dir: Path,
        project_root: Path | None,
        home: Path,
        allowed_roots: Sequence[Path],
    ) -> None:
        self.agent_id = agent_id
        self.project = agent_id.split("/", 1)[0]
        self._agent_dir = agent_dir
        self._project_root = project_root
        self._home = home
        self.allowed_roots = list(allowed_roots)
        self._stores: dict[str, KnowledgeBase] = {}
        self._opening = asyncio.Lock()

    async def store(self, scope: str) -> KnowledgeBase:
        """The scope's store, opened on first use; raises BadRequest or KbUnavailable."""
        async with self._opening:
            found = self._stores.get(scope)
            if found is None:
                directory = scope_dir(
                    scope,
                    agent_dir=self._agent_dir,
                    project_root=self._project_root,
                    home=self._home,
                )
                found = await asyncio.to_thread(
                    KnowledgeBase, directory, scope=scope, project=self.project
                )
                self._stores[scope] = found
            return found

    async def ingest(
        self, scope: str, paths: Sequence[str], *, progress: Progress | None = None
    ) -> dict[str, Any]:
        kb = await self.store(scope)
        # Relative paths are the agent's: its cwd is the first allowed root.
        cwd = self.allowed_roots[0]
        resolved = [str(path if Path(path).is_absolute() else cwd / path) for path in paths]
        report = await asyncio.to_thread(
            kb.ingest,
            resolved,
            allowed_roots=self.allowed_roots,
            source_agent=self.agent_id,
            progress=progress,
        )
        return report.to_wire()

    async def search(self, scope: str, query: str, *, k: int = DEFAULT_K) -> list[dict[str, Any]]:
        kb = await self.store(scope)
        hits = await asyncio.to_thread(kb.search, query, k=k)
        return [hit.to_wire() for hit in hits]

    async def documents(self, scope: str) -> list[dict[str, Any]]:
        kb = await self.store(scope)
        return await asyncio.to_thread(kb.documents)

    async def export(self, scope: str, doc_ids: Sequence[str]) -> list[dict[str, Any]]:
        kb = await self.store(scope)
        return await asyncio.to_thread(kb.export, list(doc_ids))

    async def import_documents(
        self, scope: str, chunks: Sequence[dict[str, Any]], *, copied_from: str
    ) -> dict[str, Any]:
        kb = await self.store(scope)
        report = await asyncio.to_thread(kb.import_documents, chunks, copied_from=copied_from)
        return report.to_wire()

    def close(self) -> None:
        for kb in self._stores.values():
            kb.close()
        self._stores.clear()


def check_scope(value: object) -> str:
    """The scope named by an RPC parameter (default ``agent``)."""
    scope = "agent" if value is None else value
    if not isinstance(scope, str) or scope not in SCOPES:
        from ateam.errors import BadRequest

        raise BadRequest(f"'scope' must be one of {', '.join(SCOPES)}")
    return scope
