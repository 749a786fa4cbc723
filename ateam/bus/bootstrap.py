"""One-time bootstrap tokens: how an agent started on another host is let in (SPEC §11).

A console issues a token for one agent id and prints the command that starts the agent
with it. The token is 32 random bytes written as hex (never URL-safe base64: its text can
start with ``-``, which a command line reads as an option, so one token in 64 failed to
parse as ``--bootstrap TOKEN``); Redis holds only its
SHA-256 digest, as the key, with a 5-minute TTL, so a reader of Redis (or of its AOF)
learns nothing that can be presented as the token. Redeeming gets and deletes the key in
one atomic step, so of two agents racing with the same token exactly one gets in.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ateam._json import JsonObject
from ateam.bus.codec import pack, unpack
from ateam.bus.connection import RedisTarget, bus_error, ensure_reachable, make_client
from ateam.bus.keys import Keys, split_agent
from ateam.errors import BadRequest, BootstrapRefused
from ateam.redact import Redactor

__all__ = ["TOKEN_BYTES", "TOKEN_TTL_S", "issue", "redeem", "token_hash"]

TOKEN_BYTES = 32
"""Random bytes per token (SPEC §11)."""
TOKEN_TTL_S = 300.0
"""How long an unused token stays valid."""

# GET then DEL as one script rather than GETDEL: the same atomicity on Redis older than 6.2.
_TAKE = """
local value = redis.call('GET', KEYS[1])
if value then
  redis.call('DEL', KEYS[1])
end
return value
"""


def token_hash(token: str) -> str:
    """The hex SHA-256 digest under which ``token`` is stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


async def issue(
    client: aioredis.Redis,
    keys: Keys,
    *,
    agent_id: str,
    spec: dict[str, Any],
    ttl_s: float = TOKEN_TTL_S,
) -> str:
    """Create a token that lets ``agent_id`` join once within ``ttl_s`` seconds.

    Args:
        client: the bus.
        keys: key names of the bus's namespace.
        agent_id: the ``project/name`` the token admits; any other identity is refused.
        spec: what the agent was asked to be (``cwd``, ``model``, ...), handed to it on
            redemption. Its texts are stored redacted (built-in patterns; a console has
            applied its project's ``redact.yaml`` already).
        ttl_s: lifetime of the token.

    Returns:
        The token text; it is not stored anywhere, so this is the only copy.
    """
    token = secrets.token_hex(TOKEN_BYTES)
    clean = Redactor().redact_obj(spec)
    record = pack({"agent_id": agent_id, "spec": clean, "issued_at": time.time()})
    key = keys.bootstrap(split_agent(agent_id)[0], token_hash(token))
    await client.set(key, record, px=max(1, int(ttl_s * 1000)))
    return token


async def redeem(client: aioredis.Redis, keys: Keys, token: str, *, agent_id: str) -> JsonObject:
    """Use up ``token`` and return its record ``{agent_id, spec, issued_at}``.

    The token is deleted by this call whatever the outcome, so a token presented under
    the wrong identity is burnt too.

    Args:
        client: the bus.
        keys: key names of the bus's namespace.
        token: the text :func:`issue` returned.
        agent_id: the identity the caller is about to take; refused if the token was
            issued for another.

    Raises:
        BootstrapRefused: the token is unknown, expired, already used, malformed in
            Redis, or was issued for another agent.
    """
    # The token lives under its project's prefix: a token of another project is unknown
    # here (and a project's Redis user can redeem only its own project's tokens).
    raw = await client.eval(_TAKE, 1, keys.bootstrap(split_agent(agent_id)[0], token_hash(token)))
    if raw is None:
        raise BootstrapRefused("bootstrap token refused: it is unknown, expired or already used")
    try:
        record = unpack(raw)
    except BadRequest:
        raise BootstrapRefused("bootstrap token refused: its record is unreadable") from None
    issued_for = record.get("agent_id")
    if not isinstance(issued_for, str) or not isinstance(record.get("spec", {}), dict):
        raise BootstrapRefused("bootstrap token refused: its record is malformed")
    if issued_for != agent_id:
        raise BootstrapRefused(
            f"bootstrap token refused: it was issued for {issued_for}, not {agent_id}"
        )
    record.setdefault("spec", {})
    return record


async def redeem_at(target: RedisTarget, token: str, *, agent_id: str) -> JsonObject:
    """:func:`redeem` on a bus of its own, for an agent that has no client yet.

    Raises:
        BootstrapRefused: as :func:`redeem`.
        BusError: the bus cannot be reached or refused the request (one line, its code).
    """
    client = make_client(target)
    try:
        await ensure_reachable(client, target)
        try:
            return await redeem(client, Keys(target.namespace), token, agent_id=agent_id)
        except RedisError as exc:
            raise bus_error(exc) from exc
    finally:
        await client.aclose()
