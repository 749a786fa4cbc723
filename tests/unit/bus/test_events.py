"""Event stream: offsets, resume, gaps, buffering and coalescing against a real Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus import publisher as events_module
from ateam.bus._cuts import utf8_safe_cut
from ateam.bus.coalesce import Coalescer
from ateam.bus.codec import pack, unpack
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.events import Event, Gap, Reset, Rewound, decode_chunk, encode_chunk
from ateam.bus.keys import Keys
from ateam.bus.publisher import EventPublisher
from ateam.bus.tail import EventTail
from ateam.errors import LockLost

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


async def test_a_pinned_backlog_start_keeps_what_comes_before_the_first_read(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    # A console attaches (add + pin), then the agent floods before the tail's first
    # read: reading must start where it was pinned, not at the newest backlog then.
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    for i in range(30):
        pub.emit("token", text=str(i))
    await pub.flush(5)
    tail = EventTail(client, keys)
    tail.add(AGENT, after=None, backlog=5)
    assert await tail.pin(AGENT) == 25
    for i in range(50):
        pub.emit("token", text=f"later {i}")
    await pub.flush(5)
    items = await collect(tail, 55)
    assert [i.offset for i in items if isinstance(i, Event)] == list(range(26, 81))
    assert await tail.pin("proj/nobody") is None
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


async def test_a_writer_whose_lock_is_in_doubt_records_no_offset_it_numbered(
    client: aioredis.Redis, target: RedisTarget, tmp_path: Path
) -> None:
    keys = Keys(target.namespace)
    offsets = tmp_path / "offset"
    await client.set(keys.fence(AGENT), 1)
    pub = EventPublisher(client, keys, AGENT, offset_file=offsets, fence=lambda: 1)
    await pub.start()
    assert [pub.emit("token", text=str(i)) for i in range(3)] == [1, 2, 3]
    await pub.aclose()
    assert offsets.read_text() == "3\n"

    # A successor took the identity (fence 2). The old writer, thawed, numbers events the
    # stream refuses; as in an agent, a refusal is a doubt its owner settles, and the
    # owner's write fence refuses every file meanwhile.
    await client.set(keys.fence(AGENT), 2)

    def refuse(what: str) -> None:
        raise LockLost(f"refusing to write {what}: the instance lock is not confirmed")

    doubted = asyncio.Event()
    stale = EventPublisher(
        client, keys, AGENT, offset_file=offsets, fence=lambda: 1, file_fence=refuse
    )
    stale.on_fence_doubt = doubted.set
    await stale.start()
    assert [stale.emit("token", text="late") for _ in range(4)] == [4, 5, 6, 7]
    await asyncio.wait_for(doubted.wait(), 5)
    await stale.aclose(flush_timeout=0.1)
    assert await client.xlen(keys.events(AGENT)) == 3
    assert offsets.read_text() == "3\n", "the refused events' offsets were recorded"

    # So the successor numbers on right after what the stream holds: no gap.
    successor = EventPublisher(client, keys, AGENT, offset_file=offsets, fence=lambda: 2)
    await successor.start()
    assert successor.emit("token", text="next") == 4
    await successor.aclose()


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
        cut = utf8_safe_cut(bytearray(text[:n]))
        text[:cut].decode("utf-8")  # would raise if a sequence were split
        assert n - cut <= 3


def test_chunks_round_trip_text_and_binary() -> None:
    assert encode_chunk(b"plain") == {"text": "plain"}
    binary = bytes(range(256))
    assert encode_chunk(binary) == {"bin": binary}  # bytes as they are: no base64
    assert decode_chunk(encode_chunk(binary)) == binary
    # What earlier agents sent is still read.
    assert decode_chunk({"b64": "AAEC"}) == b"\x00\x01\x02"


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
    co.feed(b"word " * 50)  # one read larger than a frame: frames of at most 100 bytes
    assert [len(f["text"]) for f in frames] == [100, 100]  # the rest waits for more
    co.close()
    assert [len(f["text"]) for f in frames] == [100, 100, 50]


async def test_a_word_streamed_in_pieces_reaches_one_frame_whole() -> None:
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, window=0.01)
    key = "sk-proj-" + "Q7wE9rT1yU3iO5pA2sD4fG6h" * 2
    for i in range(0, len(key), 4):  # a model streaming a key 4 characters at a time
        co.feed(key[i : i + 4] if i else "env is " + key[:4])
        await asyncio.sleep(0.02)  # slower than the window: each piece could be a frame
    co.feed(" done")
    co.close()
    texts = [f["text"] for f in frames]
    assert any(key in text for text in texts), texts
    assert "".join(texts) == f"env is {key} done"


async def test_a_prompt_without_a_trailing_space_is_not_held_for_long() -> None:
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, window=0.01, newline_window=0.01)
    co.feed(b"Continue? [y/N]")
    await asyncio.sleep(0.2)
    assert frames == [{"text": "Continue? "}]  # the last word waits for its end...
    await asyncio.sleep(Coalescer.HOLD_S)
    assert frames == [{"text": "Continue? "}, {"text": "[y/N]"}]  # ...but not for ever
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
        co.feed(b"x ")
        await asyncio.sleep(0.01)
    co.close()
    assert co._window > 0.005
    assert len(frames) < 50
    assert sum(len(f["text"]) for f in frames) == 120  # coalesced, nothing dropped


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


@pytest.fixture(params=["redis-6.2", "valkey-9"])
async def any_client(
    request: pytest.FixtureRequest, namespace: str
) -> AsyncIterator[tuple[aioredis.Redis, Keys]]:
    """A client of Redis 6.2 and of Valkey 9, whose streams differ (XSETID)."""
    name = "redis6_server" if request.param == "redis-6.2" else "valkey_server"
    server = request.getfixturevalue(name)
    c = make_client(RedisTarget(server.url, "test", namespace=namespace))
    yield c, Keys(namespace)
    await c.aclose()


async def publish(pub: EventPublisher, *texts: str) -> None:
    for text in texts:
        pub.emit("token", text=text)
    assert await pub.flush(5)


async def stream_ids(client: aioredis.Redis, keys: Keys) -> list[str]:
    return [entry_id.decode() for entry_id, _ in await client.xrange(keys.events(AGENT))]


def texts(items: list[Event | Gap]) -> list[str]:
    return [i.data["text"] for i in items if isinstance(i, Event) and i.type == "token"]


async def followed(
    client: aioredis.Redis, keys: Keys, *words: str
) -> tuple[EventPublisher, EventTail, list[Event | Gap]]:
    """A started publisher that sent ``words``, and a tail that has read them all."""
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    await publish(pub, *words)
    tail = EventTail(client, keys, block_ms=50)
    tail.add(AGENT, 0)
    return pub, tail, await collect(tail, len(words))


async def test_a_forged_entry_above_the_offsets_is_removed_and_events_flow_again(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    pub, tail, first = await followed(client, keys, "before0", "before1", "before2")
    assert texts(first) == ["before0", "before1", "before2"]

    # Anyone with access to Redis can do this; before, it silenced the stream for good.
    await client.xadd(keys.events(AGENT), {"d": b"junk"}, id=FORGED)
    stranger = await collect(tail, 1)
    assert isinstance(stranger[0], Event) and stranger[0].data["code"] == "events.forged"
    assert "not written by" in stranger[0].data["msg"]

    await publish(pub, "after0", "after1")
    items = await collect(tail, 4)  # rewind notice, after0, after1, the publisher's warning
    await pub.aclose()

    assert isinstance(items[0], Rewound) and (items[0].last, items[0].skipped_to) == (3, 10**12 - 1)
    assert "tail rewind" in items[0].message()
    events = [i for i in items[1:] if isinstance(i, Event)]
    assert [e.offset for e in events] == [4, 5, 6]
    assert texts(events) == ["after0", "after1"]
    assert events[2].type == "warn" and events[2].data["code"] == "events.forged"
    assert FORGED in events[2].data["msg"]
    assert await stream_ids(client, keys) == [f"{n}-0" for n in range(1, 7)]
    assert pub.foreign == 1


async def test_a_forged_entry_inside_the_coming_offsets_loses_no_event(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    pub, tail, _ = await followed(client, keys, *(f"a{i}" for i in range(3)))
    # An id the agent is about to use, fifty events ahead.
    await client.xadd(keys.events(AGENT), {"d": b"junk"}, id="53-0")
    await collect(tail, 1)  # the stranger, shown as such

    # Three events remove it; sixty more right after go past its id at once.
    await publish(pub, *(f"b{i}" for i in range(3)))
    await publish(pub, *(f"c{i}" for i in range(60)))
    items = await collect(tail, 65)  # rewind, 63 tokens, the warning
    await pub.aclose()
    assert isinstance(items[0], Rewound) and items[0].last == 3
    events = [i for i in items[1:] if isinstance(i, Event)]
    assert [e.offset for e in events] == list(range(4, 68))
    assert texts(events) == [f"b{i}" for i in range(3)] + [f"c{i}" for i in range(60)]
    assert await stream_ids(client, keys) == [f"{n}-0" for n in range(1, 68)]


async def test_a_forged_entry_that_copies_the_format_is_undone_too(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    pub, tail, _ = await followed(client, keys, "real")
    body = pack({"type": "token", "text": "fake", "offset": 10**12, "agent": AGENT, "ts": 0})
    await client.xadd(keys.events(AGENT), {"d": body}, id=f"{10**12}-0")
    # Indistinguishable from a real event that follows trimmed ones: shown as such...
    shown = await collect(tail, 2)
    assert isinstance(shown[0], Gap) and isinstance(shown[1], Event)
    assert shown[1].data["text"] == "fake"

    await publish(pub, "next")
    # ...until the agent removes it: then the tail goes back and misses nothing.
    items = await collect(tail, 3)
    await pub.aclose()
    assert isinstance(items[0], Rewound) and items[0].last == 1
    assert texts(items[1:]) == ["next"]


async def test_a_publisher_starting_under_forged_entries_keeps_its_own_offsets(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    await publish(pub, *(f"t{i}" for i in range(50)))
    await pub.aclose()
    # More than a page or four of the start-up scan, all above the agent's own.
    pipe = client.pipeline(transaction=False)
    for n in range(1100):
        pipe.xadd(keys.events(AGENT), {"d": b"junk"}, id=f"{10**9 + n}-0")
    await pipe.execute()

    restarted = EventPublisher(client, keys, AGENT)  # no local offset file: a kill -9
    await restarted.start()
    assert restarted.emit("token", text="y") == 51
    await restarted.flush(5)
    await restarted.aclose()
    assert await stream_ids(client, keys) == [f"{n}-0" for n in range(1, 53)]
    assert restarted.foreign == 1100


async def test_a_key_of_another_type_does_not_stop_the_publisher(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    await client.set(keys.events(AGENT), "not a stream")
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    await publish(pub, "still flowing")
    await pub.aclose()
    entries = await client.xrange(keys.events(AGENT))
    bodies = [unpack(fields[b"d"]) for _, fields in entries]
    assert bodies[0]["text"] == "still flowing"
    assert bodies[1]["code"] == "events.forged" and "(a string)" in bodies[1]["msg"]


CAP = 1 << 30
"""A byte cap the append script never reaches in these tests (and no lock to check)."""


async def test_a_batch_written_twice_after_a_lost_reply_is_not_taken_for_a_forgery(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    await publish(pub, "x", "y", "z")
    await pub.aclose()
    script = client.register_script(events_module._APPEND_LUA)
    stream_keys = [
        keys.events(AGENT),
        keys.fence(AGENT),
        keys.events_scratch(AGENT),
        keys.events_bytes(AGENT),
        keys.lock(AGENT),
        keys.events_costs(AGENT),
    ]
    batch = [4, pack({"agent": AGENT, "offset": 4}), 5, pack({"agent": AGENT, "offset": 5})]
    first = await script(keys=stream_keys, args=[1000, 0, 3, CAP, "", *batch])
    # The reply was lost: the same batch again, still believing 3 is the newest written.
    again = await script(keys=stream_keys, args=[1000, 0, 3, CAP, "", *batch])
    assert first == [0, 0, 0, b"", b""]
    assert again == [0, 2, 0, b"", b""]  # both already there: skipped, nothing foreign
    assert await stream_ids(client, keys) == [f"{n}-0" for n in range(1, 6)]


async def test_a_forged_entry_without_the_field_or_with_a_sequence_never_makes_a_tail_spin(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    pub, tail, _ = await followed(client, keys, "a", "b", "c")
    # Beside the agent's own 3-0: never returned, never read again and again.
    await client.xadd(keys.events(AGENT), {"x": b"y"}, id="3-5")
    began = time.monotonic()
    assert await tail.poll() == []
    assert time.monotonic() - began >= 0.04  # it blocked, as on a quiet stream
    # Above it, without a d field: one warning, then quiet while the agent is idle.
    await client.xadd(keys.events(AGENT), {"x": b"y"}, id=FORGED)
    seen: list[Event | Gap] = []
    for _ in range(10):
        seen.extend(await tail.poll())
    assert [i.data.get("code") for i in seen if isinstance(i, Event)] == ["events.forged"]
    assert not any(isinstance(i, Rewound) for i in seen)
    assert tail.trusted(AGENT) == 3  # what a console saves: before the stranger's entry

    await publish(pub, "d")
    items = await collect(tail, 3)
    await pub.aclose()
    assert isinstance(items[0], Rewound) and items[0].last == 3
    assert texts(items) == ["d"]
    assert tail.trusted(AGENT) == 5


async def test_a_tail_in_doubt_after_a_real_jump_still_follows_past_a_forgery(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    await publish(pub, "a", "b", "c")
    pub._next = 10  # offsets 4..9 never reached Redis (dropped while it was away)
    await publish(pub, "j")
    tail = EventTail(client, keys, block_ms=50)
    tail.add(AGENT, 3)
    first = await collect(tail, 2)
    assert isinstance(first[0], Gap) and texts(first) == ["j"]  # in doubt: a jump

    await client.xadd(keys.events(AGENT), {"d": b"junk"}, id=FORGED)
    await collect(tail, 1)
    await publish(pub, *(f"k{i}" for i in range(4)))
    items = await collect(tail, 6)  # rewind, four tokens, the warning
    await pub.aclose()
    assert isinstance(items[0], Rewound) and items[0].last == 10
    assert texts(items) == [f"k{i}" for i in range(4)]


async def test_a_lost_reply_never_makes_the_publisher_delete_its_own_entries(
    any_client: tuple[aioredis.Redis, Keys],
) -> None:
    client, keys = any_client
    script = client.register_script(events_module._APPEND_LUA)
    stream_keys = [
        keys.events(AGENT),
        keys.fence(AGENT),
        keys.events_scratch(AGENT),
        keys.events_bytes(AGENT),
        keys.lock(AGENT),
        keys.events_costs(AGENT),
    ]

    def batch(offsets: range) -> list[Any]:
        return [x for n in offsets for x in (n, pack({"agent": AGENT, "offset": n}))]

    # 1..10 went out but the reply was lost; meanwhile 1..3 fell out of the buffer.
    first = await script(keys=stream_keys, args=[1000, 0, 0, CAP, "", *batch(range(1, 11))])
    assert first[0] == 0
    again = await script(keys=stream_keys, args=[1000, 0, 10, CAP, "", *batch(range(4, 13))])
    assert again[:3] == [0, 7, 0]  # 4..10 already there; nothing taken for a stranger's
    assert await stream_ids(client, keys) == [f"{n}-0" for n in range(1, 13)]


async def test_absurd_offsets_and_huge_entries_are_a_strangers_too(
    any_client: tuple[aioredis.Redis, Keys], tmp_path: Path
) -> None:
    client, keys = any_client
    offsets = tmp_path / "offset"
    pub = EventPublisher(client, keys, AGENT, offset_file=offsets)
    await pub.start()
    await publish(pub, "a", "b", "c")
    await pub.aclose()
    offsets.write_text("10\n")  # the local record ahead of the stream (unflushed events)
    # A body copied from the agent's, at the largest id a stream allows...
    top = 2**64 - 1
    body = pack({"type": "token", "text": "x", "agent": AGENT, "offset": top, "ts": 0})
    await client.xadd(
        keys.events(AGENT), {"d": b"junk", **{f"f{i}": b"v" for i in range(5000)}}, id="5-0"
    )
    await client.xadd(keys.events(AGENT), {"d": body}, id=f"{top}-0")

    restarted = EventPublisher(client, keys, AGENT, offset_file=offsets)
    await restarted.start()
    assert restarted.emit("token", text="next") == 11  # not past 2**64: emit never fails
    assert await restarted.flush(5)
    await restarted.aclose()
    assert await stream_ids(client, keys) == ["1-0", "2-0", "3-0", "11-0", "12-0"]
    assert restarted.foreign == 2


async def test_a_caught_up_tail_meets_a_flood_of_big_frames_with_a_small_read(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    # XREAD bounds a read by COUNT, not bytes: a console caught up on small events read
    # the whole retained stream of 64 KiB frames in one go when a flood began (33 MB
    # traced in the console's flood test, over its bound).
    keys = Keys(target.namespace)
    pub = EventPublisher(client, keys, AGENT)
    await pub.start()
    tail = EventTail(client, keys)
    tail.add(AGENT, after=0)
    for i in range(3000):  # a long run of tokens: the reads grow to their full count
        pub.emit("token", text=str(i))
    await pub.flush(5)
    assert len(await collect(tail, 3000)) == 3000
    frame = "x" * 60_000
    for _ in range(150):
        pub.emit("tool.output", text=frame)
    await pub.flush(10)

    first = await tail.poll()

    assert 0 < len(first) <= 2 * tail.first_count < 150
    rest = await collect(tail, 150 - len(first))
    assert len(first) + len(rest) == 150
    await pub.aclose()
