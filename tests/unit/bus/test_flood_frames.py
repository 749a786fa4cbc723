"""Tool output at terminal speed (issue 14): larger frames under a flood, secrets checked
as output is read, frames emitted as the framer redacted them.

The framer (:class:`~ateam.bus.coalesce.Coalescer`) with the agent's redactor checks
the bytes as they are fed and redacts only the frames a check flagged; the publisher
then sends those frames as they are (:meth:`EventPublisher.emit_redacted`). Everything
here would fail if a secret cut anywhere between two reads, or between two checks,
could leave in a frame unmasked.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus.coalesce import Coalescer
from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget
from ateam.bus.events import decode_chunk
from ateam.bus.keys import Keys
from ateam.bus.publisher import EventPublisher
from ateam.constants import COALESCE_HARD_MAX_BYTES, COALESCE_MAX_BYTES
from ateam.redact import MASK, Redactor, may_hold_secret

from ..test_redact import OPENAI, SAMPLES

AGENT = "proj/zeus"
FILLER = b"[ 42%] Building CXX object src/net/CMakeFiles/net.dir/http/client_pool.cpp.o\n"


class CountingRedactor(Redactor):
    """The agent's redactor, counting the texts it is asked to redact (not its own calls
    on their pieces)."""

    def __init__(self) -> None:
        super().__init__()
        self.redacted = 0
        self._depth = 0

    def redact(self, text: str) -> str:
        self.redacted += self._depth == 0
        self._depth += 1
        try:
            return super().redact(text)
        finally:
            self._depth -= 1


def joined(frames: list[dict[str, Any]]) -> bytes:
    return b"".join(decode_chunk(frame) for frame in frames)


async def test_a_flood_is_framed_in_larger_frames_and_a_trickle_is_not() -> None:
    frames: list[dict[str, Any]] = []
    co = Coalescer.for_output(frames.append)
    flood = FILLER * 100_000  # ~8 MB in one go: thousands of 8 KiB frames a second
    for start in range(0, len(flood), 4096):
        co.feed(flood[start : start + 4096])
    co.close()
    sizes = [len(f["text"]) for f in frames]
    assert joined(frames) == flood  # every byte, in order
    assert max(sizes) <= COALESCE_HARD_MAX_BYTES
    # Coalesced harder rather than sent in more frames: once the rate is over the limit,
    # frames grow, and most of the flood travels in frames far larger than 8 KiB.
    assert max(sizes) > COALESCE_HARD_MAX_BYTES - Coalescer.HOLD_BYTES - 1
    assert sum(size for size in sizes if size > COALESCE_MAX_BYTES * 4) > len(flood) // 2

    # Once the rate is low again, frames are small again: a trickle stays timely.
    await asyncio.sleep(1.1)
    frames.clear()
    for _ in range(3):
        co.feed(FILLER * 200)  # 16 KB: more than an 8 KiB frame
        co.flush()
    co.close()
    assert max(len(f["text"]) for f in frames) <= COALESCE_MAX_BYTES


async def test_a_secret_cut_between_two_checks_anywhere_is_masked() -> None:
    # A check runs once CHECK_BYTES wait unchecked. The filler is sized so that one runs
    # right after the first part of each sample's line, cut at every position: the next
    # check must still see a trigger or a literal cut in two there, through the bytes
    # it takes from before. One frame holds it all, so a missed check leaves it as is.
    check = Coalescer.CHECK_BYTES
    for _, sample, expected in SAMPLES:
        line = f"\n{sample}\n".encode()
        for cut in range(1, len(line) + 1):
            whole = (FILLER * (check // len(FILLER) + 1))[: check - cut] + line + FILLER
            frames: list[dict[str, Any]] = []
            co = Coalescer(frames.append, max_bytes=64 * 1024, redactor=Redactor())
            co.feed(whole[: check - cut])
            co.feed(line[:cut])
            co.feed(line[cut:] + FILLER)
            co.close()
            assert len(frames) == 1
            assert joined(frames) == Redactor().redact_bytes(whole), (sample, cut)
            assert expected.encode() in joined(frames)


async def test_frames_no_check_flagged_are_not_redacted_again() -> None:
    redactor = CountingRedactor()
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, max_bytes=32 * 1024, redactor=redactor)
    for _ in range(20):
        co.feed(FILLER * 400)  # 31 KB of build log a read: clean
    co.feed(f"export OPENAI_API_KEY={OPENAI}\n".encode())
    co.close()
    assert len(frames) > 10
    assert redactor.redacted == 1  # only the frame with the key was looked at again
    assert OPENAI.encode() not in joined(frames)


async def test_binary_frames_are_redacted_as_bytes_by_the_framer() -> None:
    key = OPENAI.encode()
    noise = random.Random(3).randbytes(40_000)
    frames: list[dict[str, Any]] = []
    co = Coalescer.for_output(frames.append, redactor=Redactor())
    for piece in (noise, b" key=" + key[:10], key[10:] + b" ", noise):
        co.feed(piece)
    co.close()
    assert all("bin" in frame for frame in frames)
    assert joined(frames) == noise + b" key=" + MASK.encode() + b" " + noise


@pytest.mark.usefixtures("trigger_engine")
def test_random_bytes_rarely_look_like_a_secret() -> None:
    # Each trigger that fires makes a whole frame go through the slow pass. The checks
    # ask for what follows a trigger in every real key (sk- and 16 key characters): 64
    # KiB of random bytes trip them about one time in a hundred, not one in eight.
    rng = random.Random(14)
    hits = sum(may_hold_secret(rng.randbytes(64 * 1024)) for _ in range(200))
    assert hits <= 6


async def test_fields_the_framer_redacted_are_sent_as_they_are(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    redactor = Redactor()
    scrubbed: list[dict[str, Any]] = []

    def scrub(fields: dict[str, Any]) -> dict[str, Any]:
        scrubbed.append(dict(fields))
        result: dict[str, Any] = redactor.redact_obj(fields)
        return result

    pub = EventPublisher(client, keys, AGENT, scrub=scrub)
    await pub.start()
    frame = {"text": "x" * 100_000}  # a frame the framer checked: not scanned again
    pub.emit_redacted("tool.output", frame, name=f"k={OPENAI}")
    pub.emit("tool.output", text=f"key {OPENAI}")
    await pub.aclose()
    assert [sorted(fields) for fields in scrubbed] == [["name"], ["text"]]
    first, second = (unpack(f[b"d"]) for _, f in await client.xrange(keys.events(AGENT)))
    assert first["text"] == frame["text"]
    assert first["name"] == f"k={MASK}"  # every other field is still scrubbed
    assert second["text"] == f"key {MASK}"
