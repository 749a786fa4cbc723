"""Secret redaction throughput: ``Redactor.redact`` vs one single-pattern regex pass.

Not a SPEC §13 row: redaction sits on the hot path of every event, log line and history
turn (SPEC §11), so its cost is tracked here. The text is ateam's own source plus a
synthetic log, about 1 MB; the baseline is the cheapest conceivable redaction, a single
``re.sub`` of one key shape over the same text. A second row times the streaming path:
``Redactor.redact_bytes`` over 8 KiB frames of build output (what ``os.exec`` streams),
which the trigger check lets through without decoding when they hold no secret.

    python benchmarks/bench_redact.py [--quick]
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from _common import Row, environment, parser, report

from ateam.redact import Redactor

ROOT = Path(__file__).resolve().parents[1]
LOG = "2026-11-21 12:00:01 INFO build step 3/7: compiling module foo.bar (0.42s)\n"
BUILD = "[ 42%] Building CXX object src/net/CMakeFiles/net.dir/http/client_pool.cpp.o\n"
FRAME = 8 * 1024


def corpus(size: int) -> str:
    source = "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "ateam").rglob("*.py")))
    text = (source + LOG * 2000) * (1 + size // (len(source) + len(LOG) * 2000))
    return text[:size]


def best_mb_s(fn: object, text: str, rounds: int) -> float:
    assert callable(fn)
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - started)
    return len(text.encode()) / best / 1e6


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    rounds = 3 if args.quick else 10
    text = corpus(1_000_000)
    redactor = Redactor()
    simple = re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")
    print(f"bench_redact: {environment()}")
    ours = best_mb_s(redactor.redact, text, rounds)
    raw = best_mb_s(lambda t: simple.sub("****", t), text, rounds)
    output = ((LOG + BUILD) * (1_000_000 // len(LOG + BUILD) + 1)).encode()[:1_000_000]
    frames = [output[i : i + FRAME] for i in range(0, len(output), FRAME)]
    simple_bytes = re.compile(rb"\bsk-[A-Za-z0-9_-]{20,}")
    as_text = output.decode()  # only its length counts: the frames are what is redacted
    framed = best_mb_s(lambda _: [redactor.redact_bytes(f) for f in frames], as_text, rounds)
    framed_raw = best_mb_s(
        lambda _: [simple_bytes.sub(b"****", f) for f in frames], as_text, rounds
    )
    rows = [
        Row(
            "redact_mb_s",
            "redaction throughput",
            ours,
            "MB/s",
            raw,
            "one-pattern re.sub",
            "(info)",
            None,
            higher_is_better=True,
        ),
        Row(
            "redact_frames_mb_s",
            "redaction of build output, 8 KiB frames",
            framed,
            "MB/s",
            framed_raw,
            "one-pattern re.sub",
            "(info)",
            None,
            higher_is_better=True,
        ),
    ]
    notes = [
        f"best of {rounds} passes over 1 MB",
        "frames: redact_bytes of 8 KiB pieces of log and compiler lines, as os.exec streams",
    ]
    report("Secret redaction (SPEC §11)", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
