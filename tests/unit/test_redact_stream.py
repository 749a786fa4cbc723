"""A secret printed in pieces is redacted whole, however long the pauses (issue 22, point 5).

The framer (:class:`~ateam.bus.coalesce.Coalescer`) holds back an unterminated private
key block, and an unfinished line that names a secret or holds the start of one, until
its rest comes — whatever flushes the frame: the 50 ms window, the newline timer, a full
frame or the end of the output. Up to a bound: then it says so in the output and masks
what it held, and the rest of the block (or line) when it comes. The key material is
generated (random base64), never a real key.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from ateam.bus.coalesce import Coalescer
from ateam.bus.events import decode_chunk
from ateam.redact import MASK, Redactor
from ateam.tools.exec_values import ExecLimits
from ateam.tools.pty import run_command

from .test_redact import SAMPLES

pytestmark = pytest.mark.usefixtures("trigger_engine")  # each check engine in turn

pytestmark = pytest.mark.timeout(60)

RNG = random.Random(22)


def fake_base64(size: int) -> str:
    return base64.b64encode(RNG.randbytes(size)).decode()


def pem_body(lines: int) -> str:
    return "".join(fake_base64(48) + "\n" for _ in range(lines))


BODY = pem_body(25)
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{BODY}-----END RSA PRIVATE KEY-----\n"
TOKENS = {
    "openai": "sk-proj-" + fake_base64(36).replace("+", "x").replace("/", "y"),
    "github": "ghp_" + fake_base64(27).replace("+", "x").replace("/", "y"),
    "aws": "AKIA" + "".join(RNG.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16)),
}


def fragments(secret: str, size: int = 12) -> list[bytes]:
    """Every run of ``size`` characters of ``secret``'s lines: none may be shown."""
    out = []
    for line in secret.splitlines():
        out.extend(line[i : i + size].encode() for i in range(max(1, len(line) - size + 1)))
    return [piece for piece in out if len(piece) == size]


def leaked(frames: list[dict[str, Any]], secret: str) -> list[bytes]:
    shown = [decode_chunk(frame) for frame in frames]
    whole = b"".join(shown)
    return [p for p in fragments(secret) if p in whole or any(p in s for s in shown)]


def split(text: str, pieces: int) -> list[str]:
    """``text`` cut into ``pieces`` at fixed places, some inside words and armour."""
    cuts = sorted({len(text) * i // pieces + (3 if i % 2 else 0) for i in range(1, pieces)})
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


async def framed(
    pieces: list[str], pauses: list[float], *, redactor: Redactor | None = None, **kw: Any
) -> list[dict[str, Any]]:
    """The frames of ``pieces`` fed with ``pauses`` between them, as tool output is."""
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, newline_window=0.04, redactor=redactor, **kw)
    for index, piece in enumerate(pieces):
        co.feed(piece.encode())
        if index < len(pieces) - 1:
            await asyncio.sleep(pauses[index % len(pauses)])
    co.close()
    return frames


@pytest.mark.parametrize(
    ("pieces", "pauses"),
    [(1, [0.0]), (2, [1.5]), (10, [0.05, 0.3, 1.2]), (10, [0.05])],
)
async def test_a_private_key_printed_in_pieces_is_masked_whole(
    pieces: int, pauses: list[float]
) -> None:
    text = f"$ cat id_rsa\n{PEM}done\n"
    frames = await framed(split(text, pieces), pauses, redactor=Redactor())
    assert not leaked(frames, BODY)
    shown = b"".join(decode_chunk(frame) for frame in frames)
    # The same text as when it was printed in one write: the armour stays.
    assert shown == Redactor().redact(text).encode()


async def test_a_begin_line_flushed_alone_waits_for_the_body_past_every_timer() -> None:
    # The case: the armour line, a 2 s pause, then the body: the BEGIN line
    # begins the buffer, and the newline timer, the window and the word hold all pass.
    frames = await framed(
        ["-----BEGIN RSA PRIVATE KEY-----\n", BODY + "-----END RSA PRIVATE KEY-----\n"],
        [2.0],
        redactor=Redactor(),
    )
    assert not leaked(frames, BODY)
    assert [decode_chunk(f) for f in frames] == [
        b"-----BEGIN RSA PRIVATE KEY-----\n****\n-----END RSA PRIVATE KEY-----\n"
    ]


@pytest.mark.parametrize("name", sorted(TOKENS))
@pytest.mark.parametrize(("pieces", "pauses"), [(2, [1.5]), (10, [0.05, 1.5, 0.05])])
async def test_a_token_printed_in_pieces_is_never_shown(
    name: str, pieces: int, pauses: list[float]
) -> None:
    token = TOKENS[name]
    text = f"using {token} for the upload\n"
    frames = await framed(split(text, pieces), pauses, redactor=Redactor())
    assert not leaked(frames, token), [decode_chunk(f) for f in frames]
    assert MASK.encode() in b"".join(decode_chunk(f) for f in frames)


async def test_a_key_whose_first_characters_went_out_alone_is_masked_from_there() -> None:
    # "AK" is no secret yet, so it goes after the word hold (1 s); its rest, alone, no
    # rule knows: the frame is redacted with the end of the line sent before it.
    aws = TOKENS["aws"]
    frames = await framed(["id: " + aws[:2], aws[2:] + "\n"], [1.5], redactor=Redactor())
    shown = [decode_chunk(f) for f in frames]
    assert shown == [b"id: ", b"AK", b"****\n"]


async def test_a_name_waits_for_its_value_longer_than_the_word_hold() -> None:
    pieces = ["export GITHUB_TOKEN=", "s3cr3tV4lue-Xq9z\n"]
    frames = await framed(pieces, [1.5], redactor=Redactor())
    assert b"".join(decode_chunk(f) for f in frames) == b"export GITHUB_TOKEN=****\n"


async def test_a_block_held_past_the_time_bound_is_masked_and_said_so() -> None:
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, newline_window=0.04, redactor=Redactor())
    co.SECRET_HOLD_S = 0.3  # type: ignore[misc]  # the bound, shortened for the test
    co.feed(b"-----BEGIN PRIVATE KEY-----\n" + BODY[:200].encode())
    await asyncio.sleep(0.6)
    shown = b"".join(decode_chunk(f) for f in frames)
    assert shown.startswith(b"-----BEGIN PRIVATE KEY-----\n****\n[ateam: a private key block")
    assert b"without its end; masked up to its END line]\n" in shown
    co.feed(BODY[200:].encode())  # the rest of the block: masked too, never shown
    await asyncio.sleep(0.2)
    co.feed(b"-----END PRIVATE KEY-----\nnext\n")
    co.close()
    shown = b"".join(decode_chunk(f) for f in frames)
    assert not leaked(frames, BODY)
    assert shown.endswith(b"]\n-----END PRIVATE KEY-----\nnext\n")


async def test_a_block_past_the_size_bound_is_masked_and_said_so() -> None:
    big = pem_body(1500)  # ~100 KiB, without an END line
    frames = await framed(
        ["-----BEGIN EC PRIVATE KEY-----\n", big[:40_000], big[40_000:], "$ "], [0.05],
        redactor=Redactor(),
    )  # fmt: skip
    shown = b"".join(decode_chunk(f) for f in frames)
    assert not leaked(frames, big)
    assert b"[ateam: a private key block was held past 64 KiB without its end" in shown
    assert all(len(decode_chunk(f)) <= 8 * 1024 for f in frames)


async def test_a_line_held_past_the_time_bound_masks_its_partial_secret_and_the_rest() -> None:
    token = TOKENS["openai"]
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, newline_window=0.04, redactor=Redactor())
    co.SECRET_HOLD_S = 0.3  # type: ignore[misc]
    co.feed(f"ok\nexport OPENAI_API_KEY={token[:14]}".encode())
    await asyncio.sleep(0.6)
    co.feed(f"{token[14:]} more\nnext\n".encode())
    co.close()
    shown = b"".join(decode_chunk(f) for f in frames)
    assert shown == (
        b"ok\nexport **** [ateam: a possible secret was held for 0.3 s without its end; "
        b"masked to the end of its line]\nnext\n"
    )
    assert not leaked(frames, token)


async def test_the_end_of_the_output_masks_a_held_partial_secret() -> None:
    token = TOKENS["github"]
    frames = await framed([f"pushing with {token[:10]}"], [0.0], redactor=Redactor())
    assert [decode_chunk(f) for f in frames] == [b"pushing with ****"]
    frames = await framed(["-----BEGIN PRIVATE KEY-----\n" + BODY[:100]], [0.0])
    assert [decode_chunk(f) for f in frames] == [b"-----BEGIN PRIVATE KEY-----\n****"]


async def test_a_key_larger_than_a_frame_in_a_flood_is_masked_whole() -> None:
    big = pem_body(400)  # ~26 KiB: more than an 8 KiB frame
    filler = "[ 42%] Building CXX object src/net/client_pool.cpp.o\n" * 300
    text = f"{filler}-----BEGIN RSA PRIVATE KEY-----\n{big}-----END RSA PRIVATE KEY-----\n{filler}"
    frames = await framed([text[i : i + 4096] for i in range(0, len(text), 4096)], [0.0],
                          redactor=Redactor())  # fmt: skip
    assert not leaked(frames, big)
    assert b"".join(decode_chunk(f) for f in frames) == Redactor().redact(text).encode()


async def test_model_text_is_held_the_same_way() -> None:
    # Model tokens go through a framer without a redactor; the publisher scrubs each
    # frame alone, so the block must reach it in one frame.
    pieces = ["Here it is:\n", "-----BEGIN OPENSSH PRIVATE KEY-----\n", BODY, "-----END OPENSSH "]
    frames = await framed([*pieces, "PRIVATE KEY-----\n"], [0.05, 1.5, 0.2, 0.05])
    scrubbed = [Redactor().redact(f["text"]) for f in frames]
    assert not any(piece.decode() in text for text in scrubbed for piece in fragments(BODY))


@pytest.mark.parametrize("end", ["-----END PRIVATE KEY-----\nafter\n", ""])
async def test_a_key_block_cut_off_by_the_output_limit_is_masked_for_the_model(
    tmp_path: Path, end: str
) -> None:
    # The model (and the history) get the last output_limit bytes of the output: a tail
    # that begins inside a block, its BEGIN line dropped, must not hold its body.
    big = pem_body(200)  # ~13 KiB
    (tmp_path / "a").write_text("building\n-----BEGIN PRIVATE KEY-----\n" + big[:5000])
    (tmp_path / "b").write_text(big[5000:] + end)
    limits = ExecLimits(timeout_s=20.0, output_limit=4096)
    result = await run_command(
        "cat a; sleep 0.2; cat b", cwd=tmp_path, limits=limits, on_output=lambda _: None
    )
    assert result.truncated
    text = Redactor().redact(result.text_for_model())
    assert not [piece for piece in fragments(big) if piece.decode() in text]
    assert text.startswith("[output truncated: showing the last 4096 of ")
    assert f"\n****\n{end}[exit code 0]" in text


def secrets_of(sample: str, expected: str) -> list[str]:
    """The values the redactor replaced in ``sample`` to give ``expected``."""
    parts = expected.split(MASK)
    found, at = [], len(parts[0])
    for part in parts[1:]:
        end = sample.index(part, at + 1) if part else len(sample)
        found.append(sample[at:end])
        at = end + len(part)
    return found


def runs_after_prefix(secret: str, size: int = 8) -> set[str]:
    """Runs of ``size`` characters of ``secret`` past its first 11: a piece cut before a
    rule's prefix is whole (``github_pat_``) shows that much, and no more may show."""
    start = max(0, min(11, len(secret) - size))
    return {secret[i : i + size] for i in range(start, len(secret) - size + 1)}


@pytest.mark.parametrize("give_up", [False, True])
async def test_no_cut_and_no_flush_of_a_secret_shows_any_of_it(give_up: bool) -> None:
    # The worst case for the framer: every piece is flushed at once (as if each pause
    # outlasted the timers) and a word is never held (HOLD_S 0): only the holds of
    # possible secrets and the redaction with the tail keep the secrets whole. And with
    # a bound of 0 s, each hold is given up on at once: what it masks must do too.
    rng = random.Random(5)
    for _, sample, expected in SAMPLES:
        text = f"$ run\n{sample}\n"
        secrets = secrets_of(sample, expected)
        for _ in range(20):
            cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 9))))
            frames: list[dict[str, Any]] = []
            co = Coalescer(frames.append, newline_window=0.04, redactor=Redactor())
            co.HOLD_S = 0.0  # type: ignore[misc]
            if give_up:
                co.SECRET_HOLD_S = 0.0  # type: ignore[misc]
            for a, b in itertools.pairwise([0, *cuts, len(text)]):
                co.feed(text[a:b].encode())
                co.flush()
            co.close()
            shown = b"".join(decode_chunk(f) for f in frames).decode()
            runs = {run for secret in secrets for run in runs_after_prefix(secret)}
            runs.update(secret for secret in secrets if 5 <= len(secret) < 8)
            assert not [run for run in runs if run in shown], (sample, cuts, shown)
            assert MASK in shown or (give_up and "[ateam: " in shown), (sample, cuts, shown)


async def test_each_held_block_is_timed_from_its_own_start() -> None:
    # Two blocks larger than a frame, one after the other: the second is held for its
    # own bound, not for what is left of the first's.
    frames: list[dict[str, Any]] = []
    co = Coalescer(frames.append, newline_window=0.04, redactor=Redactor())
    co.SECRET_HOLD_S = 2.0  # type: ignore[misc]
    first, second = pem_body(160), pem_body(160)  # ~10 KiB each
    co.feed(f"-----BEGIN PRIVATE KEY-----\n{first}".encode())
    await asyncio.sleep(1.5)
    co.feed(f"-----END PRIVATE KEY-----\n-----BEGIN PRIVATE KEY-----\n{second}".encode())
    await asyncio.sleep(0.7)  # past the first block's bound, well within the second's
    co.feed(b"-----END PRIVATE KEY-----\n")
    co.close()
    shown = b"".join(decode_chunk(f) for f in frames)
    block = b"-----BEGIN PRIVATE KEY-----\n****\n-----END PRIVATE KEY-----\n"
    assert shown == block * 2
    assert not leaked(frames, first + second)
