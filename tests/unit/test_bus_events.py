"""Event stream: offsets, resume, gaps, buffering and coalescing against a real Redis."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from ateam.bus import events as events_module
from ateam.bus.codec import pack
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.events import (
    Coalescer,
    Event,
    EventPublisher,
    EventTail,
    Gap,
    Reset,
    Rewound,
    _utf8_safe_cut,
    decode_chunk,
    encode_chunk,
)
from ateam.bus.keys import Keys

AGENT = "proj/zeus"


async def collect(tail: EventTail, count: int, timeout: float = 5.0) -> list[Event | Gap]:
    out: list[Event | Gap] = []

    async def run() -> None:
        async for item in tail:
            out.append(item)
            if len(out) >= count:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def test_offsets_are_dense_and_survive_a_new_publisher(
    client: aioredis.Redis, target: RedisTarget, tmp_path: Path
) -> None:
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT, offset_file=tmp_path / "offset")
    await pub.start()
    first = [pub.emit("token", text=f"t{i}") for i in range(5)]
    await pub.aclose()
    # A restarted agent continues after the last offset instead of starting over.
    pub2 = EventPublisher(client, keys, AGENT, offset_file=tmp_path / "offset")
    await pub2.start()
    second = [pub2.emit("token", text="again") for _ in range(3)]
    await pub2.aclose()
    assert first == [1, 2, 3, 4, 5]
    assert second == [6, 7, 8]


async def test_offset_never_resets_even_if_redis_lost_the_stream(
    client: aioredis.Redis, target: RedisTarget, tmp_path: Path
) -> None:
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT, offset_file=tmp_path / "offset")
    await pub.start()
    for _ in range(4):
        pub.emit("token", text="x")
    await pub.aclose()
    await client.delete(keys.events(AGENT))
    pub2 = EventPublisher(client, keys, AGENT, offset_file=tmp_path / "offset")
    await pub2.start()
    assert pub2.emit("token", text="y") == 5
    await pub2.aclose()


async def test_tail_resumes_exactly_after_an_offset(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    for i in range(10):
        pub.emit("token", text=str(i))
    await pub.flush(5)
    tail = EventTail(client, keys)
    tail.add(AGENT, after=6)
    items = await collect(tail, 4)
    assert [i.offset for i in items if isinstance(i, Event)] == [7, 8, 9, 10]
    assert [i.data["text"] for i in items if isinstance(i, Event)] == ["6", "7", "8", "9"]
    await pub.aclose()


async def test_trimmed_offsets_are_reported_as_a_gap(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT, maxlen=10)
    await pub.start()
    for i in range(50):
        pub.emit("token", text=str(i))
    await pub.flush(5)
    await client.xtrim(keys.events(AGENT), maxlen=10, approximate=False)
    tail = EventTail(client, keys)
    tail.add(AGENT, after=0)
    items = await collect(tail, 11)
    assert isinstance(items[0], Gap)
    assert items[0].message() == "tail gap: events 1..40 are no longer available"
    assert [i.offset for i in items[1:] if isinstance(i, Event)] == list(range(41, 51))
    await pub.aclose()


async def test_backlog_start_shows_recent_events_without_a_false_gap(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    for i in range(30):
        pub.emit("token", text=str(i))
    await pub.flush(5)
    tail = EventTail(client, keys)
    tail.add(AGENT, after=None, backlog=5)
    items = await collect(tail, 5)
    assert all(isinstance(i, Event) for i in items)
    assert [i.offset for i in items if isinstance(i, Event)] == [26, 27, 28, 29, 30]
    await pub.aclose()


async def test_stale_publisher_is_fenced_off(client: aioredis.Redis, target: RedisTarget) -> None:
    keys = Keys(target.namespace)
    await client.set(keys.fence(AGENT), 2)
    fenced = asyncio.Event()
    stale = EventPublisher(client, keys, AGENT, fence=lambda: 1, on_fenced=fenced.set)
    await stale.start()
    stale.emit("token", text="from a process that lost its lock")
    await asyncio.wait_for(fenced.wait(), 5)
    assert await client.xlen(keys.events(AGENT)) == 0
    await stale.aclose()


async def test_events_buffer_while_redis_is_down_and_flush_after(own_redis: Any) -> None:
    target = RedisTarget(own_redis.url, "test", namespace="buf:")
    client = make_client(target)
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    own_redis.stop()
    for i in range(20):
        pub.emit("token", text=str(i))
    await asyncio.sleep(0.3)
    assert not pub.connected
    own_redis.start()
    assert await pub.flush(15)
    entries = await client.xrange(keys.events(AGENT))
    assert [int(e[0].split(b"-")[0]) for e in entries] == list(range(1, 21))
    await pub.aclose()
    await client.aclose()


async def test_buffer_overflow_drops_oldest_and_says_so(own_redis: Any) -> None:
    target = RedisTarget(own_redis.url, "test", namespace="ovf:")
    client = make_client(target)
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT, buffer_max=5)
    await pub.start()
    own_redis.stop()
    for i in range(12):
        pub.emit("token", text=str(i))
    own_redis.start()
    assert await pub.flush(15)
    tail = EventTail(client, keys)
    tail.add(AGENT, after=0)
    items = await collect(tail, 7)
    assert isinstance(items[0], Gap) and (items[0].first, items[0].last) == (1, 7)
    texts = [i.data.get("text") for i in items[1:6] if isinstance(i, Event)]
    assert texts == ["7", "8", "9", "10", "11"]
    warn = items[6]
    assert isinstance(warn, Event) and warn.type == "warn"
    assert "7 events were dropped" in warn.data["msg"]
    await pub.aclose()
    await client.aclose()


def test_utf8_cut_never_splits_a_sequence() -> None:
    text = "héllo €uro 🎉".encode()
    for n in range(len(text) + 1):
        cut = _utf8_safe_cut(bytearray(text[:n]))
        text[:cut].decode("utf-8")  # would raise if a sequence were split
        assert n - cut <= 3


def test_chunks_round_trip_text_and_binary() -> None:
    assert encode_chunk(b"plain") == {"text": "plain"}
    binary = bytes(range(256))
    assert "b64" in encode_chunk(binary)
    assert decode_chunk(encode_chunk(binary)) == binary


async def test_coalescer_joins_chunks_into_frames_without_splitting_utf8() -> None:
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, window=0.02)
    payload = "ünïcödé ✓ ".encode() * 50
    for i in range(0, len(payload), 3):  # 3-byte pieces straddle multi-byte sequences
        co.feed(payload[i : i + 3])
    await asyncio.sleep(0.1)
    co.close()
    assert len(frames) < len(payload) // 3
    assert all("text" in f for f in frames)
    assert "".join(f["text"] for f in frames).encode() == payload


async def test_coalescer_flushes_at_size_limit() -> None:
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, window=10, max_bytes=100)
    co.feed(b"x" * 250)
    assert frames and len(frames[0]["text"]) == 250
    co.close()


async def test_coalescer_flushes_output_soon_after_a_newline() -> None:
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, window=5.0, newline_window=0.02)
    co.feed(b"line one\n")
    await asyncio.sleep(0.2)
    assert frames == [{"text": "line one\n"}]
    co.close()


async def test_a_position_beyond_the_stream_top_is_reset_not_waited_on(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    for i in range(5):
        pub.emit("token", text=str(i))
    await pub.flush(5)
    tail = EventTail(client, keys)
    tail.add(AGENT, after=50)  # remembered from a bus that has since lost its data
    (reset,) = await tail.poll()
    assert isinstance(reset, Reset) and reset.last == 5 and reset.saved == 50
    assert "behind the remembered 50" in reset.message()
    pub.emit("token", text="new")
    (new,) = await collect(tail, 1)
    assert isinstance(new, Event) and new.offset == 6
    await pub.aclose()


async def test_coalescer_widens_its_window_above_the_frame_rate_limit() -> None:
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, window=0.005, hard_fps=20)
    for _ in range(60):  # a chunk every ~10 ms: ~100 frames/s if never hardened
        co.feed(b"x")
        await asyncio.sleep(0.01)
    co.close()
    assert co._window > 0.005
    assert len(frames) < 50
    assert sum(len(f["text"]) for f in frames) == 60  # coalesced, nothing dropped


async def test_scrub_masks_text_fields_and_leaves_base64_frames_intact(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    from ateam.bus.codec import unpack
    from ateam.redact import Redactor

    keys = Keys(target.namespace)
    redactor = Redactor()
    pub = EventPublisher(client, keys, AGENT, scrub=redactor.redact_obj)
    await pub.start()
    key = "AIza" + "A1234567890abcdefghijklmnopqrstuvwx"
    # Base64 that happens to contain a key-shaped run: masking it would corrupt the frame.
    encoded = f"QUJD/{key}+QUJDQUJ"
    pub.emit("tool.output", text=f"key {key}")
    pub.emit("tool.output", b64=encoded)
    await pub.aclose()
    bodies = [unpack(f[b"d"]) for _, f in await client.xrange(keys.events(AGENT))]
    assert bodies[0]["text"] == "key ****"
    assert bodies[1]["b64"] == encoded


FORGED = "999999999999-0"


async def test_a_forged_entry_above_the_offsets_is_removed_and_events_flow_again(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    for i in range(3):
        pub.emit("token", text=f"before{i}")
    await pub.flush(5)
    tail = EventTail(client, keys, block_ms=50)
    tail.add(AGENT, 0)
    assert [e.data["text"] for e in await collect(tail, 3) if isinstance(e, Event)] == [
        "before0",
        "before1",
        "before2",
    ]

    # Anyone with access to Redis can do this; before, it silenced the stream for good.
    await client.xadd(keys.events(AGENT), {"d": b"junk"}, id=FORGED)
    stranger = await collect(tail, 1)
    assert isinstance(stranger[0], Event) and stranger[0].data["code"] == "events.forged"
    assert "not written by" in stranger[0].data["msg"]

    pub.emit("token", text="after0")
    pub.emit("token", text="after1")
    assert await pub.flush(5)
    items = await collect(tail, 4)  # rewind notice, after0, after1, the publisher's warning
    await pub.aclose()

    assert isinstance(items[0], Rewound) and (items[0].last, items[0].skipped_to) == (3, 10**12 - 1)
    assert "tail rewind" in items[0].message()
    events = [i for i in items[1:] if isinstance(i, Event)]
    assert [e.offset for e in events] == [4, 5, 6]
    assert [e.data.get("text") for e in events[:2]] == ["after0", "after1"]
    assert events[2].type == "warn" and events[2].data["code"] == "events.forged"
    assert FORGED in events[2].data["msg"]
    ids = [entry_id.decode() for entry_id, _ in await client.xrange(keys.events(AGENT))]
    assert ids == [f"{n}-0" for n in range(1, 7)]
    assert pub.removed == 1


async def test_a_forged_entry_that_copies_the_format_is_undone_too(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    pub.emit("token", text="real")
    await pub.flush(5)
    tail = EventTail(client, keys, block_ms=50)
    tail.add(AGENT, 0)
    await collect(tail, 1)
    body = pack({"type": "token", "text": "fake", "offset": 10**12, "agent": AGENT, "ts": 0})
    await client.xadd(keys.events(AGENT), {"d": body}, id=f"{10**12}-0")
    # Indistinguishable from a real event that follows trimmed ones: shown as such...
    shown = await collect(tail, 2)
    assert isinstance(shown[0], Gap) and isinstance(shown[1], Event)
    assert shown[1].data["text"] == "fake"

    pub.emit("token", text="next")
    await pub.flush(5)
    # ...until the agent removes it: then the tail goes back and misses nothing.
    items = await collect(tail, 3)
    await pub.aclose()
    assert isinstance(items[0], Rewound) and items[0].last == 1
    assert next(i.data.get("text") for i in items[1:] if isinstance(i, Event)) == "next"


async def test_a_publisher_starting_under_a_forged_top_keeps_its_own_offsets(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    for _ in range(4):
        pub.emit("token", text="x")
    await pub.aclose()
    await client.xadd(keys.events(AGENT), {"d": b"junk"}, id=FORGED)

    restarted = EventPublisher(client, keys, AGENT)
    await restarted.start()
    assert restarted.emit("token", text="y") == 5  # not 10**12
    await restarted.flush(5)
    await restarted.aclose()
    ids = [entry_id.decode() for entry_id, _ in await client.xrange(keys.events(AGENT))]
    assert ids == [f"{n}-0" for n in range(1, 7)]  # 5, and the warning about the forged one


async def test_a_retried_batch_is_still_skipped_not_taken_for_a_forgery(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    for _ in range(3):
        pub.emit("token", text="x")
    await pub.flush(5)
    # The same ids again, as after a reply lost to a dropped connection.
    script = client.register_script(events_module._APPEND_LUA)
    reply = await script(
        keys=[keys.events(AGENT), keys.fence(AGENT)],
        args=[1000, 0, 3, 2, pack({"agent": AGENT, "offset": 2}), 3, b"x"],
    )
    await pub.aclose()
    assert reply[:3] == [0, 2, 0]  # two skipped, nothing removed
    assert await client.xlen(keys.events(AGENT)) == 3
