"""An agent's knowledge bases from the client (SPEC §10): ``team.agent(ID).kb``.

Search, list, export, ingest (with the agent's progress events) and copy between agents,
each a call of the agent's ``kb.*`` methods. Apart from :mod:`ateam.client.agent`, which
stays small and imports no event model (``ateam send`` loads it, issue 28).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ateam.client.requester import Requester
from ateam.wire.results import (
    KbExportResult,
    KbListResult,
    KbReport,
    KbSearchResult,
    Rows,
)
from ateam.wire.rpc import (
    KbExportParams,
    KbImportParams,
    KbIngestParams,
    KbScopeParams,
    KbSearchParams,
    build_params,
)

if TYPE_CHECKING:
    from ateam.client.tail import Tail
    from ateam.wire.events import KbProgress

__all__ = ["KB_INGEST_TIMEOUT_S", "KbApi", "KbHandle"]

KB_INGEST_TIMEOUT_S = 600.0
"""A large directory takes a while to chunk and embed; progress arrives as events."""
KB_PROGRESS_DRAIN_S = 2.0
"""How long an ingest waits, after the agent's answer, for progress events still on
their way: the agent publishes them asynchronously, so they may trail the reply."""
Names = list[str]


class KbHandle(Requester, Protocol):
    """What of an :class:`~ateam.client.agent.AgentHandle` this uses (it holds one)."""

    id: str

    def reader(self) -> Tail: ...

    def peer(self, agent_id: str) -> KbHandle: ...


class KbApi:
    """The agent's knowledge bases (SPEC §10): ``agent``, ``project`` and ``user`` scopes."""

    def __init__(self, handle: KbHandle) -> None:
        self._handle = handle

    async def search(self, scope: str, query: str, k: int | None = None) -> Rows:
        """The passages most like ``query``, best first (``score``, ``doc_id``, ``text``…)."""
        best = {} if k is None else {"k": k}
        params = build_params(KbSearchParams, "kb.search", scope=scope, query=query, **best)
        return (await self._handle.request("kb.search", KbSearchResult, params)).hits

    async def list(self, scope: str) -> Rows:
        """The documents of ``scope`` (``doc_id``, ``path``, ``chunks``, ``source_agent``)."""
        params = build_params(KbScopeParams, "kb.list", scope=scope)
        return (await self._handle.request("kb.list", KbListResult, params)).documents

    async def export(self, scope: str, ids: Names) -> Rows:
        """The chunks of the chosen documents, for :meth:`copy_from` on another agent."""
        params = build_params(KbExportParams, "kb.export", scope=scope, ids=ids)
        return (await self._handle.request("kb.export", KbExportResult, params)).chunks

    async def ingest(
        self,
        scope: str,
        paths: Names,
        *,
        timeout: float = KB_INGEST_TIMEOUT_S,
        on_progress: Callable[[KbProgress], None] | None = None,
        claim: bool = True,
        takeover: bool = False,
    ) -> KbReport:
        """Read files and directories into ``scope``; the agent's report.

        Paths are resolved by the agent (absolute ones are safest). ``on_progress`` is
        called for each file read, from the agent's ``kb.progress`` events; they may
        trail the reply, so the report waits a moment for the last of them.
        """
        params = build_params(KbIngestParams, "kb.ingest", scope=scope, paths=paths)
        if on_progress is None:
            return await self._handle.request(
                "kb.ingest", KbReport, params, timeout=timeout, claim=claim, takeover=takeover
            )
        tail = self._handle.reader()
        tail.add(self._handle.id, None, backlog=0)
        await tail.poll(wait=False)  # fixes the start: only this call's progress is seen
        finished = asyncio.Event()

        def seen(progress: KbProgress) -> None:
            on_progress(progress)
            if progress.done >= progress.total:
                finished.set()

        follow = asyncio.create_task(_follow_progress(tail, scope, seen))
        try:
            report = await self._handle.request(
                "kb.ingest", KbReport, params, timeout=timeout, claim=claim, takeover=takeover
            )
            if report.ingested or report.skipped:  # files were read
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(KB_PROGRESS_DRAIN_S):
                        await finished.wait()
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow
        return report

    async def copy_from(
        self,
        source: str,
        ids: Names,
        *,
        scope: str = "agent",
        timeout: float = KB_INGEST_TIMEOUT_S,
        claim: bool = True,
        takeover: bool = False,
    ) -> KbReport:
        """Copy the chosen documents of ``source``'s agent kb into this agent's ``scope``."""
        chunks = await KbApi(self._handle.peer(source)).export("agent", ids)
        params = build_params(
            KbImportParams, "kb.import", scope=scope, chunks=chunks, copied_from=source
        )
        return await self._handle.request(
            "kb.import", KbReport, params, timeout=timeout, claim=claim, takeover=takeover
        )


async def _follow_progress(tail: Tail, scope: str, seen: Callable[[KbProgress], None]) -> None:
    """Report the agent's ``kb.progress`` events of ``scope`` until cancelled."""
    from ateam.bus.events import Event
    from ateam.wire.events import KbProgress

    while True:
        for item in await tail.poll():
            if isinstance(item, Event) and isinstance(progress := item.payload, KbProgress):
                if progress.scope == scope:
                    seen(progress)
