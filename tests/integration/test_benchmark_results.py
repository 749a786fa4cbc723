"""``benchmarks/run_all.py`` keeps what it measured: JSON, Markdown and charts.

Real scripts run against their own real redis-server (``bench_rpc``, ``bench_board``,
``bench_events``); the exit-status tests use tiny stand-in scripts that print their
``BENCH`` lines through the suite's own ``_common.report``. No test looks at a timing.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
PNG = b"\x89PNG\r\n\x1a\n"
MEASURE_KEYS = {
    "name",
    "label",
    "value",
    "unit",
    "baseline",
    "baseline_label",
    "ratio",
    "target",
    "ok",
}
ENV_KEYS = {"machine", "cpus", "python", "redis_server", "date", "commit", "quick"}


def run_all(
    *args: str, cwd: Path, prelude: str = "", timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``run_all.main(args)`` in a fresh interpreter; ``prelude`` runs first, and
    ``SCRIPTS_DIR`` (when the prelude sets it) replaces ``benchmarks/`` as the scripts' home."""
    code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(BENCH)!r})
        SCRIPTS_DIR = None
        {prelude}
        import run_all
        kw = {{"scripts_dir": SCRIPTS_DIR}} if SCRIPTS_DIR else {{}}
        sys.exit(run_all.main({list(args)!r}, **kw))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def stand_in(directory: Path, name: str, body: str) -> None:
    """``bench_<name>.py`` that prints rows with the suite's own report()."""
    (directory / f"bench_{name}.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(BENCH)!r})
            from _common import Row, report
            """
        )
        + textwrap.dedent(body)
    )


def load(out: Path) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((out / "latest.json").read_text())
    return body


@pytest.mark.timeout(400)
def test_a_real_run_writes_json_markdown_and_the_rpc_chart(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # A chart from an earlier run whose data this run does not produce must go.
    (out / "event_latency.png").write_bytes(PNG + b"stale")
    committed = {p.name: p.stat().st_mtime_ns for p in (BENCH / "results").glob("*")}

    done = run_all("--quick", "--only", "rpc,board", "--out", str(out), cwd=tmp_path)

    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    body = load(out)
    assert ENV_KEYS <= body["environment"].keys()
    assert body["environment"]["quick"] is True
    assert body["environment"]["cpus"] == os.cpu_count()
    measures = {m["name"]: m for m in body["measures"]}
    assert set(measures) == {
        "rpc_status_p50",
        "rpc_status_p99",
        "board_claim_p99",
        "board_claim_p50",
        "board_claim_open1000_p99",
        "board_claim_open10000_p99",
    }
    for m in measures.values():
        assert set(m) == MEASURE_KEYS
        assert math.isclose(m["ratio"], m["value"] / m["baseline"], rel_tol=1e-3)
    assert measures["rpc_status_p50"]["target"] == "<=4x"
    assert measures["rpc_status_p50"]["ok"] in (True, False)
    assert measures["board_claim_p50"]["ok"] is None
    assert [s["name"] for s in body["scripts"]] == ["rpc", "board"]
    # bench_rpc handed over both whole distributions (--quick: 2 000 calls each).
    assert body["distributions"]["rpc_status"]["n"] == 2000
    assert body["distributions"]["rpc_ping"]["n"] == 2000
    assert body["charts"] == ["rpc_latency.png"]

    assert (out / "rpc_latency.png").read_bytes().startswith(PNG)
    assert not (out / "event_latency.png").exists()
    md = (out / "latest.md").read_text()
    for m in measures.values():
        assert f"| {m['label']} |" in md
    assert "| rpc status p50 |" in md and "PING p50" in md and "≤ 4x" in md
    assert "![rpc latency](rpc_latency.png)" in md
    assert "`--quick` run" in md
    # --out elsewhere leaves the committed results alone.
    assert {p.name: p.stat().st_mtime_ns for p in (BENCH / "results").glob("*")} == committed


def test_a_missed_target_exits_1_and_without_matplotlib_there_is_a_hint(tmp_path: Path) -> None:
    scripts, out = tmp_path / "scripts", tmp_path / "out"
    scripts.mkdir()
    stand_in(
        scripts,
        "missed",
        """
        row = Row("thing_p99", "thing p99", 9.0, "ms", 1.0, "raw p99", "<=2x", False)
        report("stand-in", [row])
        """,
    )
    done = run_all(
        "--only",
        "missed",
        "--out",
        str(out),
        cwd=tmp_path,
        prelude=f"sys.modules['matplotlib'] = None; SCRIPTS_DIR = Path({str(scripts)!r})",
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "targets missed: thing p99" in done.stdout
    assert "pip install -e '.[bench]'" in done.stdout
    body = load(out)
    assert body["status"] == "missed" and body["exit"] == 1
    assert body["measures"][0]["ok"] is False and body["measures"][0]["ratio"] == 9.0
    assert body["charts"] == [] and not list(out.glob("*.png"))
    assert (
        "| thing p99 | 9.00 ms | raw p99 1.00 ms | 9.00x | ≤ 2x | **NO** |"
        in (out / "latest.md").read_text()
    )


def test_a_partial_run_leaves_the_committed_results_as_they_are(tmp_path: Path) -> None:
    # --only, --quick or --tcp without --out used to overwrite results/ with a part of a
    # run, and remove the committed charts it had not drawn.
    scripts = tmp_path / "scripts"
    (scripts / "results").mkdir(parents=True)
    (scripts / "results" / "latest.json").write_text('{"committed": true}')
    stand_in(
        scripts,
        "fine",
        """
        report("stand-in", [Row("ok_p50", "ok p50", 1.0, "ms", 1.0, "raw", "<=2x", True)])
        """,
    )
    done = run_all("--only", "fine", cwd=tmp_path, prelude=f"SCRIPTS_DIR = Path({str(scripts)!r})")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "a partial run leaves" in done.stdout
    assert [p.name for p in (scripts / "results").iterdir()] == ["latest.json"]
    assert load(scripts / "results") == {"committed": True}


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("silent", 'print("measured nothing")\n'),
        (
            "crashing",
            """
            report("stand-in", [Row("x_p50", "x p50", 1.0, "ms", 1.0, "raw", "<=2x", True)])
            raise SystemExit(3)
            """,
        ),
    ],
)
def test_a_script_that_fails_or_prints_no_measure_exits_2(
    tmp_path: Path, name: str, body: str
) -> None:
    scripts, out = tmp_path / "scripts", tmp_path / "out"
    scripts.mkdir()
    stand_in(
        scripts,
        "fine",
        """
        report("stand-in", [Row("ok_p50", "ok p50", 1.0, "ms", 1.0, "raw", "<=2x", True)])
        """,
    )
    stand_in(scripts, name, body)
    done = run_all(
        "--only",
        f"fine,{name}",
        "--out",
        str(out),
        cwd=tmp_path,
        prelude=f"SCRIPTS_DIR = Path({str(scripts)!r})",
    )
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"FAILED TO RUN: bench_{name}.py" in done.stdout
    result = load(out)
    assert result["status"] == "failed"
    assert {s["name"]: s["exit"] for s in result["scripts"]} == {
        "fine": 0,
        name: 0 if name == "silent" else 3,
    }
    assert "**Failed to run:**" in (out / "latest.md").read_text()


def test_the_pty_chart_is_drawn_from_the_rows(tmp_path: Path) -> None:
    scripts, out = tmp_path / "scripts", tmp_path / "out"
    scripts.mkdir()
    stand_in(
        scripts,
        "pty",
        """
        report("stand-in", [
            Row("pty_stream_text", "PTY stream e2e, text (2 MB)", 40.0, "MB/s", 100.0,
                "raw PTY os.read", ">=0.5x", False, higher_is_better=True),
            Row("pty_stream_binary", "PTY stream e2e, binary (2 MB)", 30.0, "MB/s", 100.0,
                "raw PTY os.read", "(info)", None, higher_is_better=True),
        ])
        """,
    )
    done = run_all(
        "--only",
        "pty",
        "--out",
        str(out),
        cwd=tmp_path,
        prelude=f"SCRIPTS_DIR = Path({str(scripts)!r})",
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert load(out)["charts"] == ["pty_throughput.png"]
    assert (out / "pty_throughput.png").read_bytes().startswith(PNG)


@pytest.mark.timeout(300)
def test_the_event_benchmark_hands_over_its_latency_samples(tmp_path: Path) -> None:
    samples = tmp_path / "samples"
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_events.py"), "--quick", "--only", "latency"],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=tmp_path,
        env={**os.environ, "ATEAM_BENCH_SAMPLES": str(samples)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = {p.stem: json.loads(p.read_text()) for p in samples.glob("*.json")}
    assert set(found) == {
        f"event_latency_{rate}k_{mode}" for rate in (2, 10) for mode in ("ateam", "raw")
    }
    for name, body in found.items():
        assert body["name"] == name and body["unit"] == "ms"
        assert body["samples"] and all(isinstance(v, float) for v in body["samples"])
