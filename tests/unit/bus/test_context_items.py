"""Team context items against a real Redis (SPEC §9)."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus import context_items
from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget
from ateam.bus.context_items import CONTENT_MAX_BYTES, TTL_MAX_S, ContextStore
from ateam.bus.keys import Keys
from ateam.errors import BadRequest
from ateam.wire.context_items import ContextItem, ContextType, Scope, Urgency
from tests._wait import async_wait_for


@pytest.fixture
def keys(target: RedisTarget) -> Keys:
    return Keys(target.namespace)


@pytest.fixture
def store(client: aioredis.Redis, keys: Keys) -> ContextStore:
    return ContextStore(client, keys)


async def namespace_keys(client: aioredis.Redis, keys: Keys) -> list[bytes]:
    return sorted([key async for key in client.scan_iter(match=f"{keys.ns}*")])


async def wait_gone(client: aioredis.Redis, key: str) -> None:
    async def gone() -> bool:
        return not await client.exists(key)

    await async_wait_for(gone, 10, f"{key} to expire", interval=0.05)


async def test_post_then_list_and_get_round_trip_every_field(
    client: aioredis.Redis, keys: Keys, store: ContextStore
) -> None:
    before = time.time()
    posted = await store.post(
        "proj",
        type="decision",
        title="Use msgpack on the wire",
        content="JSON was 3x larger for tool output.",
        summary="msgpack everywhere",
        scope="task",
        tags=["Wire", "codec", "wire"],
        urgency="attention",
        source_agent="proj/zeus",
        source_runtime="claude-code",
        ttl_s=600,
    )

    assert posted.id.startswith("c-") and len(posted.id) == 12
    assert posted.project == "proj"
    assert posted.type is ContextType.DECISION
    assert posted.scope is Scope.TASK
    assert posted.urgency is Urgency.ATTENTION
    assert posted.tags == ("wire", "codec")  # lower-cased, repeats dropped
    assert posted.source_agent == "proj/zeus"
    assert posted.source_runtime == "claude-code"
    assert abs(posted.created_at - before) < 60
    assert posted.expires_at == pytest.approx(posted.created_at + 600)

    assert await store.list("proj") == [posted]
    assert await store.get("proj", posted.id) == posted
    assert ContextItem.from_wire(posted.to_wire()) == posted

    key = keys.context_item("proj", posted.id)
    stored = unpack(await client.get(key))
    assert stored["v"] == 1
    assert ContextItem.from_wire(stored) == posted
    assert 590_000 < await client.pttl(key) <= 600_000
    assert await client.zscore(keys.context_index("proj"), posted.id) is not None


async def test_defaults(store: ContextStore, client: aioredis.Redis, keys: Keys) -> None:
    item = await store.post("proj", type=ContextType.STATUS, title="building")

    assert (item.scope, item.urgency, item.source_runtime) == ("project", "background", "ateam")
    assert (item.content, item.summary, item.tags, item.source_agent) == ("", "", (), "")
    assert item.expires_at - item.created_at == pytest.approx(24 * 3600)
    assert await client.pttl(keys.context_item("proj", item.id)) > 24 * 3600 * 1000 - 60_000


async def test_filters_by_scope_type_tags_and_urgency(store: ContextStore) -> None:
    a = await store.post("proj", type="discovery", title="a", scope="task", tags=["db"])
    b = await store.post(
        "proj", type="alert", title="b", scope="project", tags=["ci"], urgency="blocking"
    )
    c = await store.post(
        "proj", type="request", title="c", scope="global", tags=["db", "ui"], urgency="attention"
    )

    assert await store.list("proj") == [c, b, a]
    assert await store.list("proj", scopes=["task"]) == [a]
    assert await store.list("proj", scopes=[Scope.GLOBAL, Scope.TASK]) == [c, a]
    assert await store.list("proj", scopes="project") == [b]  # one value, not its letters
    assert await store.list("proj", types=["alert", "discovery"]) == [b, a]
    assert await store.list("proj", tags=["DB"]) == [c, a]  # any of the tags, any case
    assert await store.list("proj", tags=["ci", "ui"]) == [c, b]
    assert await store.list("proj", min_urgency="attention") == [c, b]
    assert await store.list("proj", min_urgency=Urgency.BLOCKING) == [b]
    assert await store.list("proj", min_urgency="background") == [c, b, a]
    assert await store.list("proj", types=["request"], tags=["ui"], scopes=["global"]) == [c]
    assert await store.list("proj", types=["status"]) == []
    assert await store.list("proj", scopes=[], types=[]) == [c, b, a]  # empty means any


async def test_global_items_are_seen_from_every_project_and_project_items_are_not(
    client: aioredis.Redis, keys: Keys, store: ContextStore
) -> None:
    shared = await store.post(
        "alpha", type="alert", title="Redis goes down at 18:00", scope="global"
    )
    mine = await store.post("alpha", type="status", title="alpha only", scope="project")
    task = await store.post("alpha", type="status", title="alpha task", scope="task")

    assert await store.list("alpha") == [task, mine, shared]
    assert await store.list("beta") == [shared]
    assert await store.list("beta", scopes=["project", "task"]) == []
    assert await store.get("beta", shared.id) == shared
    assert await store.get("beta", mine.id) is None
    assert await store.get("alpha", mine.id) == mine
    assert shared.project == "alpha"
    assert await client.zscore(keys.context_global_index, shared.id) is not None
    assert await client.zscore(keys.context_index("alpha"), shared.id) is None
    assert await client.exists(keys.context_global_item(shared.id))


async def test_expired_items_are_not_listed_and_their_index_members_are_pruned(
    client: aioredis.Redis, keys: Keys, store: ContextStore
) -> None:
    keep = await store.post("proj", type="status", title="stays", ttl_s=600)
    gone = await store.post("proj", type="status", title="goes", ttl_s=1)
    gone_global = await store.post("proj", type="alert", title="goes too", scope="global", ttl_s=1)
    await wait_gone(client, keys.context_item("proj", gone.id))
    await wait_gone(client, keys.context_global_item(gone_global.id))
    # Redis forgot the items, but nothing has pruned the indexes yet.
    assert await client.zscore(keys.context_index("proj"), gone.id) is not None
    assert await client.zscore(keys.context_global_index, gone_global.id) is not None

    assert await store.list("proj") == [keep]

    assert await client.zscore(keys.context_index("proj"), gone.id) is None
    assert await client.zscore(keys.context_global_index, gone_global.id) is None
    assert await store.get("proj", gone.id) is None
    assert await store.search("proj", "goes") == []


async def test_an_item_past_expires_at_is_not_returned_even_if_its_key_lingers(
    client: aioredis.Redis, keys: Keys, store: ContextStore
) -> None:
    item = await store.post("proj", type="status", title="stale", ttl_s=1)
    await client.persist(keys.context_item("proj", item.id))  # as if expiry lagged

    async def past_expiry() -> bool:
        sec, usec = await client.time()
        return sec + usec / 1e6 > item.expires_at

    await async_wait_for(past_expiry, 10, "the server's clock to pass expires_at", interval=0.05)

    assert await store.list("proj") == []


async def test_posting_trims_the_index_by_age_and_size(
    client: aioredis.Redis, keys: Keys, store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = keys.context_index("proj")
    sec, _ = await client.time()
    too_old_us = (sec - TTL_MAX_S - 60) * 1_000_000
    await client.zadd(index, {"c-00000000ff": too_old_us})

    first = await store.post("proj", type="status", title="1")
    assert await client.zscore(index, "c-00000000ff") is None

    monkeypatch.setattr(context_items, "INDEX_MAX", 3)
    posted = [first] + [await store.post("proj", type="status", title=str(i)) for i in range(2, 6)]

    members = [m.decode() for m in await client.zrange(index, 0, -1)]
    assert members == [item.id for item in posted[-3:]]
    assert await store.list("proj") == posted[:-4:-1]


async def test_limit_and_newest_first(store: ContextStore) -> None:
    posted = [await store.post("proj", type="status", title=f"step {i}") for i in range(8)]

    assert await store.list("proj") == posted[::-1]
    assert await store.list("proj", limit=3) == posted[:-4:-1]
    assert await store.list("proj", limit=1) == [posted[-1]]
    assert [i.created_at for i in posted] == sorted({i.created_at for i in posted})


async def test_paging_survives_equal_scores_and_pruning_mid_scan(
    client: aioredis.Redis, keys: Keys, store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(context_items, "_PAGE", 2)
    index = keys.context_index("proj")
    posted = [await store.post("proj", type="status", title=f"t{i}") for i in range(9)]
    # Four posts in one microsecond (scores tie across page boundaries) ...
    tied = posted[2:6]
    await client.zadd(index, {item.id: await client.zscore(index, tied[0].id) for item in tied})
    # ... and items that expired in the middle of pages and at their edges.
    for item in (posted[1], posted[3], posted[4], posted[8]):
        await client.delete(keys.context_item("proj", item.id))
    live = {item.id for item in posted} - {posted[i].id for i in (1, 3, 4, 8)}

    listed = await store.list("proj")

    assert sorted(item.id for item in listed) == sorted(live)
    assert len(listed) == len(live)
    assert await client.zcard(index) == len(live)


async def test_a_notice_is_published_for_each_post(
    client: aioredis.Redis, keys: Keys, store: ContextStore
) -> None:
    pubsub = client.pubsub()
    await pubsub.subscribe(keys.context_global_channel)
    try:
        item = await store.post(
            "proj",
            type="alert",
            title="CI is red",
            urgency="blocking",
            scope="global",
            tags=["ci"],
            source_agent="proj/ares",
        )
        message: dict[str, Any] | None = await async_wait_for(
            lambda: pubsub.get_message(ignore_subscribe_messages=True, timeout=1), 5, "a notice"
        )
    finally:
        await pubsub.aclose()

    assert message is not None, "no notice arrived"
    assert message["channel"] == keys.context_global_channel.encode()
    notice = unpack(message["data"])
    assert notice == {
        "v": 1,
        "event": "post",
        "project": "proj",
        "id": item.id,
        "type": "alert",
        "scope": "global",
        "urgency": "blocking",
        "title": "CI is red",
        "tags": ["ci"],
        "source_agent": "proj/ares",
    }


async def test_search_matches_every_word_across_fields_and_case(store: ContextStore) -> None:
    flaky = await store.post(
        "proj",
        type="discovery",
        title="Flaky test in test_queue",
        content="It races the compaction thread.",
        tags=["ci"],
    )
    summary = await store.post(
        "proj", type="decision", title="Queue format", summary="JSONL with COMPACTION every 100"
    )
    shared = await store.post(
        "other", type="alert", title="Freeze", content="no merges", scope="global", tags=["CI"]
    )
    await store.post("other", type="status", title="compaction elsewhere")

    assert await store.search("proj", "compaction") == [summary, flaky]
    assert await store.search("proj", "FLAKY Compaction") == [flaky]  # title + content
    assert await store.search("proj", "ci races") == [flaky]  # tag + content
    assert await store.search("proj", "ci") == [shared, flaky]  # global items too
    assert await store.search("proj", "jsonl 100 queue") == [summary]  # summary + title
    assert await store.search("proj", "compaction missing") == []
    assert await store.search("proj", "compaction", limit=1) == [summary]
    with pytest.raises(BadRequest, match=r"^query"):
        await store.search("proj", "   ")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("type", "gossip"),
        ("type", 3),
        ("scope", "team"),
        ("urgency", "urgent"),
        ("title", ""),
        ("title", "   "),
        ("title", "x" * 201),
        ("title", None),
        ("content", "x" * (CONTENT_MAX_BYTES + 1)),
        ("content", "é" * (CONTENT_MAX_BYTES // 2 + 1)),  # counted in UTF-8 bytes
        ("summary", "x" * 1025),
        ("tags", ["has space"]),
        ("tags", ["x" * 41]),
        ("tags", [""]),
        ("tags", ["ok", 7]),
        ("tags", [f"t{i}" for i in range(17)]),
        ("tags", 5),
        ("source_agent", "a" * 201),
        ("ttl_s", 0.5),
        ("ttl_s", 0),
        ("ttl_s", -5),
        ("ttl_s", TTL_MAX_S + 1),
        ("ttl_s", math.nan),
        ("ttl_s", math.inf),
        ("ttl_s", "60"),
        ("ttl_s", True),
    ],
)
async def test_invalid_posts_are_refused_naming_the_field_and_store_nothing(
    client: aioredis.Redis, keys: Keys, store: ContextStore, field: str, value: object
) -> None:
    args: dict[str, Any] = {"type": "status", "title": "ok", field: value}

    with pytest.raises(BadRequest, match=f"^{field}") as caught:
        await store.post("proj", **args)

    assert "\n" not in str(caught.value)
    assert caught.value.code == "bad_request"
    assert await namespace_keys(client, keys) == []


@pytest.mark.parametrize("project", ["", "a/b", "-x", "a b", "p{1}"])
async def test_an_invalid_project_is_refused(store: ContextStore, project: str) -> None:
    with pytest.raises(BadRequest, match=r"^project"):
        await store.post(project, type="status", title="t")
    with pytest.raises(BadRequest, match=r"^project"):
        await store.list(project)


async def test_limits_are_inclusive(store: ContextStore) -> None:
    item = await store.post(
        "proj",
        type="status",
        title="x" * 200,
        content="é" * (CONTENT_MAX_BYTES // 2),
        summary="s" * 1024,
        tags=[f"t{i}" for i in range(15)] + ["y" * 40],
        ttl_s=TTL_MAX_S,
    )
    assert await store.get("proj", item.id) == item
    assert (await store.post("proj", type="status", title="t", ttl_s=1)).id


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ({"scopes": ["team"]}, "scopes"),
        ({"types": ["gossip"]}, "types"),
        ({"tags": ["bad tag"]}, "tags"),
        ({"min_urgency": "loud"}, "min_urgency"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
    ],
)
async def test_invalid_list_arguments_are_refused(
    store: ContextStore, call: dict[str, Any], field: str
) -> None:
    with pytest.raises(BadRequest, match=f"^{field}"):
        await store.list("proj", **call)


async def test_get_refuses_a_malformed_id_and_misses_an_unknown_one(store: ContextStore) -> None:
    with pytest.raises(BadRequest, match=r"^item_id"):
        await store.get("proj", "c-1}:x")
    assert await store.get("proj", "c-0123456789") is None
