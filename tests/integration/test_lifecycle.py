"""Stops that are not a person's decision never lose the task in hand (SPEC §4.2, §5.1, §12)."""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    run_ateam,
    write_project,
)

pytestmark = pytest.mark.integration

LONG = " ".join(f"w{i}" for i in range(60))  # three seconds of answer at 50 ms a word


def test_sigterm_mid_task_gives_the_item_back_and_the_restart_runs_it(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "life", "life")
    agent = start_agent("life/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "life/zeus", LONG)
    bus.wait_streaming("life/zeus")

    assert agent.terminate() == 0

    first_try = bus.task_end_list("life/zeus")
    start_agent("life/zeus", cwd=root)
    wait_for(lambda: len(bus.task_end_list("life/zeus")) > len(first_try), 20, "the re-run")
    last = bus.task_end_list("life/zeus")[-1]
    assert last["ok"] is True
    assert last["task_id"] == first_try[-1]["task_id"]  # the same item, run to the end


def test_agent_stops_when_redis_hangs_longer_than_the_lock_ttl(
    start_agent: AgentFactory, own_redis: Any, tmp_path: Path
) -> None:
    """A frozen Redis (not a closed one) must not let a process keep working unlocked."""
    agent = start_agent("hang/zeus")
    assert own_redis.proc is not None
    own_redis.proc.send_signal(signal.SIGSTOP)
    started = time.monotonic()
    try:
        code = agent.wait_exit(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            own_redis.proc.send_signal(signal.SIGCONT)
    assert code == 14, agent.stderr()
    assert "instance lock" in agent.stderr()
    assert time.monotonic() - started < 15


def test_tail_of_an_unknown_agent_is_an_error(own_redis: Any) -> None:
    result = run_ateam("tail", "nobody/here", "--redis", own_redis.url)
    assert result.returncode == 4
    assert "agent.not_found" in result.stderr
