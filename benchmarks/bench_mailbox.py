"""Mailbox delivery after start: what waited for a stopped agent, moved to its queue.

Issue 26 asks how long a message kept for a stopped agent takes to reach its queue once
the agent starts, p99 over 100 runs. A process start is the same with or without mail
(``bench_restart`` measures it), so what is measured here is the step the mailbox adds:
one :meth:`MailboxIntake.deliver <ateam.agent.runtime.inbox.MailboxIntake.deliver>` of
one kept message into a real :class:`~ateam.agent.state.queue.DurableQueue`, as the
agent runs it at start: read the head, decode it, queue it (written and fsynced, its
request id checked), then remove it from the mailbox by script.

A second pair of rows times the whole thing with real processes: a message is kept for
the stopped agent ``bench/hera`` (an ``echo`` agent), then ``python -m ateam agent`` is
started, and the measure runs from ``Popen`` until its mailbox is empty (the message is
queued, then removed). The baseline, in the same rounds, is the same agent started with
an empty mailbox until it answers a ``status`` RPC: what any start costs.

The baseline, in the same run and interleaved, is the least any durable move can do with
raw redis-py and the OS: ``LPOP`` of the same bytes, then ``write`` + ``fsync`` of the
same queue line to a file on the same file system. Messages are put (untimed) before
each pair.

    python benchmarks/bench_mailbox.py [--quick] [--tcp] [--runs N] [--starts N]
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from _common import (
    AgentProcess,
    RedisServer,
    Row,
    banner,
    interleave,
    ns_to_ms,
    paired_rows,
    parser,
    percentile,
    report,
    wait_serving,
)

from ateam.agent.runtime.inbox import MailboxIntake
from ateam.agent.state.queue import DurableQueue, encode_line
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.bus.mailbox import Mailbox, MailMessage
from ateam.bus.rpc import RpcClient

AGENT = "bench/hera"
TEXT = "Please review the retry loop in bus/rpc.py and tell zeus what you find. " * 2


class QueueIntake:
    """The worker's ``enqueue`` over a bare queue: a request id is queued once."""

    def __init__(self, queue: DurableQueue) -> None:
        self.queue = queue

    def enqueue(self, text: str, **fields: Any) -> Any:
        rid = fields.get("rid")
        found = self.queue.find_rid(rid) if rid else None
        item = found or self.queue.append(text, **fields)

        class Queued:
            created = found is None

        Queued.item = item  # type: ignore[attr-defined]
        return Queued()


class NoEvents:
    def emit(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("no message should be dropped in this benchmark")


async def run(url: str, runs: int, warmup: int, work: Path) -> tuple[list[Row], list[str]]:
    target = RedisTarget(url, "bench", namespace="bench:")
    client = make_client(target)
    raw = aioredis.Redis.from_url(url)
    queue = DurableQueue(work / "state")
    queue.open()
    fd = os.open(work / "raw.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    mailbox = Mailbox(client, Keys(target.namespace))
    intake = MailboxIntake(mailbox, AGENT, QueueIntake(queue), NoEvents(), max_hops=lambda: 4)  # type: ignore[arg-type]
    try:

        async def deliver(i: int) -> int:
            await mailbox.put(AGENT, MailMessage.new(TEXT, "agent:zeus", hops=1))
            t0 = time.perf_counter_ns()
            taken = await intake.deliver()
            elapsed = time.perf_counter_ns() - t0
            if taken != 1:
                raise RuntimeError(f"delivered {taken} messages, expected 1")
            queue.take()
            current = queue.current
            if current is not None:
                queue.done(current.id, ok=True, error=None)
            return elapsed

        async def raw_move(i: int) -> int:
            message = MailMessage.new(TEXT, "agent:zeus", hops=1)
            await raw.rpush("bench:raw-mailbox", message.encode())
            line = encode_line({"op": "add", "id": f"q-{i}", "text": TEXT, "rid": message.rid})
            t0 = time.perf_counter_ns()
            await raw.lpop("bench:raw-mailbox")
            os.write(fd, line)
            os.fsync(fd)
            return time.perf_counter_ns() - t0

        d_ns, r_ns = await interleave(deliver, raw_move, runs, warmup)
    finally:
        os.close(fd)
        queue.close()
        await client.aclose()
        await raw.aclose()
    d, r = ns_to_ms(d_ns), ns_to_ms(r_ns)
    rows = paired_rows("mailbox_delivery", "mailbox to queue", d, "LPOP+write+fsync", r)
    notes = [
        f"{runs} interleaved deliveries after {warmup} warm-up, one kept message each "
        f"({len(TEXT)} characters); max {max(d):.2f} vs {max(r):.2f} ms; the first pair of "
        "rows leaves the process start out, the second holds it."
    ]
    return rows, notes


async def starts(url: str, rounds: int, work: Path) -> tuple[list[Row], list[str]]:
    """Start to mailbox delivered, with real agent processes, beside start to serving."""
    target = RedisTarget(url, "bench")
    keys = Keys(target.namespace)
    client = make_client(target)
    mailbox, rpc = Mailbox(client, keys), RpcClient(client, keys)
    hera = AgentProcess(url, "bench", "hera", work / "home", work / "cwd")
    mail_ms: list[float] = []
    serve_ms: list[float] = []
    try:
        hera.spawn()
        await wait_serving(rpc, hera.id, proc=hera)  # known on this bus from now on
        hera.stop()
        for i in range(rounds):
            t0 = hera.spawn()
            serve_ms.append((await wait_serving(rpc, hera.id, proc=hera) - t0) / 1e6)
            hera.stop()
            await mailbox.put(hera.id, MailMessage.new(f"{TEXT} ({i})", "agent:bench/zeus", hops=1))
            t0 = hera.spawn()
            deadline = time.monotonic() + 30
            while await mailbox.length(hera.id):
                if time.monotonic() > deadline or hera.proc is None or hera.proc.poll() is not None:
                    raise RuntimeError(f"the message was not delivered:\n{hera.log_text()[-2000:]}")
                await asyncio.sleep(0.001)
            mail_ms.append((time.perf_counter_ns() - t0) / 1e6)
            await wait_serving(rpc, hera.id, proc=hera)
            hera.stop()
    finally:
        hera.stop()
        await client.aclose()
    rows = [
        Row("mailbox_start_p99", "start to mail queued p99", percentile(mail_ms, 99), "ms",
            percentile(serve_ms, 99), "start to serving p99", "(info)", None),
        Row("mailbox_start_p50", "start to mail queued p50", percentile(mail_ms, 50), "ms",
            percentile(serve_ms, 50), "start to serving p50", "(info)", None),
    ]  # fmt: skip
    notes = [f"{rounds} starts of a real echo agent each way, alternating"]
    return rows, notes


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--runs", type=int, default=100, help="measured deliveries (default 100)")
    p.add_argument(
        "--starts", type=int, default=None, help="measured process starts (default 100, 5 quick)"
    )
    args = p.parse_args()
    runs, warmup = args.runs, 10 if args.quick else 20
    rounds = args.starts if args.starts is not None else (5 if args.quick else 100)
    banner("bench_mailbox", args.tcp)
    work = Path(tempfile.mkdtemp(prefix="ateam-bench-mailbox-"))
    try:
        with RedisServer(tcp=args.tcp) as server:
            rows, notes = asyncio.run(run(server.url, runs, warmup, work))
            more, more_notes = asyncio.run(starts(server.url, rounds, work))
            rows, notes = rows + more, notes + more_notes
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report("Mailbox delivery after start (issue 26)", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
