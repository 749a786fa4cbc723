"""Shared helpers of the benchmark suite: a private redis-server, stats and the report.

Every benchmark script starts its own throw-away ``redis-server`` (unix socket by
default, ``--tcp`` for a loopback port) with persistence off, measures an ateam code path
and a raw baseline in the same run, and prints both side by side with their ratio and
the SPEC §13 target. Besides the human table each measure is printed as one
machine-readable line::

    BENCH name=rpc_status_p50 value=0.213 unit=ms baseline=0.061 baseline_label=PING_p50
          ratio=3.49 target=<=4x ok=yes label=rpc_status_p50

(one line in reality; spaces inside values are written as ``_``)
which ``run_all.py`` collects. A script may also hand ``run_all.py`` the raw samples
behind a distribution (:func:`save_samples`), which it draws as charts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the benchmark process dies (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


ROOT = Path(__file__).resolve().parent.parent
"""The project checkout; put first on ``sys.path`` so the benchmarks measure this tree."""

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ateam.bus.embedded import find_redis_server  # noqa: E402


def _sigterm_to_exit(signum: int, frame: object) -> None:
    # SIGTERM (e.g. from `timeout` or run_all) unwinds like Ctrl-C, so `with` blocks stop
    # the private redis-server and agents and remove their temp directories.
    raise SystemExit(128 + signum)


if __name__ != "__main__" and threading_main():
    signal.signal(signal.SIGTERM, _sigterm_to_exit)

# --- arguments -------------------------------------------------------------------------


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="short run (smoke test, noisier figures)")
    p.add_argument(
        "--tcp",
        action="store_true",
        help="talk to redis-server over 127.0.0.1 TCP instead of a unix socket",
    )
    return p


# --- a private redis-server ------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A private ``redis-server`` in a temp dir; persistence off; removed on stop."""

    def __init__(self, *, tcp: bool = False, extra: Sequence[str] = ()) -> None:
        # Short path: AF_UNIX paths are limited to ~107 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="ateam-bench-"))
        self.tcp = tcp
        self.port = free_port() if tcp else 0
        self.sock = self.dir / "redis.sock"
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.tcp:
            return f"redis://127.0.0.1:{self.port}/0"
        return f"unix://{self.sock}"

    def start(self) -> RedisServer:
        cmd = [
            find_redis_server(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.dir / "redis.log"),
        ]
        if not self.tcp:
            cmd += ["--unixsocket", str(self.sock), "--unixsocketperm", "700"]
        cmd += self.extra
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        import redis

        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                if client.ping():
                    break
            except (redis.ConnectionError, redis.BusyLoadingError, FileNotFoundError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "redis.log").read_text(errors="replace")[-500:]
                self.stop()
                raise RuntimeError(f"redis-server did not start: {log}")
            time.sleep(0.02)
        client.close()
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def temp_dir(prefix: str = "ateam-bench-") -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- statistics ------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of unsorted ``samples``."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def ns_to_ms(values: Sequence[int]) -> list[float]:
    return [v / 1e6 for v in values]


async def interleave(
    first: Callable[[int], Awaitable[int]],
    second: Callable[[int], Awaitable[int]],
    iterations: int,
    warmup: int = 0,
) -> tuple[list[int], list[int]]:
    """Time ``first(i)`` and ``second(i)`` one for one; returns both lists of nanoseconds.

    Each callable runs one measured operation and returns its duration. Which of the two
    goes first alternates, so neither always runs on a path the other has just warmed; the
    first ``warmup`` pairs are discarded.
    """
    first_ns: list[int] = []
    second_ns: list[int] = []
    for i in range(warmup + iterations):
        if i % 2:
            a = await first(i)
            b = await second(i)
        else:
            b = await second(i)
            a = await first(i)
        if i >= warmup:
            first_ns.append(a)
            second_ns.append(b)
    return first_ns, second_ns


# --- samples for run_all's charts ------------------------------------------------------

SAMPLES_ENV = "ATEAM_BENCH_SAMPLES"
"""Directory where :func:`save_samples` writes; ``run_all.py`` sets it for its scripts."""


def save_samples(name: str, samples_ms: Sequence[float]) -> Path | None:
    """Hand the samples behind a distribution to ``run_all.py`` (``$ATEAM_BENCH_SAMPLES``).

    Writes ``<dir>/<name>.json`` (``{"name", "unit": "ms", "samples"}``) when the variable
    is set and does nothing otherwise, so a script run on its own leaves no file behind.
    Returns the path written.
    """
    import json

    where = os.environ.get(SAMPLES_ENV)
    if not where:
        return None
    path = Path(where) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"name": name, "unit": "ms", "samples": [round(v, 6) for v in samples_ms]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body))
    tmp.replace(path)
    return path


# --- report ----------------------------------------------------------------------------


@dataclass
class Row:
    """One measure beside its raw baseline and its SPEC §13 target."""

    name: str
    """Machine name (``rpc_status_p50``)."""
    label: str
    """Human label (``rpc status p50``)."""
    value: float
    unit: str
    baseline: float | None
    baseline_label: str
    target: str
    """As printed: ``<=4x``, ``<=5 ms``, ``>=20000 ev/s``."""
    ok: bool | None
    """``None`` = informational, no target."""
    higher_is_better: bool = False

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline == 0 or math.isnan(self.baseline):
            return None
        return self.value / self.baseline


def paired_rows(
    name: str,
    label: str,
    measured_ms: Sequence[float],
    base_label: str,
    base_ms: Sequence[float],
    *,
    p99_at_most_ms: float | None = None,
) -> list[Row]:
    """The p99 and p50 rows of interleaved samples, each beside the same percentile of
    the raw baseline's. ``p99_at_most_ms`` gives the p99 a target; otherwise both rows
    are informational."""
    rows = []
    for q in (99, 50):
        value = percentile(measured_ms, q)
        bound = p99_at_most_ms if q == 99 else None
        rows.append(
            Row(
                f"{name}_p{q}",
                f"{label} p{q}",
                value,
                "ms",
                percentile(base_ms, q),
                f"{base_label} p{q}",
                "(info)" if bound is None else f"<={bound:g} ms",
                None if bound is None else value <= bound,
            )
        )
    return rows


def banner(script: str, tcp: bool) -> None:
    """The first line of a script's output: what it ran on."""
    print(f"{script}: {environment()}; transport {'tcp' if tcp else 'unix socket'}")


Measure = Callable[[str, int, int], Coroutine[Any, Any, tuple[list[Row], list[str]]]]
"""A run against a server's URL with so many timed iterations after so many warm-up."""


def serve_one(
    script: str, doc: str, title: str, run: Measure, quick: tuple[int, int], full: tuple[int, int]
) -> int:
    """``main`` of a script that runs one measure against a fresh server and reports it."""
    args = parser(doc).parse_args()
    iterations, warmup = quick if args.quick else full
    banner(script, args.tcp)
    with RedisServer(tcp=args.tcp) as server:
        rows, notes = asyncio.run(run(server.url, iterations, warmup))
    report(title, rows, notes)
    return 0


RENEW_BEATS_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, key in ipairs(KEYS) do
  local ids = redis.call('HKEYS', key)
  for i = 1, #ids do redis.call('HSET', key, ids[i], now) end
end
return now
"""
"""Every agent of the heartbeat hashes in KEYS beats now: a simulated team stays
connected without its agents' processes (whose objects are not the measurer's to carry)."""


def fmt(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "ev/s":
        return f"{value:,.0f} {unit}"
    if abs(value) >= 100:
        return f"{value:.0f} {unit}"
    if abs(value) >= 10:
        return f"{value:.1f} {unit}"
    return f"{value:.3f} {unit}" if abs(value) < 1 else f"{value:.2f} {unit}"


def render(rows: Sequence[Row]) -> str:
    width = max([34, *(len(r.label) for r in rows)])
    header = (
        f"{'measure':<{width}} {'value':>14}   {'baseline (raw)':<34} {'ratio':>8}   "
        f"{'target':<14} ok"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        base = f"{r.baseline_label} {fmt(r.baseline, r.unit)}" if r.baseline is not None else "-"
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        ok = "-" if r.ok is None else ("yes" if r.ok else "NO")
        value = fmt(r.value, r.unit)
        lines.append(
            f"{r.label:<{width}} {value:>14}   {base:<34} {ratio:>8}   {r.target:<14} {ok}"
        )
    return "\n".join(lines)


def _token(value: object) -> str:
    return str(value).replace(" ", "_")


def bench_line(r: Row) -> str:
    ratio = f"{r.ratio:.4g}" if r.ratio is not None else "-"
    base = f"{r.baseline:.6g}" if r.baseline is not None else "-"
    ok = "-" if r.ok is None else ("yes" if r.ok else "no")
    return (
        f"BENCH name={r.name} value={r.value:.6g} unit={_token(r.unit)} baseline={base} "
        f"baseline_label={_token(r.baseline_label)} ratio={ratio} target={_token(r.target)} "
        f"ok={ok} label={_token(r.label)}"
    )


def report(title: str, rows: Sequence[Row], notes: Sequence[str] = ()) -> None:
    print()
    print(f"== {title} ==")
    print(render(rows))
    for note in notes:
        print(f"  note: {note}")
    for r in rows:
        print(bench_line(r))
    sys.stdout.flush()


def redis_server_version() -> str:
    """Version of the ``redis-server`` the benchmarks start (``?`` when it does not say)."""
    server = find_redis_server()
    words = subprocess.run([server, "--version"], capture_output=True, text=True).stdout.split()
    return next((w[2:] for w in words if w.startswith("v=")), "?")


def redis_py_version() -> str:
    """``redis-py 8.1.0 (hiredis 3.2.1)``: the client library and its reply parser."""
    import redis

    try:
        import hiredis

        parser_name = f"hiredis {hiredis.__version__}"
    except ImportError:
        parser_name = "pure-python parser"
    return f"redis-py {redis.__version__} ({parser_name})"


def environment() -> str:
    return (
        f"python {sys.version.split()[0]}, {redis_py_version()}, "
        f"redis-server {redis_server_version()}, {os.cpu_count()} cpus, "
        f"load average {os.getloadavg()[0]:.2f}"
    )


def info_commandstats(client: object) -> dict[str, int]:
    """``{command: calls}`` from INFO commandstats (sync client)."""
    raw = client.info("commandstats")  # type: ignore[attr-defined]
    out: dict[str, int] = {}
    for key, value in raw.items():
        name = key.removeprefix("cmdstat_")
        out[name] = int(value["calls"]) if isinstance(value, dict) else 0
    return out


def diff_stats(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


def perf_ns() -> int:
    return time.perf_counter_ns()


# --- a real agent process --------------------------------------------------------------


class AgentProcess:
    """``python -m ateam agent --project P --name N --redis URL --no-repl`` in a sandbox.

    ``home`` becomes ``ATEAM_HOME`` (so state lives in the temp dir) and ``work`` the
    agent's cwd (an empty directory, so no ``.ateam/`` of the checkout is picked up).
    """

    def __init__(self, url: str, project: str, name: str, home: Path, work: Path) -> None:
        self.url = url
        self.project = project
        self.name = name
        self.home = home
        self.work = work
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home / f"agent-{project}-{name}.log"

    @property
    def id(self) -> str:
        return f"{self.project}/{self.name}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "ateam",
            "agent",
            "--project",
            self.project,
            "--name",
            self.name,
            "--redis",
            self.url,
            "--no-repl",
        ]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ATEAM_")}
        env["ATEAM_HOME"] = str(self.home)
        env["ATEAM_RUNTIME_DIR"] = str(self.home / "run")
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        return env

    def spawn(self) -> int:
        """Start the process; returns ``perf_counter_ns`` taken just before ``Popen``."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        t0 = time.perf_counter_ns()
        self.proc = subprocess.Popen(
            self.command(),
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            cwd=self.work,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()
        return t0

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


async def wait_serving(
    rpc: object, agent: str, *, timeout: float = 30.0, proc: AgentProcess | None = None
) -> int:
    """Call ``status`` until the agent answers; returns ``perf_counter_ns`` of the answer.

    ``agent.not_found`` (no liveness key yet) is retried every 2 ms; a call that reaches a
    dead agent's request list simply waits there until the next instance serves it.
    """
    import asyncio

    from ateam.errors import AgentNotFound, RpcTimeout

    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.proc is not None and proc.proc.poll() is not None:
            raise RuntimeError(
                f"agent {agent} exited with {proc.proc.returncode}:\n{proc.log_text()[-2000:]}"
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"agent {agent} did not serve within {timeout} s")
        try:
            await rpc.call(agent, "status", timeout=min(1.0, remaining))  # type: ignore[attr-defined]
            return time.perf_counter_ns()
        except AgentNotFound:
            await asyncio.sleep(0.002)
        except RpcTimeout:
            pass


class HostCpu:
    """Share of all cores busy between ``start()`` and ``stop()`` (Linux /proc/stat).

    It counts every process on the host, including anything else running beside the
    benchmark, which is the point: a saturated host explains a bad tail.
    """

    def __init__(self) -> None:
        self._start: tuple[int, int] | None = None
        self.busy = float("nan")

    @staticmethod
    def _sample() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as fh:
                fields = [int(x) for x in fh.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    def start(self) -> HostCpu:
        self._start = self._sample()
        return self

    def stop(self) -> float:
        end = self._sample()
        if self._start is not None and end is not None and end[0] > self._start[0]:
            total = end[0] - self._start[0]
            self.busy = 1 - (end[1] - self._start[1]) / total
        return self.busy


class GcPauses:
    """Records how long each cyclic-GC collection of generation 2 stops the process."""

    def __init__(self) -> None:
        import gc

        self._gc = gc
        self._t0 = 0.0
        self.gen2_ms: list[float] = []

    def _cb(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif info.get("generation") == 2:
            self.gen2_ms.append((time.perf_counter() - self._t0) * 1e3)

    def __enter__(self) -> GcPauses:
        self._gc.callbacks.append(self._cb)
        return self

    def __exit__(self, *exc: object) -> None:
        self._gc.callbacks.remove(self._cb)

    def summary(self) -> dict[str, float]:
        return {"gc2_n": len(self.gen2_ms), "gc2_max_ms": max(self.gen2_ms, default=0.0)}
