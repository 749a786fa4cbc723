"""Interrupting a task: SIGINT, /interrupt and /cancel stop it; the next item runs."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests._wait import wait_for

from .conftest import AgentFactory, Bus, ConsoleFactory, attach_and_send, write_project

pytestmark = pytest.mark.integration

LONG = " ".join(f"w{i}" for i in range(200))  # 200 words at 50 ms: ten seconds of answer


def test_sigint_interrupts_the_task_and_the_agent_stays_up(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "sig", "sig")
    agent = start_agent("sig/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "sig/zeus", LONG, "after the interrupt")
    bus.wait_streaming("sig/zeus")

    agent.proc.send_signal(signal.SIGINT)

    wait_for(lambda: len(bus.task_end_list("sig/zeus")) == 2, 15, "both tasks to end")
    first, second = bus.task_end_list("sig/zeus")
    assert (first["ok"], first["error"]) == (False, "interrupted")
    assert second["ok"] is True
    assert agent.running()
    console.wait_line(lambda line: line == "[A:sig/zeus] echo: after the interrupt")


@pytest.mark.parametrize(
    ("command", "error"), [("/interrupt", "interrupted"), ("/cancel --hard", "cancelled")]
)
def test_console_interrupt_and_cancel_then_the_next_item_runs(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    command: str,
    error: str,
) -> None:
    root = write_project(tmp_path / "stop", "stop")
    start_agent("stop/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "stop/zeus", LONG, "next one")
    bus.wait_streaming("stop/zeus")

    console.send(command)

    console.wait_line(lambda line: line == "[A:stop/zeus] echo: next one", timeout=15)
    first, second = bus.task_end_list("stop/zeus")
    assert (first["ok"], first["error"]) == (False, error)
    assert second["ok"] is True
