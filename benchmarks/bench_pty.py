"""PTY output streamed end to end (exec → agent → Redis → console) against a raw PTY read.

SPEC §13: PTY output streamed end to end (exec → agent → Redis → console) ≥ 50 % of a
raw Python read of the same output from a PTY.

The ateam path. A real ``python -m ateam agent`` process (``bench/zeus``) runs in a
temporary project whose model is ``scripted``: per task one turn calls ``os.exec`` with
a command that prints ``--mb`` megabytes, and one text turn closes the task. This
process owns the agent for each run, as an attached console does, sends the task with
the ``input`` RPC and follows the agent's event stream with
:class:`ateam.bus.events.EventTail`, the console's reader, from the stream's current top,
reporting how far it has read as the console does (so the agent holds a command's
output while this reader lags, issue 28 §3, rather than the stream trimming it).
Every ``tool.output`` frame of the call is decoded with
:func:`ateam.bus.events.decode_chunk` and its bytes counted (and kept, so the text
variant can be compared byte for byte with what the command prints) until the
call's ``tool.end`` arrives. So the path measured is: the command writes into the PTY →
ateam's relay (a ``cat``) moves it into a 1 MiB pipe → the agent reads that, frames it,
checks it for secrets (redacting flagged frames), packs and publishes the frames in
the append script → Redis → ``XREAD`` here → decode. The receive count must equal the command's
output size exactly (ONLCR is off on ateam's PTYs, so no ``\\r`` is added).

Timing window: from receiving ``tool.start`` until receiving ``tool.end``, both taken in
the consuming process. ``tool.start`` is emitted just before the agent spawns the
command, and the raw baseline's clock also starts just before its spawn, so both
windows hold one fork/exec of ``/bin/sh`` and the command's whole run; the queueing of
the task and the scripted model turn that precede the tool call are not PTY streaming
and are left out (``input → tool.end`` is reported too, as a note). ``tool.end`` is
only emitted after the last output frame, and the stream is read in order, so the
window closes once every byte has reached the consumer.

The baseline. In this process: ``ptyprocess.PtyProcess.spawn(["/bin/sh", "-c", CMD])``
with the same minimal environment and terminal size and ONLCR cleared as ateam does,
then a tight ``os.read(fd, 65536)`` loop until EOF/EIO, counting bytes (chunks are kept
too, as in the consumer, so both sides do the same bookkeeping). Rounds alternate which
of the two runs first.

Two outputs: ``text`` — a realistic build-log line repeated (``yes LINE | head -c N``),
and ``binary`` — ``head -c N /dev/urandom``, which
is not UTF-8 and travels as bytes (msgpack ``bin`` frames); issue 14 holds both
to the target. The figures are medians over
``--rounds``. The notes show where the time goes: frame count and mean frame size
(coalescing); the agent's own span from its ``ts`` stamps and each frame's emit →
receive lag (a large lag means frames wait in the agent's publish buffer); CPU seconds
of the agent, the command (the agent's reaped children, the relay included),
redis-server, the consumer and the whole host per run, and of the reader and command in
the raw runs.
``--profile DIR`` runs the agent under cProfile.

    python benchmarks/bench_pty.py [--quick] [--tcp] [--mb 50] [--rounds 3]
                                   [--only text|binary] [--profile DIR]
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import resource
import signal
import statistics
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from _common import (
    AgentProcess,
    HostCpu,
    RedisServer,
    Row,
    banner,
    parser,
    report,
    temp_dir,
    wait_serving,
)
from ptyprocess import PtyProcess

from ateam.agent.context.working import RESUMMARIZE_EVERY
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.events import EventType, Gap, decode_chunk
from ateam.bus.keys import Keys
from ateam.bus.ownership import Ownership
from ateam.bus.rpc import RpcClient
from ateam.bus.tail import EventTail
from ateam.client.readmark import ReadReports
from ateam.tools.exec_values import ExecLimits, minimal_env
from ateam.tools.pty import DEFAULT_COLS, DEFAULT_ROWS

PROJECT = "bench"
AGENT = "zeus"
AGENT_ID = f"{PROJECT}/{AGENT}"
LINE = "[ 42%] Building CXX object src/net/CMakeFiles/net.dir/http/client_pool.cpp.o 0123456789"
"""One line of the text variant: what a compiler or test runner prints, 88 bytes + newline."""
MB = 1_000_000
ROUND_TIMEOUT_S = 300.0


def command(kind: str, n: int) -> str:
    if kind == "text":
        return f"yes '{LINE}' | head -c {n}"
    return f"head -c {n} /dev/urandom"


def expected_text_digest(n: int) -> str:
    """SHA-256 of the first ``n`` bytes ``yes LINE`` prints."""
    line = (LINE + "\n").encode()
    whole, rest = divmod(n, len(line))
    h = hashlib.sha256()
    block = line * 10_000
    for _ in range(whole // 10_000):
        h.update(block)
    h.update(line * (whole % 10_000))
    h.update(line[:rest])
    return h.hexdigest()


def digest(chunks: list[bytes]) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def proc_cpu_s(pid: int, *, children: bool = False, kernel_only: bool = False) -> float:
    """CPU seconds of process ``pid`` (Linux /proc; NaN elsewhere).

    ``utime + stime``, or with ``children`` ``cutime + cstime``: what its reaped
    children (and theirs, once reaped) used — for the agent, the commands it ran. With
    ``kernel_only`` just the system part (``stime``, ``cstime``): system calls.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        first = 13 if children else 11
        kernel = int(fields[first + 1])
        user = 0 if kernel_only else int(fields[first])
        return (user + kernel) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def host_busy_s() -> float:
    """CPU seconds the whole host has been busy (all cores, all processes and the
    kernel's own threads), from /proc/stat; NaN elsewhere."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --- the raw baseline --------------------------------------------------------------------


def _child_setup() -> None:
    """In the child: what ateam's PTY runner does too (the parts that change the bytes).

    ONLCR is cleared on the slave (fd 1), so no ``\\r`` is added, and SIGPIPE is back at
    its default: Python ignores it, and ``yes`` would otherwise live on to print
    "Broken pipe" when ``head`` is done.
    """
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    attrs = termios.tcgetattr(1)
    attrs[1] &= ~termios.ONLCR
    termios.tcsetattr(1, termios.TCSANOW, attrs)


@dataclass
class RawRun:
    nbytes: int
    seconds: float
    chunks: list[bytes]
    cpu_reader: float = float("nan")
    cpu_command: float = float("nan")
    cpu_host: float = float("nan")
    redact_s: float = float("nan")
    """Seconds ``Redactor.redact_bytes`` takes over the same output in 12 KiB pieces."""


def redact_cost(chunks: list[bytes]) -> float:
    """What SPEC §11's redaction alone costs on this output (pieces the size of a frame).

    Informational: the §13 ratio is against a bare read, but every byte ateam streams
    must be redacted first, so ``bare read + this`` is the floor any agent path has.
    """
    from ateam.redact import Redactor

    redactor = Redactor()
    data = b"".join(chunks)
    piece = 12 * 1024
    t0 = time.perf_counter()
    for start in range(0, len(data), piece):
        redactor.redact_bytes(data[start : start + piece])
    return time.perf_counter() - t0


def raw_read(cmd: str, cwd: Path) -> RawRun:
    env = minimal_env(ExecLimits())
    chunks: list[bytes] = []
    n = 0
    host0, kids0, own0 = host_busy_s(), children_cpu_s(), time.process_time()
    t0 = time.perf_counter()
    child = PtyProcess.spawn(
        ["/bin/sh", "-c", cmd],
        cwd=str(cwd),
        env=env,
        dimensions=(DEFAULT_ROWS, DEFAULT_COLS),
        preexec_fn=_child_setup,
    )
    fd = child.fd
    try:
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError as exc:  # EIO: every slave descriptor closed, buffer empty
                if exc.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            n += len(data)
            chunks.append(data)
        t1 = time.perf_counter()
    finally:
        child.close(force=True)
    out = RawRun(n, t1 - t0, chunks)
    out.cpu_reader = time.process_time() - own0
    out.cpu_command = children_cpu_s() - kids0
    out.cpu_host = host_busy_s() - host0
    return out


# --- the ateam path ----------------------------------------------------------------------


@dataclass
class AteamRun:
    nbytes: int = 0
    frames: int = 0
    binary_frames: int = 0
    gaps: int = 0
    seconds: float = float("nan")
    """``tool.start`` received → ``tool.end`` received."""
    input_to_end: float = float("nan")
    """``input`` RPC sent → ``tool.end`` received."""
    first_byte: float = float("nan")
    """``tool.start`` received → first ``tool.output`` frame received."""
    emit_span: float = float("nan")
    """``tool.start`` → ``tool.end`` as stamped by the agent (its ``ts``): the agent's share."""
    emit_first: float = float("nan")
    """``tool.start`` → first ``tool.output`` as stamped by the agent."""
    lags: list[float] = field(default_factory=list)
    """Per frame: receive wall time minus the agent's ``ts`` (publish + Redis + read)."""
    end: dict[str, Any] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    cpu_agent: float = float("nan")
    cpu_agent_sys: float = float("nan")
    """The agent's system (kernel) share of ``cpu_agent``."""
    cpu_command: float = float("nan")
    cpu_redis: float = float("nan")
    cpu_consumer: float = float("nan")
    cpu_host: float = float("nan")


class Streamer:
    """Sends tasks to the agent and reads its event stream back, as a console would."""

    def __init__(self, url: str, agent: AgentProcess, redis_pid: int) -> None:
        self.keys = Keys()  # the agent runs in the default namespace
        self.client = make_client(RedisTarget(url, "bench"))
        self.session = f"bench:{os.getpid()}"
        self.ownership = Ownership(self.client, self.keys, self.session)
        self.rpc = RpcClient(self.client, self.keys, caller=self.session, auth=self.ownership.token)
        self.agent = agent
        self.redis_pid = redis_pid

    async def aclose(self) -> None:
        await self.client.aclose()

    async def send(self, text: str) -> None:
        """One ``input`` call, as the agent's owner (the run holds it throughout)."""
        await self.rpc.call(AGENT_ID, "input", {"text": text, "source": "bench"})

    async def top(self) -> int:
        top: Any = await self.client.xrevrange(self.keys.events(AGENT_ID), count=1)
        return int(top[0][0].split(b"-")[0]) if top else 0

    async def _watch_agent(self) -> None:
        """Raise as soon as the agent process has exited (runs beside the consumer)."""
        proc = self.agent.proc
        # A Popen child's exit is not an awaitable event here; a slow poll is enough.
        while proc is None or proc.poll() is None:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        log = self.agent.log_text()[-2000:]
        raise RuntimeError(f"agent exited with {proc.returncode}:\n{log}")

    async def run_task(self, text: str) -> AteamRun:
        """Send one task and follow it to its ``task.end``; the call's figures."""
        # As an attached console: the owner, reporting how far it has read, so the agent
        # holds a command's output rather than let the stream trim what it has not read
        # (issue 28 §3). A mere tail could be left behind on a busy host.
        await self.ownership.acquire(AGENT_ID)
        marks = ReadReports(self.ownership.mark_read)
        start = await self.top()
        marks.note(AGENT_ID, start)
        tail = EventTail(self.client, self.keys)
        tail.add(AGENT_ID, after=start)
        out = AteamRun()
        consume = asyncio.create_task(self._consume(tail, text, out, marks))
        watch = asyncio.create_task(self._watch_agent())
        try:
            done, _ = await asyncio.wait(
                {consume, watch}, timeout=ROUND_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (consume, watch):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await marks.aclose()
            await self.ownership.release(AGENT_ID)
        if watch in done:
            watch.result()  # raises: the agent died
        if consume not in done:
            raise TimeoutError(f"no task.end within {ROUND_TIMEOUT_S:.0f} s")
        consume.result()
        return out

    async def _consume(self, tail: EventTail, text: str, out: AteamRun, marks: ReadReports) -> None:
        """The console's way of reading: ``async for batch in tail.batches()``."""
        pid = self.agent.proc.pid if self.agent.proc else 0
        agent0, redis0 = proc_cpu_s(pid), proc_cpu_s(self.redis_pid)
        agent_sys0 = proc_cpu_s(pid, kernel_only=True)
        command0, host0 = proc_cpu_s(pid, children=True), host_busy_s()
        cons0 = time.process_time()
        call_id: str | None = None
        t_start: float | None = None
        ts_start = 0.0
        chunks = out.chunks
        t_send = time.perf_counter()
        await self.send(text)
        async for batch in tail.batches():
            now = time.perf_counter()
            wall = time.time()
            marks.note(AGENT_ID, tail.position(AGENT_ID))  # handled below, at once
            for item in batch:
                if isinstance(item, Gap):
                    out.gaps += item.last - item.first + 1
                    continue
                etype, data = item.type, item.data
                if etype == EventType.TOOL_OUTPUT:
                    if data.get("call_id") != call_id:
                        continue
                    chunk = decode_chunk(data)
                    out.nbytes += len(chunk)
                    out.frames += 1
                    if "bin" in data:
                        out.binary_frames += 1
                    chunks.append(chunk)
                    out.lags.append(wall - item.ts)
                    if out.frames == 1 and t_start is not None:
                        out.first_byte = now - t_start
                        out.emit_first = item.ts - ts_start
                elif etype == EventType.TOOL_START and data.get("name") == "os.exec":
                    call_id, t_start, ts_start = str(data.get("call_id")), now, item.ts
                elif etype == EventType.TOOL_END and data.get("call_id") == call_id:
                    if t_start is not None:
                        out.seconds = now - t_start
                        out.emit_span = item.ts - ts_start
                    out.input_to_end = now - t_send
                    out.end = dict(data)
                    # CPU is read here too, before the closing model turn adds anything.
                    out.cpu_agent = proc_cpu_s(pid) - agent0
                    out.cpu_agent_sys = proc_cpu_s(pid, kernel_only=True) - agent_sys0
                    out.cpu_command = proc_cpu_s(pid, children=True) - command0
                    out.cpu_host = host_busy_s() - host0
                    out.cpu_redis = proc_cpu_s(self.redis_pid) - redis0
                    out.cpu_consumer = time.process_time() - cons0
                elif etype == EventType.TASK_END:
                    if call_id is None or not out.end:
                        raise RuntimeError(f"the task ended without an os.exec call: {data}")
                    return


class ProfiledAgent(AgentProcess):
    """The agent under ``cProfile`` (written to ``out`` when it shuts down)."""

    def __init__(self, *args: Any, out: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.out = out

    def command(self) -> list[str]:
        cmd = super().command()
        return [cmd[0], "-m", "cProfile", "-o", str(self.out), *cmd[1:]]


# --- orchestration -----------------------------------------------------------------------


def write_project(root: Path, turns: list[dict[str, Any]]) -> None:
    """A project whose agent replays ``turns`` (the ``scripted`` model) and may ``os.exec``."""
    ateam_dir = root / ".ateam"
    (ateam_dir / "agents" / AGENT).mkdir(parents=True)
    (ateam_dir / "project.yaml").write_text(f"name: {PROJECT}\n")
    (ateam_dir / "models.yaml").write_text(
        # A window far larger than 64 KiB of tool output, so a full context never makes
        # the agent summarise (a model call the script would have to answer) mid-run.
        "models:\n  - id: script\n    provider: scripted\n    script: script.yaml\n"
        "    context_window: 1000000\n"
    )
    (ateam_dir / "script.yaml").write_text(yaml.safe_dump({"turns": turns}))
    spec = {"model": "script", "tools": {"allow": ["os.exec"]}}
    (ateam_dir / "agents" / AGENT / "agent.yaml").write_text(yaml.safe_dump(spec))


def exec_turns(cmd: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": "os.exec", "args": {"cmd": cmd}}]},
        {"text": "Done."},
    ]


@dataclass
class Variant:
    kind: str
    nbytes: int
    raw: list[RawRun] = field(default_factory=list)
    ateam: list[AteamRun] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def cmd(self) -> str:
        return command(self.kind, self.nbytes)


async def run(
    url: str,
    redis_pid: int,
    tmp: Path,
    variants: list[Variant],
    rounds: int,
    profile: Path | None,
    log: Callable[[str], None],
) -> None:
    root = tmp / "project"
    schedule = [v for _ in range(rounds) for v in variants]
    turns = exec_turns("echo warm-up")
    for done, v in enumerate(schedule, start=2):
        turns += exec_turns(v.cmd)
        if done % RESUMMARIZE_EVERY == 0:
            # After every 5th task the agent asks its model for a working-context
            # summary (SPEC §8): the scripted model needs a turn for that too.
            turns.append({"text": "Summary: printed benchmark output."})
    write_project(root, turns)
    home = tmp / "home"
    if profile is not None:
        agent: AgentProcess = ProfiledAgent(
            url, PROJECT, AGENT, home, root, out=profile / "agent.prof"
        )
    else:
        agent = AgentProcess(url, PROJECT, AGENT, home, root)
    streamer = Streamer(url, agent, redis_pid)
    digests = {v.nbytes: expected_text_digest(v.nbytes) for v in variants if v.kind == "text"}
    try:
        agent.spawn()
        await wait_serving(streamer.rpc, AGENT_ID, proc=agent)
        await streamer.run_task("warm up")  # first exec: lazy imports, first PTY
        raw_read("echo warm-up", root)
        for i, v in enumerate(schedule):
            rnd = i // len(variants) + 1
            # Alternate which goes first, so both see the same machine state on average.
            order = ("raw", "ateam") if i % 2 == 0 else ("ateam", "raw")
            for which in order:
                if which == "raw":
                    r = raw_read(v.cmd, root)
                    v.raw.append(r)
                    if r.nbytes != v.nbytes:
                        v.problems.append(f"raw round {rnd}: read {r.nbytes} of {v.nbytes} bytes")
                    elif v.kind == "text" and digest(r.chunks) != digests[v.nbytes]:
                        v.problems.append(f"raw round {rnd}: content differs")
                    r.redact_s = redact_cost(r.chunks)
                    r.chunks.clear()
                    log(
                        f"  {v.kind} round {rnd}: raw {r.nbytes / MB / r.seconds:.1f} MB/s "
                        f"(CPU s reader {r.cpu_reader:.2f}, command {r.cpu_command:.2f}, "
                        f"host {r.cpu_host:.2f})"
                    )
                else:
                    a = await streamer.run_task(f"print {v.kind} output, round {rnd}")
                    v.ateam.append(a)
                    exit_code = a.end.get("exit_code")
                    if a.nbytes != v.nbytes or a.gaps:
                        v.problems.append(
                            f"ateam round {rnd}: received {a.nbytes} of {v.nbytes} bytes, "
                            f"{a.gaps} events lost to gaps"
                        )
                    elif v.kind == "text" and digest(a.chunks) != digests[v.nbytes]:
                        v.problems.append(f"ateam round {rnd}: content differs")
                    if exit_code != 0:
                        v.problems.append(f"ateam round {rnd}: exit code {exit_code}")
                    a.chunks.clear()
                    log(
                        f"  {v.kind} round {rnd}: ateam {a.nbytes / MB / a.seconds:.1f} MB/s "
                        f"({a.frames} frames; CPU s agent {a.cpu_agent:.2f} (system "
                        f"{a.cpu_agent_sys:.2f}), command "
                        f"{a.cpu_command:.2f}, redis {a.cpu_redis:.2f}, consumer "
                        f"{a.cpu_consumer:.2f}, host {a.cpu_host:.2f})"
                    )
    finally:
        agent.stop(30 if profile is not None else 10)
        await streamer.aclose()


def summarize(v: Variant) -> tuple[list[Row], list[str]]:
    raw_mbs = [r.nbytes / MB / r.seconds for r in v.raw]
    ateam_mbs = [a.nbytes / MB / a.seconds for a in v.ateam]
    raw_med, ateam_med = statistics.median(raw_mbs), statistics.median(ateam_mbs)
    lossless = not v.problems
    ratio = ateam_med / raw_med if raw_med else float("nan")
    frames = statistics.median([a.frames for a in v.ateam])
    mean_frame = statistics.mean(a.nbytes / a.frames for a in v.ateam if a.frames)
    label = "realistic text lines" if v.kind == "text" else "random binary, bin frames"
    rows = [
        Row(
            f"pty_stream_{v.kind}",
            f"PTY stream e2e, {v.kind} ({v.nbytes // MB} MB)",
            ateam_med,
            "MB/s",
            raw_med,
            "raw PTY os.read",
            ">=0.5x",
            ratio >= 0.5 and lossless,
            higher_is_better=True,
        )
    ]

    floor = statistics.median([r.nbytes / MB / (r.seconds + r.redact_s) for r in v.raw])

    def fmt_list(values: list[float]) -> str:
        return ", ".join(f"{x:.1f}" for x in values)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    notes = [
        f"{v.kind} ({label}; `{v.cmd}`): {len(v.ateam)} rounds; "
        f"MB/s ateam [{fmt_list(ateam_mbs)}], raw [{fmt_list(raw_mbs)}]; "
        f"ratio ateam/raw {ratio:.2f}",
        f"  bytes received: ateam {v.ateam[-1].nbytes:,}, raw {v.raw[-1].nbytes:,} of "
        f"{v.nbytes:,} written"
        + (" — every byte, in order" if v.kind == "text" else "")
        + (" (none lost)" if lossless else f"; PROBLEMS: {'; '.join(v.problems)}"),
        f"  tool.output frames per run: {frames:.0f}, mean {mean_frame / 1024:.1f} KiB of output "
        f"each" + (f" ({v.ateam[-1].binary_frames} bin)" if v.kind == "binary" else ""),
        f"  median s: tool.start→tool.end {med([a.seconds for a in v.ateam]):.2f}, "
        f"input→tool.end {med([a.input_to_end for a in v.ateam]):.2f}, "
        f"tool.start→first frame {med([a.first_byte for a in v.ateam]) * 1e3:.0f} ms; "
        f"raw spawn→EOF {med([r.seconds for r in v.raw]):.2f}",
        f"  agent side (its own ts stamps, median): tool.start→tool.end emitted "
        f"{med([a.emit_span for a in v.ateam]):.2f} s, first frame emitted after "
        f"{med([a.emit_first for a in v.ateam]) * 1e3:.0f} ms; emit→receive lag per frame "
        f"p50 {med([statistics.median(a.lags) for a in v.ateam]) * 1e3:.1f} ms, "
        f"max {max(max(a.lags) for a in v.ateam) * 1e3:.0f} ms",
        f"  median CPU s per run: ateam — agent {med([a.cpu_agent for a in v.ateam]):.2f} "
        f"(system {med([a.cpu_agent_sys for a in v.ateam]):.2f}), "
        f"command {med([a.cpu_command for a in v.ateam]):.2f}, redis-server "
        f"{med([a.cpu_redis for a in v.ateam]):.2f}, consumer "
        f"{med([a.cpu_consumer for a in v.ateam]):.2f}, whole host "
        f"{med([a.cpu_host for a in v.ateam]):.2f}; raw — reader "
        f"{med([r.cpu_reader for r in v.raw]):.2f}, command "
        f"{med([r.cpu_command for r in v.raw]):.2f}, whole host "
        f"{med([r.cpu_host for r in v.raw]):.2f} ({os.cpu_count()} cores)",
        f"  redaction alone (SPEC §11, same bytes in 12 KiB pieces): "
        f"{med([r.nbytes / MB / r.redact_s for r in v.raw]):.1f} MB/s; raw read + redaction "
        f"{floor:.1f} MB/s, ateam is {ateam_med / floor:.2f}x of that",
    ]
    return rows, notes


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--mb", type=float, default=None, help="output per run in MB (default 50)")
    p.add_argument("--rounds", type=int, default=None, help="rounds per variant (default 3)")
    p.add_argument("--only", choices=("text", "binary"), help="run one variant only")
    p.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run the agent under cProfile and write DIR/agent.prof",
    )
    args = p.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    mb = args.mb if args.mb is not None else (10 if args.quick else 50)
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 3)
    n = int(mb * MB)
    kinds = [args.only] if args.only else ["text", "binary"]
    variants = [Variant(kind, n) for kind in kinds]
    banner("bench_pty", args.tcp)
    print(f"  {mb:g} MB per run, {rounds} rounds of {', '.join(kinds)}", flush=True)
    meter = HostCpu().start()
    with RedisServer(tcp=args.tcp) as server, temp_dir() as tmp:
        assert server.proc is not None
        asyncio.run(
            run(
                server.url,
                server.proc.pid,
                tmp,
                variants,
                rounds,
                args.profile,
                lambda s: print(s, flush=True),
            )
        )
    busy = meter.stop()
    rows: list[Row] = []
    notes: list[str] = []
    for v in variants:
        r, nn = summarize(v)
        rows += r
        notes += nn
    notes.append(
        "window: tool.start received → tool.end received (both hold one spawn of /bin/sh; "
        "task queueing and the model turn are left out)"
    )
    notes.append(f"host CPU busy over the run (all processes, {os.cpu_count()} cores): {busy:.0%}")
    if args.profile is not None:
        notes.append(f"agent profile: {args.profile / 'agent.prof'}")
    report("PTY output streamed end to end (SPEC §13)", rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
