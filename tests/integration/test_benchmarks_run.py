"""The benchmark scripts still run end to end (a smoke test: figures are not checked).

Benchmarks drive real agents with scripted models, so a change in what the agent asks
its model (a summary, a probe) can break them silently; CI catches that here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_pty_benchmark_runs_and_loses_no_byte(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_pty.py"), "--mb", "2", "--rounds", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
    assert {line.split()[1] for line in lines} == {
        "name=pty_stream_text",
        "name=pty_stream_binary",
    }
    assert "none lost" in done.stdout and "PROBLEMS" not in done.stdout


@pytest.mark.parametrize(
    ("script", "rows"),
    [
        (
            "bench_board.py",
            {
                "name=board_claim_p99",
                "name=board_claim_p50",
                "name=board_claim_open1000_p99",
                "name=board_claim_open10000_p99",
            },
        ),
        (
            "bench_mailbox.py",
            {
                "name=mailbox_delivery_p99",
                "name=mailbox_delivery_p50",
                "name=mailbox_start_p99",
                "name=mailbox_start_p50",
            },
        ),
        ("bench_context.py", {"name=context_visible_p99", "name=context_visible_p50"}),
        ("bench_notices.py", {"name=notice_latency_p99", "name=notice_latency_p50"}),
        (
            "bench_ps.py",
            {
                "name=ps_list_p50",
                "name=ps_list_p99",
                "name=ps1000_list_p50",
                "name=ps1000_list_p99",
                "name=ps10000_list_p50",
                "name=ps10000_list_p99",
                "name=ps10000_cold_p50",
                "name=ps10000_churn_p99",
            },
        ),
    ],
)
def test_the_team_benchmarks_run(tmp_path: Path, script: str, rows: set[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    names = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("BENCH ")}
    assert names == rows
