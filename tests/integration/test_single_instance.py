"""At most one process per identity on one Redis (SPEC §4.2, §12)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests._wait import wait_for

from .conftest import (
    KEYS,
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    ateam_cmd,
    run_ateam,
    subprocess_env,
    wait_serving,
)

pytestmark = pytest.mark.integration


def test_second_instance_exits_11_with_the_spec_message(start_agent: AgentFactory) -> None:
    first = start_agent("solo/zeus")

    second = start_agent("solo/zeus", wait=False)

    assert second.wait_exit() == 11
    assert "Another instance of solo/zeus is already registered on this Redis" in second.stderr()
    assert first.running()


def test_twenty_started_at_once_leave_exactly_one(redis_url: str, bus: Bus, tmp_path: Path) -> None:
    url = redis_url
    args = ateam_cmd("agent", "--project", "herd", "--name", "zeus", "--redis", url, "--no-repl")
    procs: list[subprocess.Popen[bytes]] = []
    errs = []
    try:
        for i in range(20):
            err = tmp_path / f"herd-{i}.stderr"
            with err.open("wb") as fh:
                procs.append(
                    subprocess.Popen(
                        args, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                        env=subprocess_env(),
                    )
                )  # fmt: skip
            errs.append(err)

        wait_for(
            lambda: sum(p.poll() is not None for p in procs) >= 19,
            3 * START_TIMEOUT_S,
            "19 of the 20 agents to exit",
        )
        exited = [(p, e) for p, e in zip(procs, errs, strict=True) if p.poll() is not None]
        survivors = [p for p in procs if p.poll() is None]
        assert len(survivors) == 1, [p.returncode for p in procs]
        assert [p.returncode for p, _ in exited] == [11] * 19
        for _, err in exited:
            assert "Another instance of herd/zeus is already registered" in err.read_text()
        survivor = survivors[0]
        wait_for(
            lambda: bus.serving("herd/zeus", survivor.pid), START_TIMEOUT_S, "survivor to serve"
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


def test_restart_after_kill9_takes_the_lock_over_at_once(
    start_agent: AgentFactory, bus: Bus, redis_url: str
) -> None:
    crashed = start_agent("phoenix/zeus")
    crashed.kill9()
    # The dead process's lock (10 s TTL) and registry entry are still on the bus.
    assert bus.client.pttl(KEYS.lock("phoenix/zeus")) > 2000

    restarted = start_agent("phoenix/zeus", wait=False)
    # Far below the lock TTL: a restart that waited for the lock to lapse fails here.
    entry = wait_serving(bus, restarted, timeout=6.0)

    assert restarted.running()
    assert entry["pid"] == restarted.pid
    warnings = [
        body for _, body in bus.events("phoenix/zeus")
        if body.get("type") == "warn" and body.get("code") == "lock.takeover"
    ]  # fmt: skip
    assert any(str(crashed.pid) in w["msg"] for w in warnings), warnings
    ps = run_ateam("ps", "--json", "--redis", redis_url)
    assert ps.returncode == 0, ps.stderr
    rows = {row["id"]: row for row in json.loads(ps.stdout)}
    assert rows["phoenix/zeus"]["pid"] == restarted.pid
    assert rows["phoenix/zeus"]["state"] == "idle"
