"""The event stream (SPEC §4.5): events, gaps and the offsets they are told apart by.

The agent publishes them (:mod:`ateam.bus.publisher`, framing streamed text with
:mod:`ateam.bus.coalesce`) and consumers follow them (:mod:`ateam.bus.tail`).

Each agent owns one Redis stream. The agent is the only writer (the single-instance lock
guarantees it), so it assigns offsets itself and uses them as stream entry ids
(``<offset>-0``): offsets are dense, never reset (the agent starts from the highest of
the stream's last id and its local record), and a consumer that resumes "after offset
N" is an ``XREAD`` from ``N-0``. A jump in the offsets a consumer receives can only mean
trimmed or dropped events, which is exactly the gap it must report.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ateam._json import JsonObject
from ateam.bus.codec import unpack
from ateam.errors import BadRequest
from ateam.wire.event_types import EventType as EventType  # re-exported: the bus speaks it

if TYPE_CHECKING:
    from ateam.wire.events import Payload

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    """One event as a consumer sees it."""

    agent: str
    offset: int
    type: str
    ts: float
    data: dict[str, Any]

    @cached_property
    def payload(self) -> Payload:
        """The typed payload of this event's type (:mod:`ateam.wire.events`), parsed once.

        The payload models are imported here, by consumers: an agent only writes events.
        """
        from ateam.wire.events import parse_payload

        return parse_payload(self.type, self.data)

    @property
    def task_id(self) -> str | None:
        value = self.data.get("task_id")
        return str(value) if value is not None else None

    @property
    def trace_id(self) -> str | None:
        value = self.data.get("trace_id")
        return str(value) if value is not None else None

    @classmethod
    def decode(cls, agent: str, offset: int, raw: bytes) -> Event:
        return cls.from_body(agent, offset, unpack(raw))

    @classmethod
    def from_body(cls, agent: str, offset: int, body: dict[str, Any]) -> Event:
        etype = str(body.pop("type", "unknown"))
        ts = float(body.pop("ts", 0.0))
        for meta in ("v", "offset", "agent"):
            body.pop(meta, None)
        return cls(agent, offset, etype, ts, body)


@dataclass(frozen=True)
class Gap:
    """Events ``first..last`` of ``agent`` are no longer available."""

    agent: str
    first: int
    last: int

    def message(self) -> str:
        return f"tail gap: events {self.first}..{self.last} are no longer available"


@dataclass(frozen=True)
class Reset(Gap):
    """The saved position ``saved`` lies beyond the stream's top ``last``.

    Seen when offsets saved for one bus meet a stream that restarted lower (a Redis that
    lost its data together with the agent's local record). Following continues from the
    top instead of waiting, silently, for offsets that may never come.
    """

    saved: int = 0

    def message(self) -> str:
        return (
            f"tail reset: the stream is at event {self.last}, behind the remembered "
            f"{self.saved}; following from there"
        )


@dataclass(frozen=True)
class Rewound(Gap):
    """Entries followed after offset ``last`` were not the agent's and are gone.

    Someone wrote entries into the stream above the agent's offsets; the agent removed
    them when it next published. Following resumes after ``last``, the newest genuine
    event delivered, so nothing it wrote since is missed.
    """

    skipped_to: int = 0

    def message(self) -> str:
        return (
            f"tail rewind: entries up to {self.skipped_to} were not written by the agent "
            f"and were removed; following again from event {self.last + 1}"
        )


MAX_OFFSET = 2**53
"""No agent reaches this (10 000 events/s for 28 000 years); an entry claiming it is
forged, and taking it as the top would make every later offset absurd."""
LAST_SEQ = "18446744073709551615"
"""Reads start after ``<offset>-<this>``: an entry ``<offset>-5`` was not written by an
agent (its ids are ``<offset>-0``), and starting at ``<offset>-0`` would return it on
every read."""


def own_body(agent: str, offset: int, raw: bytes) -> JsonObject | None:
    """The entry's body if it is one ``agent``'s publisher wrote at ``offset``, else None.

    The publisher stamps every body with its agent and offset; an entry without them
    (or with others) was written into the stream by someone else.
    """
    if offset >= MAX_OFFSET:
        return None  # beyond any real count: only a forger's entry claims it
    try:
        body = unpack(raw)
    except BadRequest:
        return None
    if body.get("agent") != agent or body.get("offset") != offset:
        return None
    return body


def encode_chunk(data: bytes) -> dict[str, Any]:
    """``{"text": …}`` for valid UTF-8, else ``{"bin": …}`` (bytes, a msgpack binary)."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"bin": data}


def decode_chunk(data: dict[str, Any]) -> bytes:
    """Inverse of :func:`encode_chunk`; also reads ``b64``, what earlier agents sent
    (malformed base64 becomes a visible marker)."""
    binary = data.get("bin")
    if isinstance(binary, bytes):
        return binary
    if "b64" in data:
        try:
            return base64.b64decode(str(data["b64"]), validate=True)
        except ValueError:
            return b"<undecodable binary chunk>"
    return str(data.get("text", "")).encode()
