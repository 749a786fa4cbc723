"""The agent's knowledge bases, one per scope, as its RPCs, REPL and tools use them.

Stores open lazily (importing chromadb costs a second, and most agents never touch a
KB) and stay open for the agent's life. Chroma calls block, so every method here runs
them on a worker thread; the store's own lock keeps two calls on one scope in order.
Ingestion is confined to the agent's sandbox (its cwd and ``fs.whitelist``): whatever
the console asks, files outside are refused with ``kb.ingest.denied``.

Every scope is embedded by the embedder ``models.yaml`` configures (SPEC §10), found by
the agent's own discovery when the process does not hand one in; a store built by
another embedder is refused with ``kb.unavailable`` rather than searched with vectors
from another space.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ateam._json import JsonObject
from ateam.constants import KB_DEFAULT_K, KB_SCOPES
from ateam.kb.scopes import scope_dir

# The stores and embedders are imported at the first kb call: most agents make none,
# and their modules (chunking, file reading, Chroma's glue) are a few ms of every start.
if TYPE_CHECKING:
    from ateam.kb import Embedder, KnowledgeBase

__all__ = ["AgentKb"]

Progress = Callable[[int, int, str], None]


class AgentKb:
    """The ``agent``, ``project`` and ``user`` stores of one agent.

    Args:
        agent_id: ``project/name``, recorded as each ingested document's source.
        agent_dir: The agent's directory (its ``agent`` scope lives in ``kb/`` there).
        project_root: The project's root, for the ``project`` scope; ``None`` outside one.
        home: ateam's per-user directory, for the ``user`` scope.
        allowed_roots: The sandbox ingestion is confined to, the agent's cwd first.
        embedder: How texts become vectors; by default the one configured for the
            project (or, without one, for the agent's cwd), resolved at the first use.
        redact: Masks secrets in every chunk stored.
    """

    def __init__(
        self,
        *,
        agent_id: str,
        agent_dir: Path,
        project_root: Path | None,
        home: Path,
        allowed_roots: Sequence[Path],
        embedder: Embedder | None = None,
        redact: Callable[[str], str] = str,
    ) -> None:
        self.agent_id = agent_id
        self._redact = redact
        self.project = agent_id.split("/", 1)[0]
        self._agent_dir = agent_dir
        self._project_root = project_root
        self._home = home
        self.allowed_roots = list(allowed_roots)
        self._embedder = embedder
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
                embedder = await self.embedder()
                from ateam.kb.store import KnowledgeBase

                found = await asyncio.to_thread(
                    KnowledgeBase,
                    directory,
                    scope=scope,
                    project=self.project,
                    embedder=embedder,
                    redact=self._redact,
                )
                self._stores[scope] = found
            return found

    async def embedder(self) -> Embedder:
        """The configured embedder; raises ConfigError if the configuration no longer loads."""
        if self._embedder is None:
            # The discovery the agent was configured by: from its project root, which
            # finds the same .ateam/ directories as from anywhere inside the project.
            start = self._project_root or self.allowed_roots[0]
            from ateam.kb.embed import configured_embedder

            self._embedder = await asyncio.to_thread(configured_embedder, start)
        return self._embedder

    async def ingest(
        self, scope: str, paths: Sequence[str], *, progress: Progress | None = None
    ) -> JsonObject:
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

    async def search(
        self, scope: str, query: str, *, k: int = KB_DEFAULT_K
    ) -> list[dict[str, Any]]:
        kb = await self.store(scope)
        hits = await asyncio.to_thread(kb.search, query, k=k)
        return [hit.to_wire() for hit in hits]

    async def documents(self, scope: str) -> list[JsonObject]:
        kb = await self.store(scope)
        return await asyncio.to_thread(kb.documents)

    async def export(self, scope: str, doc_ids: Sequence[str]) -> list[JsonObject]:
        kb = await self.store(scope)
        return await asyncio.to_thread(kb.export, list(doc_ids))

    async def import_documents(
        self, scope: str, chunks: Sequence[dict[str, Any]], *, copied_from: str
    ) -> JsonObject:
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
    if not isinstance(scope, str) or scope not in KB_SCOPES:
        from ateam.errors import BadRequest

        raise BadRequest(f"'scope' must be one of {', '.join(KB_SCOPES)}")
    return scope
