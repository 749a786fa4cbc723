"""Team context items (SPEC §9): what agents tell each other, kept in Redis with TTLs.

The item itself (:class:`~ateam.wire.context_items.ContextItem`) is on the wire floor,
where every reader finds it; here are the limits a post is checked against, the store
and its search, which share those limits and change together.

An item is a msgpack value under its own key with a PX TTL, so Redis forgets it on
time without any sweeper. Items are found through sorted-set indexes scored by creation
time: one per project (``task`` and ``project`` scope) and one team-wide (``global``
scope), so a project sees its own items plus the global ones and never another
project's. An index member whose item has expired is pruned by the first reader that
finds it missing; every post also trims its index by age and by size, so an index stays
bounded even when nobody reads it.

Times come from the Redis server's clock (``TIME``), as the registry's heartbeats do, so
ordering and expiry never depend on the clocks of different hosts agreeing.

Key layout (see :class:`~ateam.bus.keys.Keys`)::

    p:{<project>}:context:item:<id>   msgpack item, PX = its TTL
    p:{<project>}:context:index       zset id -> created_at (µs)
    p:{<project>}:events:context      pub/sub notices of the project's posts
    g:{@global}:context:item:<id>     global items
    g:{@global}:context:index
    g:{@global}:events:context        pub/sub notices of global posts
"""

from __future__ import annotations

import asyncio
import builtins
import math
import re
import secrets
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import NamedTuple, TypeVar, cast

import redis.asyncio as aioredis

from ateam.bus.codec import pack, unpack
from ateam.bus.keys import Keys
from ateam.config.names import checked_name
from ateam.errors import BadRequest
from ateam.redact import Redactor
from ateam.wire.context_items import URGENCY_ORDER, ContextItem, ContextType, Scope, Urgency

__all__ = [
    "CONTENT_MAX_BYTES",
    "LIMIT_MAX",
    "SUMMARY_MAX_BYTES",
    "TAGS_MAX",
    "TAG_MAX_CHARS",
    "TITLE_MAX_CHARS",
    "TTL_DEFAULT_S",
    "TTL_MAX_S",
    "TTL_MIN_S",
    "ContextStore",
    "Ranker",
]


# Limits. Items are injected into agents' prompts and shown in banners, so they are kept
# small; text sizes are UTF-8 bytes except the title, which people read in characters.
TITLE_MAX_CHARS = 200
CONTENT_MAX_BYTES = 16 * 1024
SUMMARY_MAX_BYTES = 1024
TAGS_MAX = 16
TAG_MAX_CHARS = 40
SOURCE_MAX_CHARS = 200
"""``source_agent`` and ``source_runtime``: an agent id or a runtime's name, never prose."""
QUERY_MAX_CHARS = 1024
TTL_MIN_S = 1.0
TTL_MAX_S = 30 * 24 * 3600.0
TTL_DEFAULT_S = 24 * 3600.0
INDEX_MAX = 10_000
"""Most members one index keeps; a runaway poster loses its oldest items from view."""
LIMIT_MAX = 500
"""Most items one ``list`` or ``search`` returns."""

TAG_PATTERN = re.compile(rf"[A-Za-z0-9._-]{{1,{TAG_MAX_CHARS}}}")
ID_PATTERN = re.compile(r"c-[0-9a-f]{10}")

_PAGE = 100
"""Index members read per round trip while scanning."""
_US = 1_000_000
_TTL_MAX_US = int(TTL_MAX_S * _US)

_E = TypeVar("_E", bound=StrEnum)

Ranker = Callable[[str, Sequence[str], int], builtins.list[tuple[int, float]]]
"""``(query, texts, limit)`` → ``(index, score)`` best first: a search by meaning."""


# ---------------------------------------------------------------- validation
# Every check raises BadRequest with one line that starts with the field's name, since
# these values often come from a model through a tool call and the model must be able
# to fix its call from the message alone.


def _choice(enum: type[_E], value: object, name: str) -> _E:
    for member in enum:
        if member == value:  # members are str, so a plain string or the member matches
            return member
    allowed = ", ".join(enum)
    raise BadRequest(f"{name} must be one of {allowed}; got {value!r}")


def _text(
    name: str,
    value: object,
    *,
    max_chars: int | None = None,
    max_bytes: int | None = None,
    required: bool = False,
) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string; got {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest(f"{name} is not valid Unicode text (it has a lone surrogate)") from None
    if required and not value.strip():
        raise BadRequest(f"{name} must not be empty")
    if max_chars is not None and len(value) > max_chars:
        raise BadRequest(f"{name} is {len(value)} characters long; the limit is {max_chars}")
    if max_bytes is not None and size > max_bytes:
        raise BadRequest(f"{name} is {size} bytes of UTF-8; the limit is {max_bytes}")
    return value


def _values(value: object, name: str) -> tuple[object, ...]:
    """A list argument as a tuple; a lone string is one value, not a list of characters."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Iterable):
        raise BadRequest(f"{name} must be a list of strings; got {type(value).__name__}")
    return tuple(value)


def _tags(value: object) -> tuple[str, ...]:
    tags: dict[str, None] = {}  # a dict keeps first-seen order while dropping repeats
    for tag in _values(value, "tags"):
        if not isinstance(tag, str) or not TAG_PATTERN.fullmatch(tag):
            raise BadRequest(
                f"tags: {tag!r} is not a tag; use 1-{TAG_MAX_CHARS} of A-Z a-z 0-9 . _ -"
            )
        tags[tag.lower()] = None
    if len(tags) > TAGS_MAX:
        raise BadRequest(f"tags: {len(tags)} given; the limit is {TAGS_MAX}")
    return tuple(tags)


def _ttl_us(value: object) -> int:
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and TTL_MIN_S <= value <= TTL_MAX_S
    ):
        return int(value * _US)
    raise BadRequest(
        f"ttl_s must be a number of seconds from {TTL_MIN_S:g} to {TTL_MAX_S:g} "
        f"(30 days); got {value!r}"
    )


def _limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LIMIT_MAX:
        raise BadRequest(f"limit must be a whole number from 1 to {LIMIT_MAX}; got {value!r}")
    return value


def _choices(enum: type[_E], value: object, name: str) -> frozenset[_E] | None:
    """A filter over enum values; ``None`` or empty means "any"."""
    if value is None:
        return None
    chosen = frozenset(_choice(enum, item, name) for item in _values(value, name))
    return chosen or None


def _has_words(item: ContextItem, words: tuple[str, ...]) -> bool:
    """Whether every (case-folded) word occurs somewhere in the item's text or tags."""
    text = "\n".join((item.title, item.summary, item.content, " ".join(item.tags))).casefold()
    return all(word in text for word in words)


def _new_id() -> str:
    # 40 random bits. An id only has to be unique among the items one index lists, at
    # most INDEX_MAX (10 000): about 1 chance in 20 000 of a clash when an index is
    # full, and far less at real volumes.
    return f"c-{secrets.token_hex(5)}"


def _text_of(member: bytes | str) -> str:
    return member.decode() if isinstance(member, bytes) else member


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class _Filter:
    """What a reader wants; ``None`` means any."""

    scopes: frozenset[Scope] | None = None
    types: frozenset[ContextType] | None = None
    tags: frozenset[str] | None = None
    min_rank: int = 0
    words: tuple[str, ...] = ()

    def matches(self, item: ContextItem) -> bool:
        return (
            (self.scopes is None or item.scope in self.scopes)
            and (self.types is None or item.type in self.types)
            and (self.tags is None or not self.tags.isdisjoint(item.tags))
            and URGENCY_ORDER[item.urgency] >= self.min_rank
            and (not self.words or _has_words(item, self.words))
        )


class _Place(NamedTuple):
    """Where items of one scope live: their index and how their keys are named."""

    index_key: str
    item_key: Callable[[str], str]


@dataclass(eq=False)
class _IndexCursor:
    """Reads one index newest first, a page per round trip, pruning expired members.

    Pages advance by score, not by rank: a post during the scan inserts a newer member
    above the cursor and a prune removes members, and either would shift ranks and make
    a rank-based scan skip or repeat items. Equal scores are resolved by counting the
    members already read at the page's lowest score.
    """

    client: aioredis.Redis
    place: _Place
    now_us: int
    floor_us: int = 0
    """Members scored below this are not read (``list(newer_than=...)``)."""
    _max: float = math.inf
    _skip: int = 0
    _done: bool = False
    _buffer: deque[ContextItem] = field(default_factory=deque)

    async def peek(self) -> ContextItem | None:
        while not self._buffer and not self._done:
            await self._fill()
        return self._buffer[0] if self._buffer else None

    def pop(self) -> None:
        self._buffer.popleft()

    async def _fill(self) -> None:
        # redis-py types the reply for every option combination; WITHSCORES gives pairs.
        rows = cast(
            "list[tuple[bytes | str, float]]",
            await self.client.zrevrangebyscore(
                self.place.index_key,
                self._max,
                max(self.now_us - _TTL_MAX_US, self.floor_us),
                start=self._skip,
                num=_PAGE,
                withscores=True,
            ),
        )
        self._done = len(rows) < _PAGE
        if not rows:
            return
        ids = [_text_of(member) for member, _ in rows]
        pipe = self.client.pipeline(transaction=False)
        for item_id in ids:
            pipe.get(self.place.item_key(item_id))
        raws = await pipe.execute()
        stale = [item_id for item_id, raw in zip(ids, raws, strict=True) if raw is None]
        if stale:
            await self.client.zrem(self.place.index_key, *stale)
        for raw in raws:
            item = _decode(raw)
            if item is not None and item.expires_at * _US > self.now_us:
                self._buffer.append(item)
        lowest = rows[-1][1]
        kept = sum(
            1 for (_, s), raw in zip(rows, raws, strict=True) if s == lowest and raw is not None
        )
        self._skip = (self._skip if lowest == self._max else 0) + kept
        self._max = lowest


def _searchable(item: ContextItem) -> str:
    return "\n".join((item.title, item.summary, item.content, " ".join(item.tags)))


def _decode(raw: bytes | None) -> ContextItem | None:
    """An item from its stored bytes; ``None`` for a missing or unreadable one."""
    if raw is None:
        return None
    try:
        return ContextItem.from_wire(unpack(raw))
    except BadRequest:
        # Written by a newer version with a type or scope this one does not know, or
        # damaged: either way not something to show, and its TTL will remove it.
        return None


# ---------------------------------------------------------------- the store


class ContextStore:
    """Post, list, get and search a team's context items on one Redis.

    Args:
        client: the bus.
        keys: key names of the bus's namespace.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        *,
        redactor: Redactor | None = None,
        ranker: Ranker | None = None,
        ranker_for: Callable[[str], Ranker] | None = None,
    ) -> None:
        self._client = client
        self._keys = keys
        self._redactor = redactor or Redactor()
        """Items are shared with every agent and console: none may carry a secret."""
        self._ranker = ranker
        """How :meth:`search` ranks by meaning (the KB's embedder, passed in from above
        the bus); without one it matches words."""
        self._ranker_for = ranker_for
        """Each project's own ranker, for a store that serves several (a front end)."""

    async def post(
        self,
        project: str,
        *,
        type: ContextType | str,
        title: str,
        content: str = "",
        summary: str = "",
        scope: Scope | str = Scope.PROJECT,
        tags: Iterable[str] = (),
        urgency: Urgency | str = Urgency.BACKGROUND,
        source_agent: str = "",
        source_runtime: str = "ateam",
        ttl_s: float = TTL_DEFAULT_S,
    ) -> ContextItem:
        """Store an item for ``ttl_s`` seconds and announce it on the context channel.

        The item, its index entry, the index trim and the notice go in one MULTI, so a
        subscriber told of an item can always read it (until it expires).

        Args:
            project: the project posting; ``global`` items are still stamped with it.
            type: ``discovery``, ``decision``, ``status``, ``request`` or ``alert``.
            title: one line, at most 200 characters.
            content: the body, at most 16 KiB.
            summary: what an agent's context gets when the body does not fit, at most 1 KiB.
            scope: ``task``, ``project`` or ``global`` (seen from every project).
            tags: at most 16, each 1-40 of ``A-Z a-z 0-9 . _ -``; stored lower-cased.
            urgency: ``background``, ``attention`` or ``blocking``.
            source_agent: the poster's agent id, if an agent posts.
            source_runtime: ``ateam`` or the external runtime posting through MCP.
            ttl_s: lifetime in seconds, from 1 s to 30 days.

        Returns:
            The item as stored, with its id and times.

        Raises:
            BadRequest: any argument is invalid; nothing is stored.
        """
        item_project = checked_name(project)
        kind = _choice(ContextType, type, "type")
        where = _choice(Scope, scope, "scope")
        level = _choice(Urgency, urgency, "urgency")
        redact = self._redactor.redact
        title = redact(_text("title", title, max_chars=TITLE_MAX_CHARS, required=True))
        content = redact(_text("content", content, max_bytes=CONTENT_MAX_BYTES))
        summary = redact(_text("summary", summary, max_bytes=SUMMARY_MAX_BYTES))
        clean_tags = _tags(tags)
        source_agent = _text("source_agent", source_agent, max_chars=SOURCE_MAX_CHARS)
        source_runtime = _text("source_runtime", source_runtime, max_chars=SOURCE_MAX_CHARS)
        ttl_us = _ttl_us(ttl_s)

        now_us = await self._now_us()
        item = ContextItem(
            id=_new_id(),
            project=item_project,
            type=kind,
            title=title,
            scope=where,
            urgency=level,
            created_at=now_us / _US,
            expires_at=(now_us + ttl_us) / _US,
            content=content,
            summary=summary,
            tags=clean_tags,
            source_agent=source_agent,
            source_runtime=source_runtime or "ateam",
        )
        notice = {
            "event": "post",
            "project": item.project,
            "id": item.id,
            "type": str(item.type),
            "scope": str(item.scope),
            "urgency": str(item.urgency),
            "title": item.title,
            "tags": list(item.tags),
            "source_agent": item.source_agent,
        }
        place = self._place(item.project, item.scope)
        pipe = self._client.pipeline(transaction=True)
        # Rounded up so the key never vanishes before expires_at; readers compare against
        # expires_at itself, so the key outliving it by a fraction of a ms shows nothing.
        pipe.set(place.item_key(item.id), pack(item.to_wire()), px=-(-ttl_us // 1000))
        # Scored in µs, not ms: two posts in one millisecond must still list in order.
        pipe.zadd(place.index_key, {item.id: now_us})
        pipe.zremrangebyscore(place.index_key, "-inf", f"({now_us - _TTL_MAX_US}")
        pipe.zremrangebyrank(place.index_key, 0, -(INDEX_MAX + 1))
        channel = (
            self._keys.context_global_channel
            if item.scope is Scope.GLOBAL
            else self._keys.context_channel(item.project)
        )
        pipe.publish(channel, pack(notice))
        await pipe.execute()
        return item

    async def list(
        self,
        project: str,
        *,
        scopes: Iterable[Scope | str] | None = None,
        types: Iterable[ContextType | str] | None = None,
        tags: Iterable[str] | None = None,
        min_urgency: Urgency | str | None = None,
        limit: int = 50,
        newer_than: float | None = None,
    ) -> builtins.list[ContextItem]:
        """The project's live items and the global ones, newest first.

        Args:
            project: whose items; another project's ``task``/``project`` items never show.
            scopes: only these scopes (``None`` or empty: any).
            types: only these types (``None`` or empty: any).
            tags: only items carrying at least one of these tags (case-insensitive).
            min_urgency: only items at least this urgent.
            limit: at most this many items, from 1 to 500.
            newer_than: only items created at or after this time (epoch seconds, the
                server's clock): what a subscriber has not seen yet, in one page.

        Raises:
            BadRequest: an argument is invalid.
        """
        floor_us = 0 if newer_than is None else int(newer_than * _US)
        flt = _Filter(
            scopes=_choices(Scope, scopes, "scopes"),
            types=_choices(ContextType, types, "types"),
            tags=None if tags is None else (frozenset(_tags(tags)) or None),
            min_rank=(
                0
                if min_urgency is None
                else URGENCY_ORDER[_choice(Urgency, min_urgency, "min_urgency")]
            ),
        )
        return await self._collect(checked_name(project), flt, _limit(limit), floor_us)

    async def get(self, project: str, item_id: str) -> ContextItem | None:
        """The live item ``item_id`` of ``project`` or of the global scope, if any.

        Raises:
            BadRequest: ``project`` or ``item_id`` is malformed.
        """
        name = checked_name(project)
        if not isinstance(item_id, str) or not ID_PATTERN.fullmatch(item_id):
            raise BadRequest(f"item_id must look like c-0123456789; got {item_id!r}")
        pipe = self._client.pipeline(transaction=False)
        pipe.get(self._keys.context_item(name, item_id))
        pipe.get(self._keys.context_global_item(item_id))
        for raw in await pipe.execute():
            item = _decode(raw)
            if item is not None:
                return item
        return None

    async def search(
        self, project: str, query: str, *, limit: int = 20
    ) -> builtins.list[ContextItem]:
        """Items (as :meth:`list` sees them) that match ``query``, best first.

        With a ranker (the knowledge base's embedder) the newest :data:`LIMIT_MAX` live
        items are ranked by meaning; without one, items containing every word of the
        query (case-insensitively, in the title, summary, content or tags) are returned
        newest first. A scan either way: indexes are bounded, and items live for hours,
        so a vector index would cost more than it saves.

        Raises:
            BadRequest: the query is empty or too long, or an argument is invalid.
        """
        text = _text("query", query, max_chars=QUERY_MAX_CHARS)
        words = tuple(text.casefold().split())
        if not words:
            raise BadRequest("query must contain at least one word")
        wanted = _limit(limit)
        project = checked_name(project)
        ranker = self._ranker_for(project) if self._ranker_for is not None else self._ranker
        if ranker is None:
            return await self._collect(project, _Filter(words=words), wanted)
        candidates = await self._collect(project, _Filter(), LIMIT_MAX)
        texts = [_searchable(item) for item in candidates]
        # Embedding a few hundred short texts takes tens of ms: off the event loop.
        ranked = await asyncio.to_thread(ranker, text, texts, wanted)
        return [candidates[index] for index, _score in ranked]

    async def fed(self, project: str, agent: str) -> set[str]:
        """Ids of the live items already fed to ``agent``'s model (never fed twice)."""
        key = self._keys.context_fed(checked_name(project), agent)
        now_us = await self._now_us()
        ids = await self._client.zrangebyscore(key, now_us, "+inf")
        return {_text_of(cast(bytes, member)) for member in ids}

    async def mark_fed(self, project: str, agent: str, items: Iterable[ContextItem]) -> None:
        """Remember that ``items`` reached ``agent``'s model, until each expires."""
        scores = {item.id: int(item.expires_at * _US) for item in items}
        if not scores:
            return
        key = self._keys.context_fed(checked_name(project), agent)
        now_us = await self._now_us()
        pipe = self._client.pipeline(transaction=True)
        pipe.zadd(key, scores)
        pipe.zremrangebyscore(key, "-inf", f"({now_us}")
        pipe.zremrangebyrank(key, 0, -(INDEX_MAX + 1))
        # Outlives any member (30 days at most), then a gone agent's set goes too. Not
        # PEXPIREAT ... GT: that needs Redis 7, and ateam runs on 6.2 as well.
        pipe.pexpire(key, _TTL_MAX_US // 1000)
        await pipe.execute()

    async def _collect(
        self, project: str, flt: _Filter, limit: int, floor_us: int = 0
    ) -> builtins.list[ContextItem]:
        """Merge the wanted indexes newest first until ``limit`` items match ``flt``."""
        now_us = await self._now_us()
        places = {p.index_key: p for p in (self._place(project, s) for s in flt.scopes or Scope)}
        cursors = [_IndexCursor(self._client, place, now_us, floor_us) for place in places.values()]
        found: builtins.list[ContextItem] = []
        while len(found) < limit:
            heads = [(await cursor.peek(), cursor) for cursor in cursors]
            live = [(item, cursor) for item, cursor in heads if item is not None]
            if not live:
                break
            item, cursor = max(live, key=lambda pair: pair[0].created_at)
            cursor.pop()
            if flt.matches(item):
                found.append(item)
        return found

    def _place(self, project: str, scope: Scope) -> _Place:
        if scope is Scope.GLOBAL:
            return _Place(self._keys.context_global_index, self._keys.context_global_item)
        return _Place(self._keys.context_index(project), partial(self._keys.context_item, project))

    async def _now_us(self) -> int:
        sec, usec = await self._client.time()
        return int(sec) * _US + int(usec)
