"""Agent identity: a teammate proves who it is, as a console proves ownership (issue 22).

A ``team.input`` request names its sender (``caller: agent:P/NAME``), and a name is no
proof: anyone who can reach the bus could queue work into an owned agent as a teammate,
real or made up, and skip both the owner's token and ``/allow external on``. So each
agent *instance* makes a random 32-byte token when it starts (:class:`AgentIdentity`),
keeps it in memory only, and publishes its SHA-256 in ``P:ident:<name>`` with every
heartbeat (the heartbeat's TTL, so a crashed instance's proof lapses, and a Redis that
lost the key has it back within one beat). Its ``team.input`` requests carry the token
in the RPC ``auth`` field; the receiver hashes what it is given and compares it, in
constant time, with the claimed agent's hash as published now (:func:`proven`). A copy
of the hash proves nothing, and a restarted agent has a new token.

What this does not stop, by design: a process allowed to *write* the project's keys can
put a hash of its own in ``P:ident:<name>`` (or take the agent's lock, or rewrite its
owner claim). The per-project Redis user (``ateam acl``) is the boundary: it keeps other
projects and outsiders away from these keys. Inside it, identity makes a name no longer
enough; it cannot stop a writer of the keys from lying.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

import redis.asyncio as aioredis

from ateam.bus.keys import Keys
from ateam.bus.ownership import token_digest
from ateam.constants import HEARTBEAT_TTL_S

__all__ = ["AgentIdentity", "proven", "publish", "withdraw"]

_TTL_MS = int(HEARTBEAT_TTL_S * 1000)

# Only the instance that published the hash takes it away: an old instance that stops
# late must not erase its successor's proof (the successor's next beat would restore
# it, but a teammate's message in between would be refused).
_WITHDRAW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class AgentIdentity:
    """The secret of one agent instance: made here, kept in memory, never written or logged.

    Pass :attr:`token` as the RPC ``auth`` of the agent's own ``team.input`` calls, under
    the caller :attr:`caller`; the heartbeat publishes :attr:`digest`.

    Args:
        agent: the agent id ``P/NAME``.
        token: the token of an instance that is running already, for a process it
            handed its token to (its coding agent's ``ateam mcp --as``, which acts for
            it); ``None`` makes a new instance's token.
    """

    def __init__(self, agent: str, token: str | None = None) -> None:
        self.agent = agent
        self.token = secrets.token_hex(32) if token is None else token
        self.digest = token_digest(self.token)

    def __repr__(self) -> str:  # the token stays out of logs and tracebacks
        return f"AgentIdentity({self.agent!r})"

    @property
    def caller(self) -> str:
        """The RPC ``caller`` this agent speaks as: ``agent:P/NAME``."""
        return f"agent:{self.agent}"


# ``pipe`` is ``Any``: a single server's pipeline or a Cluster's, which share no base.
def publish(pipe: Any, keys: Keys, identity: AgentIdentity) -> None:
    """Queue on ``pipe`` (a heartbeat's pipeline) the write of the identity's hash."""
    pipe.set(keys.identity(identity.agent), identity.digest, px=_TTL_MS)


def withdraw(pipe: Any, keys: Keys, identity: AgentIdentity) -> None:
    """Queue on ``pipe`` the removal of the hash, if it is still this instance's."""
    # EVAL in the pipeline, not a registered script: a script object makes redis-py
    # send SCRIPT EXISTS first, an extra round trip on the way out.
    pipe.eval(_WITHDRAW, 1, keys.identity(identity.agent), identity.digest)


async def proven(client: aioredis.Redis, keys: Keys, agent: str, auth_sha256: str | None) -> bool:
    """Whether a request whose ``auth`` hashes to ``auth_sha256`` comes from ``agent``.

    False when the request carried no token, when ``agent`` publishes no identity (it is
    not running, or is not an agent at all: an MCP runtime, a console, a made-up name),
    and when the hashes differ.
    """
    if not auth_sha256:
        return False
    published: Any = await client.get(keys.identity(agent))
    if isinstance(published, str):
        published = published.encode()
    if not isinstance(published, bytes):
        return False
    # Constant-time, so the reply's timing says nothing about how close a guess was.
    return hmac.compare_digest(published, auth_sha256.encode())
