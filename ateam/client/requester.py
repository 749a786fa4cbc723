"""What the client's per-agent APIs (modes, KB) need of an agent handle: its calls.

A protocol, so those APIs depend on the call alone and :mod:`ateam.client.agent` can
hold them without either importing the other.
"""

from __future__ import annotations

from typing import Protocol

from ateam.wire.results import R
from ateam.wire.rpc import Params

__all__ = ["Requester"]


class Requester(Protocol):
    """An :class:`~ateam.client.agent.AgentHandle` as its calls see it."""

    async def request(
        self,
        method: str,
        result: type[R],
        params: Params | None = None,
        *,
        timeout: float | None = None,
        request_id: str | None = None,
        claim: bool = False,
        takeover: bool = False,
    ) -> R: ...
