"""Queue append + fsync: ``DurableQueue.append`` vs a raw ``os.write`` + ``os.fsync``.

SPEC §13: queue append + fsync, p99 ≤ 2x a raw ``write`` + ``fsync`` of the same line.

Both files live in one fresh directory on the same file system (by default next to
``ATEAM_HOME`` / ``~/.ateam``, which is where agents keep their queues; ``--dir`` to
choose). The raw side writes exactly the bytes ``DurableQueue`` writes for the same item
(the ``add`` op line, encoded with ateam's own ``encode_line``) to an ``O_APPEND`` file
and fsyncs it. The two are interleaved one for one so both see the same disk state.

    python benchmarks/bench_queue.py [--quick] [--dir DIR]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _common import Row, environment, ns_to_ms, parser, percentile, report

from ateam.agent.state.queue import DurableQueue, encode_line
from ateam.paths import ateam_home

TEXT = "Refactor the retry loop in bus/rpc.py so that a timed-out call is retried once. " * 2


def default_dir() -> Path:
    """A directory on the file system that holds ``~/.ateam`` (or its nearest parent)."""
    home = ateam_home()
    for candidate in (home, *home.parents):
        if candidate.is_dir() and os.access(candidate, os.W_OK):
            return candidate
    return Path(tempfile.gettempdir())


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--dir", type=Path, default=None, help="where to put the two files")
    args = p.parse_args()
    iterations, warmup = (1_000, 100) if args.quick else (5_000, 300)
    base = args.dir or default_dir()
    work = Path(tempfile.mkdtemp(prefix=".ateam-bench-queue-", dir=base))
    print(f"bench_queue: {environment()}; files in {work}")
    try:
        queue = DurableQueue(work / "state")
        queue.open()
        raw_path = work / "raw.jsonl"
        fd = os.open(raw_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        q_ns: list[int] = []
        r_ns: list[int] = []
        try:
            for i in range(warmup + iterations):
                rid = uuid.uuid4().hex
                t0 = time.perf_counter_ns()
                item = queue.append(TEXT, source="console", rid=rid, caller="bench", trace_id="t1")
                t1 = time.perf_counter_ns()
                # The very line DurableQueue wrote for this item.
                line = encode_line({"op": "add", **item.to_dict()})
                t2 = time.perf_counter_ns()
                os.write(fd, line)
                os.fsync(fd)
                t3 = time.perf_counter_ns()
                if i >= warmup:
                    q_ns.append(t1 - t0)
                    r_ns.append(t3 - t2)
        finally:
            os.close(fd)
            queue.close()
        q_size = (work / "state" / "queue.jsonl").stat().st_size
        r_size = raw_path.stat().st_size
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)

    q, r = ns_to_ms(q_ns), ns_to_ms(r_ns)
    q50, q99 = percentile(q, 50), percentile(q, 99)
    r50, r99 = percentile(r, 50), percentile(r, 99)
    rows = [
        Row(
            "queue_append_p99",
            "queue append+fsync p99",
            q99,
            "ms",
            r99,
            "write+fsync p99",
            "<=2x",
            q99 <= 2 * r99,
        ),
        Row(
            "queue_append_p50",
            "queue append+fsync p50",
            q50,
            "ms",
            r50,
            "write+fsync p50",
            "(info)",
            None,
        ),
    ]
    notes = [
        f"{iterations} interleaved appends after {warmup} warm-up; line {len(line)} bytes; "
        f"files {q_size} / {r_size} bytes (queue log / raw); file system of {base}",
        f"mean {sum(q) / len(q):.3f} ms vs {sum(r) / len(r):.3f} ms; "
        f"max {max(q):.2f} vs {max(r):.2f} ms",
    ]
    report("Queue append + fsync (SPEC §13)", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
