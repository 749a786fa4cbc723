"""The parts one team session shares with its agent handles (private to the client)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis.asyncio as aioredis

from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.keys import Keys
from ateam.bus.ownership import Ownership
from ateam.bus.registry import Registry
from ateam.constants import OWNER_TTL_S
from ateam.redact import Redactor
from ateam.wire.ownership import OwnerKind

if TYPE_CHECKING:
    from ateam.bus.rpc import RpcClient


@dataclass
class Session:
    """One connection, one session id, one ownership token."""

    client: aioredis.Redis
    keys: Keys
    name: str
    redactor: Redactor
    ownership: Ownership
    registry: Registry
    held: set[str] = field(default_factory=set)
    """Agents this session claimed for as long as it likes (attach or acquire)."""

    @classmethod
    def open(
        cls, client: aioredis.Redis, keys: Keys, name: str, redactor: Redactor, grace_s: float
    ) -> Session:
        ownership = Ownership(client, keys, name, grace_s=grace_s)
        return cls(client, keys, name, redactor, ownership, Registry(client, keys))

    @functools.cached_property
    def rpc(self) -> RpcClient:
        """Calls as this session, carrying its ownership token.

        Made, and the RPC modules imported, at the first call: ``ateam ps`` makes none.
        """
        from ateam.bus.rpc import RpcClient

        # The token, not the session id, is what an agent accepts as this session's
        # ownership; it never leaves this process except inside our own requests.
        return RpcClient(self.client, self.keys, caller=self.name, auth=self.ownership.token)

    @contextlib.asynccontextmanager
    async def writing(
        self, agent: str, *, timeout: float, takeover: bool
    ) -> AsyncIterator[RpcClient]:
        """An RPC client allowed to change ``agent``: as its holder, or by a one-call claim.

        The claim is marked :attr:`OwnerKind.CALL`, so a script that sends at the same
        moment waits for it instead of failing, and a console that finds it in the way
        is told what it is (SPEC §4.3). Another call's claim is waited for up to this
        call's own ``timeout``: it usually lasts milliseconds, but while the agent
        restarts it lasts until the new instance answers (the supervisor's back-off and
        a start-up), and failing then would make a user resend by hand what the
        supervisor is about to serve.
        """
        if agent in self.held:
            yield self.rpc
            return
        # Outlive a long timeout: a claim that lapsed mid-call would refuse our own call.
        claim = Ownership(
            self.client,
            self.keys,
            self.name,
            ttl_s=max(OWNER_TTL_S, timeout + 5.0),
            call_wait_s=timeout,
            # The session's grace, read where tests and consoles may have tuned it.
            grace_s=self.ownership._grace_s,
        )
        await claim.acquire(agent, takeover=takeover, kind=OwnerKind.CALL)
        from ateam.bus.rpc import RpcClient

        try:
            yield RpcClient(self.client, self.keys, caller=self.name, auth=claim.token)
        finally:
            # A release lost to a dead connection only leaves the claim to lapse (TTL);
            # it must not hide how the call itself ended.
            with contextlib.suppress(*CONNECTION_ERRORS):
                await claim.release(agent)
