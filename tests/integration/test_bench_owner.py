"""The owner backpressure benchmark runs end to end (a smoke test: figures not checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(200)]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_owner_benchmark_runs_and_its_slow_owner_loses_no_byte(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_owner.py"), "--quick", "--only", "slow,fast"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("BENCH ")]
    assert {row[1] for row in rows} == {"name=owner_flood_throughput", "name=owner_flood_received"}
    received = next(row for row in rows if row[1] == "name=owner_flood_received")
    assert "value=100" in received, received
    assert "content identical" in done.stdout and "LOST" not in done.stdout
