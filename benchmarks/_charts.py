"""PNG charts of one benchmark run, drawn with matplotlib's Agg backend (no display).

Imported by ``_results.draw_charts`` only when matplotlib is installed (the ``bench``
extra). Each chart sets an ateam measure beside its raw baseline from the same run, marks
the SPEC §13 limit where there is one, and carries the machine, date and commit in its
footer, so a chart copied out of the directory still says where it came from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from _common import Row, percentile
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

ATEAM = "#1f6fb2"
RAW = "#8c8c8c"
LIMIT = "#c0392b"
DPI = 110

# Percentile plots: x is the number of nines, -log10(1 - q).
_TICKS = [
    (math.log10(2), "50%"),
    (1.0, "90%"),
    (2.0, "99%"),
    (3.0, "99.9%"),
    (4.0, "99.99%"),
    (5.0, "99.999%"),
]
_X50, _X99 = math.log10(2), 2.0


def _limit(target: str, unit: str) -> float | None:
    """The number in a target such as ``<=4x`` (unit ``x``) or ``<=5 ms`` (unit ``ms``)."""
    m = re.fullmatch(rf"\s*[<>]=\s*([0-9.]+)\s*{re.escape(unit)}\s*", target)
    return float(m.group(1)) if m else None


def _footer(fig: Figure, env: Mapping[str, Any]) -> None:
    kind = "--quick run" if env.get("quick") else "full run"
    fig.text(
        0.01,
        0.01,
        f"{env.get('machine')}, {env.get('cpus')} CPUs · {kind} {env.get('date')} · "
        f"commit {env.get('commit') or '?'}",
        fontsize=7,
        color="#666666",
    )


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI)


def _nines(samples: Sequence[float]) -> tuple[Any, Any]:
    """``(x, y)`` of a percentile plot, thinned to at most ~1500 points."""
    y = np.sort(np.asarray(samples, dtype=float))
    n = len(y)
    x = -np.log10(1 - (np.arange(1, n + 1) - 0.5) / n)
    if n > 2000:
        keep = np.unique(np.minimum(np.searchsorted(x, np.linspace(0, x[-1], 1500)), n - 1))
        x, y = x[keep], y[keep]
    return x, y


def _percentile_axes(
    ax: Axes,
    series: Sequence[tuple[str, Sequence[float], str]],
    limits: Sequence[tuple[float, float, str]] = (),
) -> None:
    """One percentile plot: ``series`` is (label, samples in ms, colour); ``limits`` are
    (x, latency, label) marks of a target."""
    right = 0.0
    for label, samples, colour in series:
        x, y = _nines(samples)
        p50, p99 = percentile(samples, 50), percentile(samples, 99)
        ax.plot(
            x,
            y,
            color=colour,
            lw=1.6,
            label=f"{label}: p50 {p50:.3g} ms, p99 {p99:.3g} ms (n={len(samples):,})",
        )
        ax.plot([_X50, _X99], [p50, p99], "o", color=colour, ms=5)
        right = max(right, float(x[-1]))
    for i, (x, value, label) in enumerate(limits):
        ax.plot([x], [value], "_", color=LIMIT, ms=22, mew=2.5, label=label if i == 0 else None)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_xlim(0, right)
    ticks = [(x, t) for x, t in _TICKS if x <= right]
    ax.set_xticks([x for x, _ in ticks], [t for _, t in ticks])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms, log scale)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7.5, loc="lower right")


def _row(rows: Sequence[Row], name: str) -> Row | None:
    return next((r for r in rows if r.name == name), None)


def rpc_chart(
    path: Path, env: Mapping[str, Any], rows: Sequence[Row], samples: Mapping[str, Sequence[float]]
) -> bool:
    status, ping = samples.get("rpc_status"), samples.get("rpc_ping")
    if not status or not ping:
        return False
    limits = []
    spoken = []
    for name, x, q in (("rpc_status_p50", _X50, 50), ("rpc_status_p99", _X99, 99)):
        row = _row(rows, name)
        factor = _limit(row.target, "x") if row else None
        if factor is not None:
            spoken.append(f"p{q} ≤ {factor:g}x PING p{q}")
            limits.append((x, factor * percentile(ping, q), ""))
    if limits:
        limits[0] = (*limits[0][:2], "target: " + ", ".join(spoken))
    fig = Figure(figsize=(8, 4.8))
    ax = fig.add_subplot()
    _percentile_axes(
        ax, [("ateam status RPC", status, ATEAM), ("raw redis-py PING", ping, RAW)], limits
    )
    ax.set_title("RPC round trip: status on a real agent vs a raw PING (same run, interleaved)")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    _footer(fig, env)
    _save(fig, path)
    return True


def event_chart(
    path: Path, env: Mapping[str, Any], rows: Sequence[Row], samples: Mapping[str, Sequence[float]]
) -> bool:
    by_rate: dict[int, dict[str, Sequence[float]]] = {}
    for name, values in samples.items():
        m = re.fullmatch(r"event_latency_(\d+)k_(ateam|raw)", name)
        if m and values:
            by_rate.setdefault(int(m.group(1)), {})[m.group(2)] = values
    rates = sorted(r for r, modes in by_rate.items() if len(modes) == 2)
    if not rates:
        return False
    target_row = _row(rows, "event_latency_p99")
    p99_limit = _limit(target_row.target, "ms") if target_row else None
    fig = Figure(figsize=(5.2 * len(rates), 4.8))
    axes = fig.subplots(1, len(rates), sharey=True, squeeze=False)[0]
    for ax, rate in zip(axes, rates, strict=True):
        # The SPEC row is the 10 k events/s run; the others are informational.
        limits = (
            [(_X99, p99_limit, f"target: p99 ≤ {p99_limit:g} ms")]
            if rate == 10 and p99_limit
            else []
        )
        modes = by_rate[rate]
        _percentile_axes(
            ax,
            [
                ("ateam EventPublisher → EventTail", modes["ateam"], ATEAM),
                ("raw XADD → XREAD", modes["raw"], RAW),
            ],
            limits,
        )
        ax.set_title(f"100 agents, {rate} 000 events/s in all")
    fig.suptitle("Event latency, agent publish → console receive (same layout, same pacing)")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    _footer(fig, env)
    _save(fig, path)
    return True


def pty_chart(
    path: Path, env: Mapping[str, Any], rows: Sequence[Row], samples: Mapping[str, Sequence[float]]
) -> bool:
    pty = [r for r in rows if r.name.startswith("pty_stream") and r.baseline is not None]
    if not pty:
        return False
    fig = Figure(figsize=(3.2 + 2.2 * len(pty), 4.8))
    ax = fig.add_subplot()
    width = 0.38
    limit_label = True
    for i, r in enumerate(pty):
        assert r.baseline is not None
        ax.bar(
            i - width / 2, r.baseline, width, color=RAW, label="raw PTY os.read" if i == 0 else None
        )
        ax.bar(
            i + width / 2, r.value, width, color=ATEAM, label="ateam end to end" if i == 0 else None
        )
        ratio = r.ratio
        if ratio is not None:
            ax.annotate(
                f"{ratio:.2f}x raw",
                (i + width / 2, r.value),
                ha="center",
                va="bottom",
                fontsize=9,
                xytext=(0, 3),
                textcoords="offset points",
            )
        factor = _limit(r.target, "x")
        if factor is not None:
            ax.plot(
                [i, i + width],
                [factor * r.baseline] * 2,
                "--",
                color=LIMIT,
                lw=2,
                label=f"target ≥ {factor:g}x raw" if limit_label else None,
            )
            limit_label = False
    ax.set_xticks(range(len(pty)), [r.label.removeprefix("PTY stream e2e, ") for r in pty])
    ax.set_ylabel(pty[0].unit)
    ax.set_title("PTY output streamed end to end vs a raw PTY read (medians, same run)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    _footer(fig, env)
    _save(fig, path)
    return True


_Drawer = Callable[[Path, Mapping[str, Any], Sequence[Row], Mapping[str, Sequence[float]]], bool]
DRAWERS: dict[str, _Drawer] = {
    "rpc_latency.png": rpc_chart,
    "event_latency.png": event_chart,
    "pty_throughput.png": pty_chart,
}


def draw_all(
    out: Path, env: Mapping[str, Any], rows: Sequence[Row], samples: Mapping[str, Sequence[float]]
) -> list[str]:
    """Draw every chart the run has data for; returns the file names drawn."""
    return [name for name, draw in DRAWERS.items() if draw(out / name, env, rows, samples)]
