"""Run every benchmark script, print one summary table and keep the results.

Each script runs in its own process (each starts and removes its own redis-server); its
full output is shown as it runs, then the ``BENCH ...`` lines of all of them are
collected into one table. The run is written to ``--out`` (default
``benchmarks/results``): ``latest.json``, ``latest.md`` and, with the ``bench`` extra
(matplotlib), PNG charts of the latency distributions the scripts saved. Only a full
run (every script, no ``--quick``, no ``--tcp``) replaces the committed results by
default: a partial one writes only where ``--out`` says.

    python benchmarks/run_all.py [--quick] [--tcp] [--only rpc,events,...] [--out DIR]

Exit status: 0 every target met, 1 some target missed, 2 a script failed to run or
printed no measure (or run_all itself failed). Targets are reported, not asserted: a
smoke test treats 1 as success.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from _common import SAMPLES_ENV, Row, environment, render, temp_dir
from _results import (
    INSTALL_HINT,
    ScriptRun,
    draw_charts,
    load_samples,
    remove_stale_charts,
    run_environment,
    status_of,
    write_json,
    write_markdown,
)

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "rpc", "events", "queue", "ps", "ownership", "board", "context", "restart", "redact", "pty",
    "console", "acp", "notices", "mailbox", "agent_weight", "cli", "snapshot", "owner",
]  # fmt: skip


def parse_bench(line: str) -> Row:
    fields: dict[str, str] = {}
    for token in line.split()[1:]:
        key, _, value = token.partition("=")
        fields[key] = value

    def num(key: str) -> float | None:
        value = fields.get(key, "-")
        return None if value == "-" else float(value)

    def text(key: str) -> str:
        return fields.get(key, "").replace("_", " ")

    ok = fields.get("ok", "-")
    return Row(
        name=fields["name"],
        label=text("label") or fields["name"],
        value=num("value") or 0.0,
        unit=fields.get("unit", "").replace("_", " "),
        baseline=num("baseline"),
        baseline_label=text("baseline_label"),
        target=text("target"),
        ok=None if ok == "-" else ok == "yes",
    )


def run_script(name: str, cmd: Sequence[str], *, timeout: float, env: dict[str, str]) -> ScriptRun:
    """Run one script, echoing its output, and collect its ``BENCH`` rows."""
    run = ScriptRun(name)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=HERE.parent, env=env)
    assert proc.stdout is not None
    # A hung script is killed at its deadline even if it prints nothing.
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        for line in proc.stdout:
            print(line, end="", flush=True)
            if line.startswith("BENCH "):
                try:
                    run.rows.append(parse_bench(line))
                except (KeyError, ValueError) as exc:
                    print(f"run_all: unreadable BENCH line ({exc!r})", flush=True)
        run.code = proc.wait()
    finally:
        killer.cancel()
    run.seconds = time.monotonic() - t0
    return run


def write_results(
    out: Path, env: dict[str, object], runs: list[ScriptRun], samples_dir: Path
) -> None:
    """``latest.json``, ``latest.md`` and the charts, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    samples = load_samples(samples_dir)
    rows = [r for run in runs for r in run.rows]
    drawn = draw_charts(out, env, rows, samples)
    removed = remove_stale_charts(out, drawn or [])
    written = [
        write_json(out, env, runs, samples, drawn or []),
        write_markdown(out, env, runs, drawn or []),
    ]
    written += [out / name for name in drawn or []]
    print(f"  results: {', '.join(str(p) for p in written)}")
    if drawn is None:
        print(f"  {INSTALL_HINT}")
    if removed:
        print(f"  removed charts of an earlier run: {', '.join(removed)}")


def main(argv: Sequence[str] | None = None, *, scripts_dir: Path = HERE) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="pass --quick to every script")
    p.add_argument("--tcp", action="store_true", help="pass --tcp to every script")
    p.add_argument("--only", default="", help=f"comma-separated subset of {','.join(SCRIPTS)}")
    p.add_argument("--timeout", type=float, default=600, help="seconds allowed per script")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where latest.json, latest.md and the charts go (default benchmarks/results, "
        "for a full run only)",
    )
    args = p.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or SCRIPTS
    unknown = [s for s in chosen if not (scripts_dir / f"bench_{s}.py").is_file()]
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(unknown)}")
    extra = [flag for flag, on in (("--quick", args.quick), ("--tcp", args.tcp)) if on]

    print(f"run_all: {environment()}")
    env = run_environment(quick=args.quick, tcp=args.tcp)
    runs: list[ScriptRun] = []
    with temp_dir("ateam-bench-samples-") as samples_dir:
        child_env = {**os.environ, SAMPLES_ENV: str(samples_dir)}
        for name in chosen:
            cmd = [sys.executable, str(scripts_dir / f"bench_{name}.py"), *extra]
            print(f"\n$ {' '.join(cmd)}", flush=True)
            runs.append(run_script(name, cmd, timeout=args.timeout, env=child_env))
        env["load_average_end"] = round(os.getloadavg()[0], 2)

        print("\n== Summary: SPEC §13 performance targets ==")
        print(render([r for run in runs for r in run.rows]))
        print(f"  time: {', '.join(f'{run.name} {run.seconds:.0f} s' for run in runs)}")
        failed = [
            f"bench_{run.name}.py (exit {run.code}, {len(run.rows)} measures)"
            for run in runs
            if run.failed
        ]
        missed = [r.label for run in runs for r in run.rows if r.ok is False]
        if failed:
            print(f"  FAILED TO RUN: {'; '.join(failed)}")
        if missed:
            print(f"  targets missed: {'; '.join(missed)}")
        if not failed and not missed:
            print("  every target met")
        partial = args.only or args.quick or args.tcp
        if args.out is not None or not partial:
            write_results(args.out or scripts_dir / "results", env, runs, samples_dir)
        else:
            print(
                f"  a partial run leaves {scripts_dir / 'results'} as it is "
                "(the committed full run); --out DIR keeps this one"
            )
    return status_of(runs)[0]


def cli() -> int:
    """``main`` with a crash of run_all itself reported as 2, never as a missed target."""
    try:
        return main()
    except Exception:
        traceback.print_exc()
        print("run_all: FAILED (see the traceback above)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
