"""What ``run_all.py`` leaves behind: ``latest.json``, ``latest.md`` and PNG charts.

One run of the suite is one directory (``--out``, default ``benchmarks/results``):

* ``latest.json``: every measure (name, label, value, unit, baseline, baseline label,
  ratio, target, ok), the samples behind the drawn distributions summarised as
  percentiles, the scripts (exit status, measures, seconds) and the environment (machine,
  CPU count, Python, redis-server, date, git commit, ``--quick`` or not);
* ``latest.md``: the same as a Markdown table, with the charts embedded;
* with the ``bench`` extra (matplotlib): ``rpc_latency.png`` (RPC round trip vs raw PING),
  ``event_latency.png`` (event latency at 2 k and 10 k events/s vs raw XADD → XREAD) and
  ``pty_throughput.png`` (PTY stream vs a raw PTY read, from the rows).

A chart whose data this run did not produce is removed, so the directory never mixes
runs. Latency distributions are drawn as percentile plots: the x axis counts nines
(50 %, 90 %, 99 %, 99.9 %), so the tail the targets speak about gets as much room as the
median.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import ROOT, Row, fmt, percentile, redis_py_version, redis_server_version

CHARTS = ("rpc_latency.png", "event_latency.png", "pty_throughput.png")
"""Every chart ``run_all.py`` can draw, in the order the Markdown shows them."""

INSTALL_HINT = "charts need matplotlib: pip install -e '.[bench]'"


@dataclass
class ScriptRun:
    """One benchmark script as ``run_all.py`` ran it."""

    name: str
    """``rpc`` for ``bench_rpc.py``."""
    code: int | None = None
    """Exit status; ``None`` while it runs."""
    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        """It exited non-zero or printed no measure."""
        return self.code != 0 or not self.rows


# --- the environment -------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return " ".join(line.partition(":")[2].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _git_commit() -> str | None:
    """Short commit of the checkout, ``+dirty`` when tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def run_environment(*, quick: bool, tcp: bool) -> dict[str, Any]:
    """Where and on what the run happens; taken at its start."""
    return {
        "machine": f"{_cpu_model()}, {platform.machine()}, {platform.system()} "
        f"{platform.release()}",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "redis_py": redis_py_version(),
        "redis_server": redis_server_version(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "quick": quick,
        "transport": "tcp" if tcp else "unix socket",
        "load_average_start": round(os.getloadavg()[0], 2),
    }


# --- samples ---------------------------------------------------------------------------


def load_samples(directory: Path) -> dict[str, list[float]]:
    """The sample sets scripts saved with ``_common.save_samples``, by name."""
    found: dict[str, list[float]] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            body = json.loads(path.read_text())
            found[str(body["name"])] = [float(v) for v in body["samples"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"run_all: ignoring unreadable samples {path.name}: {exc}", file=sys.stderr)
    return found


def _summary(samples: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "n": len(samples),
        **{f"p{q:g}".replace(".", ""): _finite(percentile(samples, q)) for q in (50, 90, 99, 99.9)},
        "max": max(samples) if samples else None,
    }


# --- JSON and Markdown -----------------------------------------------------------------


def _finite(value: float | None) -> float | None:
    """JSON has no NaN: a missing figure is ``null``."""
    if value is None or math.isnan(value) or math.isinf(value):
        return None
    return value


def measure_dict(r: Row) -> dict[str, Any]:
    ratio = r.ratio
    return {
        "name": r.name,
        "label": r.label,
        "value": _finite(r.value),
        "unit": r.unit,
        "baseline": _finite(r.baseline),
        "baseline_label": r.baseline_label,
        "ratio": None if ratio is None else _finite(round(ratio, 4)),
        "target": r.target,
        "ok": r.ok,
    }


def status_of(runs: Sequence[ScriptRun]) -> tuple[int, str]:
    """``(exit status, word)``: 2 failed, 1 a target missed, 0 every target met."""
    if any(run.failed for run in runs):
        return 2, "failed"
    if any(r.ok is False for run in runs for r in run.rows):
        return 1, "missed"
    return 0, "met"


def write_json(
    out: Path,
    env: Mapping[str, Any],
    runs: Sequence[ScriptRun],
    samples: Mapping[str, Sequence[float]],
    charts: Sequence[str],
) -> Path:
    code, word = status_of(runs)
    body = {
        "environment": dict(env),
        "status": word,
        "exit": code,
        "measures": [measure_dict(r) for run in runs for r in run.rows],
        "scripts": [
            {
                "name": run.name,
                "exit": run.code,
                "measures": len(run.rows),
                "seconds": round(run.seconds, 1),
            }
            for run in runs
        ],
        "distributions": {name: _summary(values) for name, values in sorted(samples.items())},
        "charts": list(charts),
    }
    path = out / "latest.json"
    path.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
    return path


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<=", "≤ ").replace(">=", "≥ ")


def environment_line(env: Mapping[str, Any]) -> str:
    """One sentence: the machine, the software and the kind of run."""
    kind = "`--quick` run" if env.get("quick") else "full run"
    load = env.get("load_average_start")
    end = env.get("load_average_end")
    loads = f"load average {load}" + (f" → {end}" if end is not None else "")
    return (
        f"{kind} of {env.get('date')} on {env.get('machine')} ({env.get('cpus')} CPUs, "
        f"{loads}); Python {env.get('python')}, {env.get('redis_py')}, redis-server "
        f"{env.get('redis_server')} over a {env.get('transport')}; commit "
        f"`{env.get('commit') or 'unknown'}`"
    )


def markdown(env: Mapping[str, Any], runs: Sequence[ScriptRun], charts: Sequence[str]) -> str:
    lines = [
        "# Benchmark results",
        "",
        environment_line(env) + ".",
        "",
        "| measure | value | baseline (raw, same run) | ratio | target | ok |",
        "|---|--:|---|--:|---|:-:|",
    ]
    for run in runs:
        for r in run.rows:
            base = (
                f"{r.baseline_label} {fmt(r.baseline, r.unit)}" if r.baseline is not None else "-"
            )
            ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
            ok = "-" if r.ok is None else ("yes" if r.ok else "**NO**")
            lines.append(
                f"| {_cell(r.label)} | {_cell(fmt(r.value, r.unit))} | {_cell(base)} | {ratio} "
                f"| {_cell(r.target)} | {ok} |"
            )
    failed = [
        f"`bench_{run.name}.py` (exit {run.code}, {len(run.rows)} measures)"
        for run in runs
        if run.failed
    ]
    missed = [r.label for run in runs for r in run.rows if r.ok is False]
    lines.append("")
    if failed:
        lines.append(f"**Failed to run:** {'; '.join(failed)}.")
    if missed:
        lines.append(f"Targets missed: {'; '.join(missed)}.")
    if not failed and not missed:
        lines.append("Every target met.")
    lines.append("")
    lines.append(
        "Script times: " + ", ".join(f"{run.name} {run.seconds:.0f} s" for run in runs) + "."
    )
    for chart in charts:
        lines += ["", f"![{chart.removesuffix('.png').replace('_', ' ')}]({chart})"]
    return "\n".join(lines) + "\n"


def write_markdown(
    out: Path, env: Mapping[str, Any], runs: Sequence[ScriptRun], charts: Sequence[str]
) -> Path:
    path = out / "latest.md"
    path.write_text(markdown(env, runs, charts))
    return path


def remove_stale_charts(out: Path, drawn: Sequence[str]) -> list[str]:
    """Remove the charts of an earlier run that this run did not draw again."""
    removed = []
    for name in CHARTS:
        if name not in drawn and (out / name).exists():
            (out / name).unlink()
            removed.append(name)
    return removed


def draw_charts(
    out: Path,
    env: Mapping[str, Any],
    rows: Sequence[Row],
    samples: Mapping[str, Sequence[float]],
) -> list[str] | None:
    """Draw every chart this run has data for; ``None`` without matplotlib."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return None
    import _charts

    return _charts.draw_all(out, env, rows, samples)
