"""A secret a command prints reaches no frame unmasked, however the reads cut it (issue 14).

The path is the agent's: real PTY reads → :class:`~ateam.bus.coalesce.Coalescer` with
the agent's redactor, which checks each read as it comes and redacts the frames it makes
(text and bytes; the publisher sends them as they are). Commands print a secret in two
writes with a pause between them, longer than the framing window, so the two halves
arrive in separate reads and the first half would be a frame of its own; and floods put
a frame boundary inside a secret.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from ateam.bus.coalesce import Coalescer
from ateam.bus.events import decode_chunk
from ateam.redact import Redactor
from ateam.tools.exec_values import ExecLimits
from ateam.tools.pty import run_command

pytestmark = pytest.mark.timeout(30)

KEY = "sk-proj-" + "Ab3dEf6hIj9k_Lm-" * 4
TOKEN = "4f9c2b7e1d8a6f3c" * 3
PASSWORD = "correct-horse-battery-staple"
PEM_BODY = "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2+K1vXr4f0tq8Rk1Zx9Q5hL2mN7pJ3s\n" * 40
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----\n"


async def frames_of(cmd: str, cwd: Path) -> tuple[list[dict[str, Any]], bytes]:
    """The frames of ``cmd``'s output as the agent publishes them, and their bytes."""
    redactor = Redactor()
    frames: list[dict[str, Any]] = []
    coalescer = Coalescer.for_output(frames.append, redactor=redactor)
    result = await run_command(
        cmd, cwd=cwd, limits=ExecLimits(timeout_s=20.0), on_output=coalescer.feed
    )
    coalescer.close()
    assert result.exit_code == 0, result.text_for_model()
    framed = b"".join(decode_chunk(frame) for frame in frames)
    return frames, framed


def shown(frames: list[dict[str, Any]]) -> list[bytes]:
    return [decode_chunk(frame) for frame in frames]


@pytest.mark.parametrize(
    ("first", "second", "secret"),
    [
        # A key cut in the middle of its characters (the word waits for its end).
        ("export OPENAI_API_KEY=" + KEY[:12], KEY[12:] + "\n", KEY),
        # A name and its value cut apart at the space between them (the line waits).
        ("password: ", PASSWORD + "\n", PASSWORD),
        ("curl -H 'Authorization: Bearer ", TOKEN + "' https://api.example.com\n", TOKEN),
    ],
)
async def test_a_secret_printed_in_two_writes_is_masked_whole(
    tmp_path: Path, first: str, second: str, secret: str
) -> None:
    (tmp_path / "a").write_text("done compiling\n" + first)
    (tmp_path / "b").write_text(second)
    frames, framed = await frames_of("cat a; sleep 0.3; cat b", tmp_path)
    # Every byte, in order, but the secret's.
    assert framed == ("done compiling\n" + first + second).replace(secret, "****").encode()
    assert all(secret.encode() not in piece for piece in shown(frames)), shown(frames)
    assert any(b"****" in piece for piece in shown(frames))


async def test_a_secret_in_binary_output_split_across_reads_is_masked(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"\xff\xfe binary, then key=" + KEY[:12].encode())
    (tmp_path / "b").write_bytes(KEY[12:].encode() + b" \xff\n")
    frames, framed = await frames_of("cat a; sleep 0.3; cat b", tmp_path)
    # Binary frames are redacted by the framer itself, as bytes.
    assert framed == b"\xff\xfe binary, then key=**** \xff\n"
    assert all("bin" in frame for frame in frames)
    assert b"".join(shown(frames)) == b"\xff\xfe binary, then key=**** \xff\n"


async def test_frame_boundaries_in_a_flood_never_cut_a_name_from_its_value(
    tmp_path: Path,
) -> None:
    # 100 KB of "password: <value>" lines of varied length: 8 KiB frame boundaries land
    # inside values, where cutting at the last space would part a value from its name.
    rng = random.Random(7)
    values = [f"{PASSWORD}-{rng.randrange(10 ** rng.randint(1, 12))}" for _ in range(3000)]
    (tmp_path / "flood").write_text("".join(f"password: {value}\n" for value in values))
    frames, framed = await frames_of("cat flood", tmp_path)
    assert framed == b"password: ****\n" * len(values)
    assert len(frames) > 10
    assert all(PASSWORD.encode() not in piece for piece in shown(frames))


async def test_a_private_key_across_a_frame_boundary_is_masked_whole(tmp_path: Path) -> None:
    filler = "[ 42%] Building CXX object src/net/client_pool.cpp.o\n"
    for lines in (100, 140, 150):  # the block starts a little before, or at, 8 KiB
        (tmp_path / "out").write_text(filler * lines + PEM + filler * 100)
        frames, framed = await frames_of("cat out", tmp_path)
        masked = PEM.replace(PEM_BODY.strip(), "****")
        assert framed == (filler * lines + masked + filler * 100).encode()
        assert len(frames) > 1
        assert all(b"MIIEpAIBAAKCAQEA" not in piece for piece in shown(frames)), lines
