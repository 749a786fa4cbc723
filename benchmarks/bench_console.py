"""The panes console under load: keystroke echo, CPU and memory.

SPEC §13:

* console with 200 agents streaming 10 000 events/s in all — stays interactive
  (keystroke echo ≤ 100 ms), CPU ≤ 50 % of one core;
* console fed 50 MB of tool output — memory bounded by its scrollback setting,
  keystroke echo ≤ 100 ms;
* (issue 14) a console with a silent team costs nothing: CPU ≤ 3 % of a core with 200
  and with 1 000 registered, heartbeating agents; with 1 000 agents keystroke echo p99
  ≤ 100 ms;
* (issue 28 §4) the same with 10 000 agents: silent CPU ≤ 3 %, echo p99 ≤ 100 ms (full
  runs only: registering 10 000 agents takes longer than a ``--quick`` run may).

The console is the real Textual app (:class:`ateam.console.panes.ConsoleApp`) run
headless (``App.run_test``, 160x48) in this process, against a private redis-server.
Everything else runs in other processes, so this process's CPU time is the console's.

Keystroke echo. A key is posted to the app the way a terminal driver does it
(``driver.send_message(Key("x"))``, focus on the command bar) and the time is taken
when the command bar renders its line with the new character (the ``Input`` widget's
``render_line`` for the frame that shows it, wrapped for the run): press → visible on
the next composed frame. One key every ~40 ms (a fast typist); the bar is cleared every
30 keys. Every key is measured (a key not shown within 5 s counts as 5 s).
``pilot.press`` is not used for timing: it waits for the whole process to go idle,
which never happens during a flood.

(a) Flood. A real ``ateam agent`` (the ``scripted`` model, a 1 000 000-token window so
it never summarises, as in ``bench_pty.py``) runs ``os.exec`` of ``yes '<88-byte build
line>' | head -c N`` (``--mb``, default 50). The console attaches to it and sends the
task by typing it; keys are measured from the task's ``tool.start`` until its
``tool.end`` has been received and every received line drawn. Baseline, same run: the
same keys with the console attached to the idle agent just before. Memory: the
process's RSS before the flood and its peak (``VmHWM``, reset first through
``/proc/self/clear_refs``) during it; target: growth ≤ 25 MB, half the flood, so that
the bound is the scrollback (``--scrollback``, default the console's 5 000 lines), not
the amount printed.

(b) 200 and 1 000 agents. The console starts on an empty bus; its CPU over a quiet
window (5 s, 2 with ``--quick``) is the baseline of an idle console. Publisher processes
(``--pub-procs``, default 2) then register the agents (each joins with its
``Heartbeat``, then renews every 3 s as a beat does: its ``last_seen`` and its alive key,
500 agents to a pipeline; a note says when a round took longer than the 10 s TTL: the
console then saw a team flapping, not the team meant) and
stream ``token`` events with ``EventPublisher`` at 10 000 events/s in all (a newline
every 8th token), once told to. The console lists them all, is attached to one and
tails 3 more. Silent CPU: the console's CPU over a quiet window with every agent
registered and beating, nobody typing (target ≤ 3 %: an idle console costs nothing,
however large the team), beside the empty-bus baseline. Then keys for a quiet window
(the echo baseline, and the CPU of typing at a silent team), then the load: keys are
measured for ``--seconds`` (default 20) and the console's CPU is this process's CPU time
over that window ÷ wall time, beside the typing-at-a-silent-team baseline.

    python benchmarks/bench_console.py [--quick] [--tcp] [--mb N] [--seconds S]
        [--scrollback N] [--only flood|agents]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    AgentProcess,
    HostCpu,
    RedisServer,
    Row,
    banner,
    parser,
    percentile,
    report,
    temp_dir,
)
from bench_pty import AGENT_ID, LINE, exec_turns, write_project

from ateam import _gc
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.events import Event, EventType
from ateam.bus.keys import Keys
from ateam.bus.publisher import EventPublisher
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.console.controller import ConsoleController, ConsoleView
from ateam.console.panes import DEFAULT_SCROLLBACK, ConsoleApp
from ateam.constants import HEARTBEAT_INTERVAL_S, HEARTBEAT_TTL_S, LIVENESS_CHECK_S

SIZE = (160, 48)
AGENTS = 200
MANY_AGENTS = 1_000
HUGE_AGENTS = 10_000
RATE = 10_000
MB = 1_000_000
KEY_GAP_S = 0.04
KEY_TIMEOUT_S = 5.0
ECHO_TARGET_MS = 100.0
CPU_TARGET_PCT = 50.0
SILENT_TARGET_PCT = 3.0
QUIET_S = 5.0
"""Each quiet window (empty bus, silent team, typing at it); 2 s with ``--quick``."""
QUIET_S_QUICK = 2.0
MEM_TARGET_MB = 25.0
SIM_PROJECT = "sim"
BEAT_BATCH = 500
"""Agents whose renewals a publisher sends in one pipeline.

A renewal is what :meth:`Heartbeat.beat` writes for an agent whose entry did not change
(``last_seen`` and the alive key). Sent by ``Heartbeat`` itself, one agent at a time,
the 5 000 agents of one publisher cost it two round trips and an encoded entry each:
with the events it also publishes, a round took 10-26 s on this host, past the TTL."""


def sim_agent(i: int) -> str:
    return f"{SIM_PROJECT}/a{i:03d}"


# --- memory ----------------------------------------------------------------------------


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def rss_mb() -> float:
    return _status_kb("VmRSS") / 1024


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux ≥ 4.0); False if it could not be."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_mb() -> float:
    kb = _status_kb("VmHWM")
    if not kb:
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024


# --- the console and its keystroke probe -------------------------------------------------


class KeyProbe:
    """Posts keys into the command bar and times them until the bar is drawn with them."""

    def __init__(self, app: ConsoleApp) -> None:
        from textual.widgets import Input

        self.app = app
        self.input = app.query_one("#command", Input)
        self.want: str | None = None
        self.shown = asyncio.Event()
        self.t_shown = 0.0
        original = self.input.render_line

        def render_line(y: int) -> Any:
            strip = original(y)
            if y == 0 and self.want is not None and self.input.value == self.want:
                if not self.shown.is_set():
                    self.t_shown = time.perf_counter()
                    self.shown.set()
            return strip

        # An instance attribute: the compositor looks ``render_line`` up on the widget.
        self.input.render_line = render_line  # type: ignore[method-assign]

    async def press(self) -> float:
        """One key; milliseconds from posting it to the frame that shows it."""
        from textual import events

        if len(self.input.value) >= 30:
            self.input.value = ""
            await asyncio.sleep(KEY_GAP_S)
        if not self.input.has_focus:  # focusing again would draw a frame of its own
            self.input.focus()
        self.input.cursor_position = len(self.input.value)
        self.want = self.input.value + "x"
        self.shown.clear()
        driver = self.app._driver
        assert driver is not None
        t0 = time.perf_counter()
        driver.send_message(events.Key("x", "x"))
        try:
            await asyncio.wait_for(self.shown.wait(), KEY_TIMEOUT_S)
        except TimeoutError:
            self.want = None
            return KEY_TIMEOUT_S * 1000
        self.want = None
        return (self.t_shown - t0) * 1000

    async def measure(self, until: Callable[[], bool], *, limit: float) -> list[float]:
        """Keys every :data:`KEY_GAP_S` until ``until()`` or ``limit`` seconds."""
        samples: list[float] = []
        deadline = time.monotonic() + limit
        while not until() and time.monotonic() < deadline:
            samples.append(await self.press())
            await asyncio.sleep(KEY_GAP_S)
        return samples


@dataclass
class Seen:
    """What the console's view was given, per agent (a wrapper around ``view.event``)."""

    output_bytes: int = 0
    tool_starts: int = 0
    tool_ends: int = 0
    task_ends: int = 0
    events: int = 0
    types: dict[str, int] = field(default_factory=dict)


def watch_view(app: ConsoleApp, agent: str) -> Seen:
    seen = Seen()
    view = app.view
    original = view.event

    def event(ev: Event) -> None:
        seen.events += 1
        if ev.agent == agent:
            if ev.type == EventType.TOOL_OUTPUT:
                text = ev.data.get("text")
                seen.output_bytes += len(text) if isinstance(text, str) else 0
            elif ev.type == EventType.TOOL_START:
                seen.tool_starts += 1
            elif ev.type == EventType.TOOL_END:
                seen.tool_ends += 1
            elif ev.type == EventType.TASK_END:
                seen.task_ends += 1
        original(ev)

    view.event = event  # type: ignore[method-assign]
    return seen


def make_app(url: str, scrollback: int) -> ConsoleApp:
    target = RedisTarget(url, "bench")

    def factory(view: ConsoleView) -> ConsoleController:
        return ConsoleController(target, view, session=f"console:bench:{os.getpid()}")

    return ConsoleApp(factory, scrollback=scrollback)


async def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.02)


def echo_rows(prefix: str, what: str, loaded: list[float], idle: list[float]) -> list[Row]:
    rows = []
    for q in (50, 99):
        value, base = percentile(loaded, q), percentile(idle, q)
        rows.append(
            Row(
                name=f"{prefix}_echo_p{q}",
                label=f"{what} keystroke echo p{q}",
                value=value,
                unit="ms",
                baseline=base,
                baseline_label=f"idle p{q}",
                target=f"<={ECHO_TARGET_MS:.0f} ms",
                ok=value <= ECHO_TARGET_MS,
            )
        )
    return rows


def cpu_row(name: str, label: str, measured: tuple[float, float, str], target: float) -> Row:
    """A console CPU row: ``measured`` is (value, baseline, baseline label), in % of a core."""
    value, baseline, baseline_label = measured
    return Row(
        name=name,
        label=label,
        value=value,
        unit="% core",
        baseline=baseline,
        baseline_label=baseline_label,
        target=f"<={target:.0f} %",
        ok=value <= target,
    )


# --- (a) the flood -------------------------------------------------------------------------


async def flood(url: str, tmp: Path, nbytes: int, scrollback: int, quick: bool) -> tuple:
    root = tmp / "project"
    cmd = f"yes '{LINE}' | head -c {nbytes}"
    write_project(root, exec_turns("echo warm-up") + exec_turns(cmd))
    agent = AgentProcess(url, "bench", "zeus", tmp / "home", root)
    agent.spawn()
    rows: list[Row] = []
    notes: list[str] = []
    app = make_app(url, scrollback)
    try:
        async with app.run_test(size=SIZE):
            await asyncio.wait_for(app.ready.wait(), 20)
            controller = app.controller
            assert controller is not None
            await wait_for(lambda: AGENT_ID in controller.known, 30, f"{AGENT_ID} to register")
            seen = watch_view(app, AGENT_ID)
            probe = KeyProbe(app)
            await app.run_line(f"/attach {AGENT_ID}")
            await app.run_line("warm up")
            await wait_for(lambda: seen.task_ends >= 1, 60, "the warm-up task to end")
            await wait_for(lambda: not app.view.pending, 10, "the warm-up to be drawn")
            idle = await probe.measure(lambda: False, limit=2 if quick else 5)

            rss0 = rss_mb()
            peak_reset = reset_peak()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            host = HostCpu().start()
            await app.run_line(f"print {nbytes // MB} MB of build output")
            await wait_for(lambda: seen.tool_starts >= 2, 60, "the flood to start")
            t_start = time.perf_counter()

            def finished() -> bool:
                return seen.tool_ends >= 2 and not app.view.pending

            loaded = await probe.measure(finished, limit=600)
            await wait_for(finished, 600, "the flood to be received and drawn")
            flood_s = time.perf_counter() - t_start
            cpu = time.process_time() - cpu0
            wall = time.perf_counter() - wall0
            busy = host.stop()
            peak = peak_mb() if peak_reset else float("nan")
            rss1 = rss_mb()
            log_lines = len(app.query_one("#stream").lines)  # type: ignore[attr-defined]
            buffered = app.view.buffered_chars()
            received = seen.output_bytes
            await wait_for(lambda: seen.task_ends >= 2, 60, "the flood task to end")
    finally:
        agent.stop()
    rows += echo_rows("flood", f"{nbytes // MB} MB flood", loaded, idle)
    growth = peak - rss0
    rows.append(
        Row(
            name="flood_rss_growth",
            label=f"{nbytes // MB} MB flood console RSS growth",
            value=growth,
            unit="MB",
            baseline=None,
            baseline_label="",
            target=f"<={MEM_TARGET_MB:.0f} MB",
            ok=growth <= MEM_TARGET_MB if peak_reset else None,
        )
    )
    notes.append(
        f"flood: {received / MB:.1f} of {nbytes / MB:.0f} MB received by the console in "
        f"{flood_s:.1f} s ({received / MB / flood_s:.1f} MB/s); {len(loaded)} keys during it, "
        f"{len(idle)} idle; max echo {max(loaded, default=0):.1f} ms "
        f"(idle {max(idle, default=0):.1f} ms)"
    )
    notes.append(
        f"flood memory: scrollback {scrollback} lines; RSS {rss0:.1f} MB before, peak "
        f"{peak:.1f} MB, {rss1:.1f} MB after; stream widget {log_lines} lines, view buffers "
        f"{buffered} chars; "
        f"console CPU {cpu / wall * 100:.0f} % of a core, host {busy * 100:.0f} % busy"
    )
    return rows, notes


# --- (b) 200 agents --------------------------------------------------------------------------


async def renew(client: Any, keys: Keys, beats: list[Heartbeat]) -> None:
    """Renew ``beats``' agents as :meth:`Heartbeat.beat` does for an unchanged entry, in
    one pipeline; an agent whose beat was gone (forgotten) joins again through its own."""
    sec, usec = await client.time()
    now_ms = sec * 1000 + usec // 1000
    pipe = client.pipeline(transaction=False)
    for b in beats:
        pipe.hset(keys.heartbeats(SIM_PROJECT), b.entry.id, now_ms)
        pipe.set(keys.alive(b.entry.id), b"1", px=int(HEARTBEAT_TTL_S * 1000))
    replies = await pipe.execute()
    for b, added in zip(beats, replies[::2], strict=True):
        if added:  # as the agent's own beat does then: a join (entry, notice, project)
            await Heartbeat(client, keys, b.entry).beat()


async def publish(url: str, lo: int, hi: int, rate: int, seconds: float) -> dict[str, Any]:
    """Child role: agents ``lo..hi-1`` registered and streaming ``rate`` events/s together."""
    keys = Keys()
    client = make_client(RedisTarget(url, "bench"))
    # The beats have a pool of their own: at most BEAT_BATCH connections, never one the
    # publishers wait for (nor the other way round: 1 000 at most per pool).
    beat_client = make_client(RedisTarget(url, "bench"))
    agents = [sim_agent(i) for i in range(lo, hi)]
    beats = [
        Heartbeat(
            beat_client,
            keys,
            AgentEntry(
                id=a,
                name=a.split("/")[1],
                project=SIM_PROJECT,
                model="sim",
                host="bench",
                state="busy",
            ),
        )
        for a in agents
    ]
    pubs = [EventPublisher(client, keys, a) for a in agents]
    for p in pubs:
        await p.start()

    # As agents beat from their own processes: every HEARTBEAT_INTERVAL_S. A round that
    # outlasts the TTL shows the console whole blocks of the team lapsing and coming
    # back (thousands of rows changing), which no team of live agents does.
    gap = [0.0]
    joined = time.monotonic()  # the first agents' beat: their silence counts from here
    for k in range(0, len(beats), 32):  # joins: entry, join notice, change log
        await asyncio.gather(*(b.beat() for b in beats[k : k + 32]))

    async def beat_loop() -> None:
        done = joined
        while True:
            await asyncio.sleep(max(0.0, HEARTBEAT_INTERVAL_S - (time.monotonic() - done)))
            for k in range(0, len(beats), BEAT_BATCH):
                await renew(beat_client, keys, beats[k : k + BEAT_BATCH])
            gap[0] = max(gap[0], time.monotonic() - done)
            done = time.monotonic()

    beater = asyncio.create_task(beat_loop())
    await asyncio.sleep(0.2)
    print("READY", flush=True)
    line = await asyncio.to_thread(sys.stdin.readline)  # "GO", after the silent baseline
    if line.strip() != "GO":
        beater.cancel()
        return {"sent": 0}
    n = len(agents)
    total = int(rate * seconds)
    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - t0) * rate) + 1)
        while sent < due:
            word = f"w{sent % 1000:03d}"
            text = word + ("\n" if (sent // n) % 8 == 7 else " ")
            pubs[sent % n].emit("token", text=text)
            sent += 1
        await asyncio.sleep(0.001)
    elapsed = time.perf_counter() - t0
    for p in pubs:
        await p.flush(10)
        await p.aclose()
    beater.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await beater
    for b in beats:
        await b.leave()
    await client.aclose()
    await beat_client.aclose()
    return {
        "sent": sent,
        "rate": sent / elapsed,
        "cpu_s": time.process_time(),
        "beat_gap_s": gap[0],
    }


def spawn_publisher(spec: dict[str, Any]) -> subprocess.Popen[str]:
    from _common import _die_with_parent

    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )


async def idle_cpu(seconds: float) -> float:
    """This process's CPU over ``seconds`` of doing nothing itself, in % of a core."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    return (time.process_time() - cpu0) / (time.perf_counter() - wall0) * 100


async def swarm(
    url: str, agents: int, seconds: float, procs: int, scrollback: int, quick: bool
) -> tuple:
    """The console with ``agents`` simulated agents: empty, silent, typed at, then loaded."""
    prefix = f"agents{agents}"
    per = agents // procs
    specs = [
        {
            "url": url,
            "lo": i * per,
            "hi": agents if i == procs - 1 else (i + 1) * per,
            "rate": RATE // procs,
            "seconds": seconds + 2,
        }
        for i in range(procs)
    ]
    window = QUIET_S_QUICK if quick else QUIET_S
    rows: list[Row] = []
    notes: list[str] = []
    pubs: list[subprocess.Popen[str]] = []
    app = make_app(url, scrollback)
    try:
        async with app.run_test(size=SIZE):
            await asyncio.wait_for(app.ready.wait(), 20)
            controller = app.controller
            assert controller is not None
            await asyncio.sleep(1.0)  # the first frames are drawn
            empty_cpu = await idle_cpu(window)  # baseline: the same console, no agents
            pubs = [spawn_publisher(s) for s in specs]
            for p in pubs:
                assert p.stdout is not None
                if (await asyncio.to_thread(p.stdout.readline)).strip() != "READY":
                    raise RuntimeError("a publisher did not get ready")
            await wait_for(
                lambda: len(controller.known) >= agents,
                max(60, agents / 50),
                f"{agents} agents to register",
            )
            seen = watch_view(app, sim_agent(0))
            probe = KeyProbe(app)
            await app.run_line(f"/attach {sim_agent(0)}")
            for i in (1, 2, 3):
                await app.run_line(f"/tail {sim_agent(i)}")
            await wait_for(
                lambda: app.query_one("#agents").option_count >= agents,  # type: ignore[attr-defined]
                max(10, agents / 500),
                f"the agent list to show {agents}",
            )
            # The first drawing of the whole list is over, and the first liveness check
            # after the joins, which freezes what they brought (ateam/_gc.py): once.
            await asyncio.sleep(LIVENESS_CHECK_S + 1.0)
            silent_cpu = await idle_cpu(window)  # heartbeating, silent, nobody typing
            cpu0, wall0 = time.process_time(), time.perf_counter()
            idle = await probe.measure(lambda: False, limit=window)
            typed_cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0) * 100
            for p in pubs:
                assert p.stdin is not None
                p.stdin.write("GO\n")
                p.stdin.flush()
            await asyncio.sleep(1.0)  # the stream reaches its rate
            events0 = seen.events
            host = HostCpu().start()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            loaded = await probe.measure(lambda: False, limit=seconds)
            cpu = time.process_time() - cpu0
            wall = time.perf_counter() - wall0
            busy = host.stop()
            received = seen.events - events0
            listed = app.query_one("#agents").option_count  # type: ignore[attr-defined]
            log_lines = len(app.query_one("#stream").lines)  # type: ignore[attr-defined]
        results = []
        for p in pubs:
            out, _ = p.communicate(timeout=60)
            for line in out.splitlines():
                if line.startswith("RESULT "):
                    results.append(json.loads(line[7:]))
    finally:
        for p in pubs:
            if p.poll() is None:
                p.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(5)
            if p.poll() is None:
                p.kill()
                p.wait()
    cpu_pct = cpu / wall * 100
    rows += echo_rows(prefix, f"{agents} agents {RATE // 1000}k ev/s", loaded, idle)
    rows.append(
        cpu_row(
            f"{prefix}_console_cpu",
            f"{agents} agents {RATE // 1000}k ev/s console CPU",
            (cpu_pct, typed_cpu, "silent, typing"),
            CPU_TARGET_PCT,
        )
    )
    rows.append(
        cpu_row(
            f"{prefix}_silent_cpu",
            f"{agents} agents silent console CPU",
            (silent_cpu, empty_cpu, "no agents"),
            SILENT_TARGET_PCT,
        )
    )
    rate = sum(r.get("rate", 0.0) for r in results)
    if len(results) != len(pubs):
        raise RuntimeError(f"{len(pubs) - len(results)} publisher(s) reported no result")
    beat_gap = max(r["beat_gap_s"] for r in results)
    flapped = " > the TTL: the team flapped" if beat_gap > HEARTBEAT_TTL_S else ""
    notes.append(
        f"{agents} agents: publishers offered {rate:,.0f} ev/s in all ({len(results)} "
        f"processes, the longest heartbeat round {beat_gap:.1f} s{flapped}); the console received "
        f"{received / wall:,.0f} ev/s over {wall:.1f} s, "
        f"listed {listed} agents, attached to 1 and tailed 3 ({log_lines} stream lines); "
        f"{len(loaded)} keys, {len(idle)} silent; max echo {max(loaded, default=0):.1f} ms; "
        f"host {busy * 100:.0f} % busy"
    )
    notes.append(
        f"{agents} agents silent: console CPU {silent_cpu:.1f} % of a core over {window:g} s "
        f"with nobody typing (the console alone on an empty bus: {empty_cpu:.1f} %), "
        f"{typed_cpu:.1f} % with a key every {KEY_GAP_S * 1000:.0f} ms"
    )
    return rows, notes


# --- main ------------------------------------------------------------------------------------


def child_main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    res = asyncio.run(publish(spec["url"], spec["lo"], spec["hi"], spec["rate"], spec["seconds"]))
    print("RESULT " + json.dumps(res), flush=True)
    return 0


async def run(args: Any) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    nbytes = int((5 if args.quick and args.mb == 50 else args.mb) * MB)
    seconds = 4.0 if args.quick and args.seconds == 20 else args.seconds
    with RedisServer(tcp=args.tcp) as server, temp_dir() as tmp:
        # The console keeps its offsets under ATEAM_HOME: keep them in the temp dir.
        os.environ["ATEAM_HOME"] = str(tmp / "console-home")
        if args.only in (None, "flood"):
            r, n = await flood(server.url, tmp, nbytes, args.scrollback, args.quick)
            rows += r
            notes += n
        teams = (AGENTS, MANY_AGENTS) if args.quick else (AGENTS, MANY_AGENTS, HUGE_AGENTS)
        if args.teams:
            teams = tuple(int(size) for size in args.teams.split(","))
        for agents in teams if args.only in (None, "agents") else ():
            await server_flush(server.url)
            r, n = await swarm(
                server.url, agents, seconds, args.pub_procs, args.scrollback, args.quick
            )
            rows += r
            notes += n
    return rows, notes


async def server_flush(url: str) -> None:
    """A clean bus between the two parts (the flood agent's registry entry and stream)."""
    client = make_client(RedisTarget(url, "bench"))
    await client.flushall()
    await client.aclose()


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--mb", type=float, default=50, help="MB printed in the flood (default 50)")
    p.add_argument(
        "--seconds",
        type=float,
        default=20,
        help="measured window under load, per team (200, then 1 000 agents; default 20)",
    )
    p.add_argument(
        "--scrollback",
        type=int,
        default=DEFAULT_SCROLLBACK,
        help=f"the console's scrollback in lines (default {DEFAULT_SCROLLBACK})",
    )
    p.add_argument("--pub-procs", type=int, default=2, help="publisher processes (default 2)")
    p.add_argument("--only", choices=("flood", "agents"))
    p.add_argument("--teams", default="", help="team sizes of the agents part (200,1000,10000)")
    args = p.parse_args()
    banner("bench_console", args.tcp)
    # The collector's policy of an ``ateam console`` process (ateam/_gc.py): what its
    # start made is frozen, as are the entries its listings keep. A console measured
    # without it walked every object at each full collection, as no real one does.
    _gc.hold()
    _gc.settle()
    rows, notes = asyncio.run(run(args))
    report("Console under load (SPEC §13)", rows, notes)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        sys.exit(child_main(sys.argv[2:]))
    sys.exit(main())
