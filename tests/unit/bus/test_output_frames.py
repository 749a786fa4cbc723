"""Tool output frames from the framer to every reader, through a real Redis (issue 14).

The framer (:class:`~ateam.bus.coalesce.Coalescer`) sends text as ``text`` and bytes
that are not UTF-8 as ``bin`` (bytes), both redacted by it; the publisher writes them in
batches bounded in bytes. Every reader must get the bytes back: the client API
(``decode_chunk``), the typed payload (``Chunk.data()``), the console's renderer (which
the ``tail`` verb prints) and the MCP ``agent_tail`` rows.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from ateam import client as client_api
from ateam.bus.coalesce import Coalescer
from ateam.bus.connection import RedisTarget
from ateam.bus.events import Event, EventType, decode_chunk
from ateam.bus.keys import Keys
from ateam.bus.publisher import EventPublisher
from ateam.bus.tail import EventTail
from ateam.console.render import Chunk, render
from ateam.constants import PUBLISH_BATCH_MAX_BYTES
from ateam.mcp.bridge import FIELD_MAX_CHARS, event_row
from ateam.redact import Redactor
from ateam.wire.events import Chunk as WireChunk
from tests._wait import async_wait_for

AGENT = "proj/zeus"
KEY = "sk-proj-" + "Ab3dEf6hIj9k_Lm-" * 4


async def read_back(client: aioredis.Redis, keys: Keys, count: int) -> list[Event]:
    tail = EventTail(client, keys)
    tail.add(AGENT, after=0)
    events: list[Event] = []

    async def run() -> None:
        async for item in tail:
            assert isinstance(item, Event), item
            events.append(item)
            if len(events) == count:
                return

    await asyncio.wait_for(run(), 10)
    return events


async def test_text_and_binary_frames_reach_every_reader_intact(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    redactor = Redactor()
    publisher = EventPublisher(client, keys, AGENT, scrub=redactor.redact_obj)
    await publisher.start()
    frames: list[dict[str, Any]] = []
    coalescer = Coalescer.for_output(frames.append, redactor=redactor)
    text = "héllo wörld ✓ \x1b[31mred\x1b[0m\n".encode() * 900  # ~30 KB of UTF-8
    binary = b"\xff\xfe\x00 raw " * 2000 + b"key=" + KEY.encode() + b" \xff\n"
    for piece in (text, binary, "tail ✓".encode()[:-1]):  # ends inside a character
        for start in range(0, len(piece), 4095):  # PTY-sized reads
            coalescer.feed(piece[start : start + 4095])
        coalescer.flush()
    coalescer.close()
    for frame in frames:
        publisher.emit(EventType.TOOL_OUTPUT, call_id="c1", name="os.exec", **frame)
    await publisher.aclose()
    events = await read_back(client, keys, len(frames))

    expected = text + binary.replace(KEY.encode(), b"****") + "tail ✓".encode()[:-1]
    kinds = {"text" if "text" in e.data else "bin" for e in events}
    assert kinds == {"text", "bin"}
    assert b"".join(decode_chunk(e.data) for e in events) == expected
    assert b"".join(client_api.decode_chunk(e.data) for e in events) == expected
    payloads = [e.payload for e in events]
    assert all(isinstance(p, WireChunk) for p in payloads)
    assert b"".join(p.data() for p in payloads if isinstance(p, WireChunk)) == expected
    for event in events:
        shown = decode_chunk(event.data).decode("utf-8", "replace")
        rendered = render(event)
        assert isinstance(rendered, Chunk) and rendered.output and rendered.text == shown
        row = event_row(event)
        assert "bin" not in row["data"] and "b64" not in row["data"]  # JSON has no bytes
        assert row["data"]["text"].startswith(shown[:FIELD_MAX_CHARS])
    assert KEY not in repr([e.data for e in events])


async def test_a_flood_is_appended_in_batches_of_bounded_bytes(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    publisher = EventPublisher(client, keys, AGENT)
    await publisher.start()
    frame = "x" * 60_000
    for _ in range(40):  # 2.4 MB waiting at once: one call before the byte bound
        publisher.emit(EventType.TOOL_OUTPUT, text=frame)
    sizes: list[int] = []
    script = publisher._script

    async def watched(*, keys: list[Any], args: list[Any]) -> Any:
        sizes.append(sum(len(payload) for payload in args[6::2]))
        return await script(keys=keys, args=args)

    publisher._script = watched  # type: ignore[assignment]
    await publisher.aclose()
    assert sum(len(s) for s in [frame] * 40) <= sum(sizes)
    assert len(sizes) >= 2400_000 // PUBLISH_BATCH_MAX_BYTES
    assert all(size <= PUBLISH_BATCH_MAX_BYTES for size in sizes)
    events = await read_back(client, keys, 40)
    assert [e.offset for e in events] == list(range(1, 41))
    # One frame larger than the bound still goes, alone.
    publisher = EventPublisher(client, keys, AGENT)
    await publisher.start()
    publisher.emit(EventType.TOOL_OUTPUT, text="y" * (PUBLISH_BATCH_MAX_BYTES + 1))
    assert await publisher.flush(5)
    await publisher.aclose()


async def test_a_name_at_the_end_waits_for_its_value_and_prose_streams_on() -> None:
    frames: list[dict[str, Any]] = []
    coalescer = Coalescer.for_output(frames.append)
    coalescer.feed(b"the token budget is spent; " + b"more words " * 20 + b"and then ")
    await async_wait_for(lambda: frames, Coalescer.HOLD_S / 2)  # flushed, not held
    assert frames[0]["text"].endswith("and then ")
    coalescer.feed(b"\nexport GITHUB_TOKEN= ")
    await async_wait_for(lambda: len(frames) == 2, 2.0)
    assert frames[1] == {"text": "\n"}  # the line with the name waits for its value
    coalescer.feed(b"ghx7Yq2Lm9\n")
    await async_wait_for(lambda: len(frames) == 3, 2.0)
    assert frames[2] == {"text": "export GITHUB_TOKEN= ghx7Yq2Lm9\n"}
    coalescer.close()
