"""Run every benchmark script and print one summary table of the SPEC §13 measures.

Each script runs in its own process (each starts and removes its own redis-server); its
full output is shown as it runs, then the ``BENCH ...`` lines of all of them are
collected into one table.

    python benchmarks/run_all.py [--quick] [--tcp] [--only rpc,events,...]

Exit status: 0 every target met, 1 some target missed, 2 a script failed to run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import Row, environment, render

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "rpc", "events", "queue", "ps", "ownership", "board", "context", "restart", "redact", "pty",
    "console",
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="pass --quick to every script")
    p.add_argument("--tcp", action="store_true", help="pass --tcp to every script")
    p.add_argument("--only", default="", help=f"comma-separated subset of {','.join(SCRIPTS)}")
    p.add_argument("--timeout", type=float, default=600, help="seconds allowed per script")
    args = p.parse_args()
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or SCRIPTS
    unknown = [s for s in chosen if s not in SCRIPTS]
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(unknown)}")
    extra = [flag for flag, on in (("--quick", args.quick), ("--tcp", args.tcp)) if on]

    print(f"run_all: {environment()}")
    rows: list[Row] = []
    failed: list[str] = []
    durations: list[str] = []
    for name in chosen:
        script = HERE / f"bench_{name}.py"
        cmd = [sys.executable, str(script), *extra]
        print(f"\n$ {' '.join(cmd)}", flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=HERE.parent)
        assert proc.stdout is not None
        found = 0
        # A hung script is killed at its deadline even if it prints nothing.
        killer = threading.Timer(args.timeout, proc.kill)
        killer.start()
        try:
            for line in proc.stdout:
                print(line, end="", flush=True)
                if line.startswith("BENCH "):
                    rows.append(parse_bench(line))
                    found += 1
            code = proc.wait()
        finally:
            killer.cancel()
        durations.append(f"{name} {time.monotonic() - t0:.0f} s")
        if code != 0 or not found:
            failed.append(f"bench_{name}.py (exit {code}, {found} measures)")

    print("\n== Summary: SPEC §13 performance targets ==")
    print(render(rows))
    print(f"  time: {', '.join(durations)}")
    missed = [r.label for r in rows if r.ok is False]
    if failed:
        print(f"  FAILED TO RUN: {'; '.join(failed)}")
    if missed:
        print(f"  targets missed: {'; '.join(missed)}")
    if not failed and not missed:
        print("  every target met")
    return 2 if failed else 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
