"""A stopped agent's mailbox: messages kept on the bus until it starts (issue 26).

A ``team.send`` (or its reply, or ``ateam send --wait-for-start``) to a teammate that is
not running is not refused: it is kept here, in a Redis list under the project's keys,
and the teammate queues it at its next start, oldest first.

Exactly once, across a kill -9 anywhere: the agent reads the head, queues it with a
request id fixed when the message was written (the queue de-duplicates request ids,
finished ones included), and only then removes that head. Killed in between, the next
start queues the same head again, which the queue recognises and does not add twice. A
reply keeps the request id its sender derived from the answered item, so a reply sent
twice by a teammate that was killed after sending it is recognised too.

Bounded by count and by bytes, in one script with the byte counter beside the list (one
hash tag, one slot): a full mailbox refuses with ``mailbox.full`` rather than evict.
The text arrives redacted: every sender masks secrets before it sends.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, fields
from typing import Any

import redis.asyncio as aioredis

from ateam.bus.keys import Keys, split_agent
from ateam.constants import RPC_MAX_PAYLOAD
from ateam.errors import MailboxFull, PayloadTooLarge

__all__ = ["MAILBOX_MAX_BYTES", "MAILBOX_MAX_MESSAGES", "MailMessage", "Mailbox"]

MAILBOX_MAX_MESSAGES = 1000
"""Messages a stopped agent's mailbox keeps; the next one is refused."""
MAILBOX_MAX_BYTES = 8 * 1024 * 1024
"""Bytes a stopped agent's mailbox keeps (a few large messages fill it before 1000 do)."""

# KEYS: list, byte counter. ARGV: message, max messages, max bytes.
# Returns the new length, or -1 (too many messages) / -2 (too many bytes).
_PUT = """
local n = redis.call('LLEN', KEYS[1])
if n >= tonumber(ARGV[2]) then return -1 end
local size = string.len(ARGV[1])
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
if used + size > tonumber(ARGV[3]) then return -2 end
redis.call('INCRBY', KEYS[2], size)
return redis.call('RPUSH', KEYS[1], ARGV[1])
"""

# KEYS: list, byte counter. ARGV: the head as read. Pops it only if it is still the head.
_POP = """
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[1] then return 0 end
redis.call('LPOP', KEYS[1])
local left = redis.call('DECRBY', KEYS[2], string.len(ARGV[1]))
if left <= 0 or redis.call('LLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
return 1
"""


@dataclass(frozen=True)
class MailMessage:
    """One kept message: what ``team.input`` (or ``input``) would have queued."""

    id: str
    """``m-…``: how the sender is told which message waits."""
    rid: str
    """The request id the receiver queues it under (de-duplicated there)."""
    text: str
    source: str
    """``agent:NAME`` for a teammate, ``cli`` / ``api`` for a person."""
    sent_at: float
    hops: int = 0
    trace_id: str | None = None
    caller: str | None = None
    reply_to: str | None = None
    """A teammate asked for the answer (``team.send`` with ``reply: true``)."""
    in_reply_to: str | None = None
    """This is the answer to the receiver's message queued as this item id."""

    @classmethod
    def new(cls, text: str, source: str, *, rid: str | None = None, **extra: Any) -> MailMessage:
        mid = f"m-{uuid.uuid4().hex[:16]}"
        return cls(id=mid, rid=rid or mid, text=text, source=source, sent_at=time.time(), **extra)

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | str) -> MailMessage:
        """Raises: ValueError: not a message this version can read."""
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            known = {f.name for f in fields(cls)}
            message = cls(**{k: v for k, v in data.items() if k in known})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a mailbox message: {exc}") from None
        if not all(isinstance(v, str) for v in (message.id, message.rid, message.text)):
            raise ValueError("not a mailbox message: id, rid and text must be strings")
        return message


class Mailbox:
    """The mailboxes of a bus, and the set of agents a message may wait for."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        *,
        max_messages: int = MAILBOX_MAX_MESSAGES,
        max_bytes: int = MAILBOX_MAX_BYTES,
    ) -> None:
        self._client, self._keys = client, keys
        self.max_messages, self.max_bytes = max_messages, max_bytes
        self._put = client.register_script(_PUT)
        self._pop = client.register_script(_POP)

    async def put(self, agent: str, message: MailMessage) -> int:
        """Keep ``message`` for ``agent``; its position (1: next to be queued).

        Raises:
            PayloadTooLarge: the message is larger than a ``team.input`` request may be:
                what a running agent would refuse must not reach it through the mailbox.
            MailboxFull: the mailbox holds ``max_messages`` messages or ``max_bytes``.
        """
        encoded = message.encode()
        if len(encoded) > RPC_MAX_PAYLOAD:
            raise PayloadTooLarge(
                f"not kept: the message is {len(encoded)} bytes and a message to an agent "
                f"may be {RPC_MAX_PAYLOAD} at most",
                detail={"agent": agent, "bytes": len(encoded), "max_bytes": RPC_MAX_PAYLOAD},
            )
        keys = [self._keys.mailbox(agent), self._keys.mailbox_bytes(agent)]
        args: list[bytes | int] = [encoded, self.max_messages, self.max_bytes]
        length = int(await self._put(keys=keys, args=args))
        if length < 0:
            limit = (
                f"{self.max_messages} messages"
                if length == -1
                else f"{self.max_bytes} bytes of messages"
            )
            raise MailboxFull(
                f"not kept: {agent} is not running and its mailbox already holds {limit}",
                detail={"agent": agent, "max_messages": self.max_messages},
            )
        return length

    async def head(self, agent: str) -> bytes | None:
        """The oldest kept message, as stored (hand it back to :meth:`remove`)."""
        raw = await self._client.lindex(self._keys.mailbox(agent), 0)
        return raw.encode() if isinstance(raw, str) else raw

    async def remove(self, agent: str, raw: bytes) -> bool:
        """Drop the head ``raw`` once it is queued; ``False`` if it was no longer the head."""
        keys = [self._keys.mailbox(agent), self._keys.mailbox_bytes(agent)]
        return bool(await self._pop(keys=keys, args=[raw]))

    async def length(self, agent: str) -> int:
        return int(await self._client.llen(self._keys.mailbox(agent)))

    async def messages(self, agent: str) -> list[MailMessage]:
        """Every kept message, oldest first (those this version cannot read left out)."""
        raws = await self._client.lrange(self._keys.mailbox(agent), 0, -1)
        kept = []
        for raw in raws:
            try:
                kept.append(MailMessage.decode(raw))
            except ValueError:
                continue
        return kept

    async def mark_known(self, agent: str) -> None:
        """Record that ``agent`` started on this bus: messages may wait for it from now on."""
        project, name = split_agent(agent)
        await self._client.sadd(self._keys.known_agents(project), name)

    async def known(self, agent: str) -> bool:
        """Whether ``agent`` ever started on this bus, or has messages waiting already (a
        person kept one for an agent configured in their project)."""
        project, name = split_agent(agent)
        pipe = self._client.pipeline(transaction=False)
        pipe.sismember(self._keys.known_agents(project), name)
        pipe.exists(self._keys.mailbox(agent))
        member, waiting = await pipe.execute()
        return bool(member) or bool(waiting)
