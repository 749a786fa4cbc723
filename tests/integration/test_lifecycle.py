"""Stops that are not a person's decision never lose the task in hand (SPEC §4.2, §5.1, §12)."""

from __future__ import annotations

import contextlib
import signal
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


def test_a_redis_hung_longer_than_the_lock_ttl_pauses_writes_but_stops_nothing(
    start_agent: AgentFactory, own_redis: Any, bus: Bus, tmp_path: Path
) -> None:
    """A frozen Redis (not a closed one) is no proof that another process took over.

    Past the TTL minus the margin the agent cannot confirm its lock, so it writes
    nothing durable and says so; it goes on running, and once Redis answers it keeps
    its lock (or takes it again if Redis let it expire and nobody else took it) and serves.
    """
    agent = start_agent("hang/zeus")
    assert own_redis.proc is not None
    own_redis.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: "could not confirm the instance lock" in agent.stderr(),
            15,
            "the agent to notice it cannot confirm its lock",
        )
        assert agent.running(), agent.stderr()
    finally:
        with contextlib.suppress(ProcessLookupError):
            own_redis.proc.send_signal(signal.SIGCONT)
    entry = wait_for(lambda: bus.serving("hang/zeus", agent.pid), 20, "the agent to serve again")
    assert entry["fence"] in (1, 2)  # kept, or taken again after it expired: one instance
    assert agent.running()
    assert agent.terminate() == 0


def test_tail_of_an_unknown_agent_is_an_error(own_redis: Any) -> None:
    result = run_ateam("tail", "nobody/here", "--redis", own_redis.url)
    assert result.returncode == 4
    assert "agent.not_found" in result.stderr
