"""Each task's lines in the log and its failure in ``ps`` (``agent/loop/journal.py``), and
the standing alerts that share the registry entry's one ``alert`` (``Alert``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ateam.agent.loop import journal
from ateam.agent.loop.status import AgentStatus, Alert
from ateam.agent.loop.task import TaskOutcome
from ateam.agent.runtime.build import build_parts
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.connection import RedisTarget
from ateam.config import standalone_agent
from ateam.providers import EchoProvider


@pytest.fixture
def status(tmp_path: Path) -> AgentStatus:
    # Nothing here reaches Redis: the parts are built, never started.
    config = standalone_agent("p", "zeus", tmp_path)
    return build_parts(config, RedisTarget("redis://127.0.0.1:1/0", "test"), EchoProvider()).status


def item(text: str = "build it") -> QueueItem:
    return QueueItem("q-1-000", text, "cli", 0.0, attempts=1)


def failed(code: str | None, error: str) -> TaskOutcome:
    return TaskOutcome(False, error, "", 0, 0, code=code)


def test_standing_alerts_join_in_their_order_and_each_clears_alone(status: AgentStatus) -> None:
    status.alert(Alert.TASK, "task.failed: internal: boom")
    status.alert(Alert.STALL, "worker stalled")
    status.alert(Alert.MODEL, "provider.auth: no key")

    assert (
        status.entry.alert == "worker stalled; provider.auth: no key; task.failed: internal: boom"
    )

    status.stall_cleared()
    status.runtime_alert(None)  # nothing of its own raised: changes nothing
    assert status.entry.alert == "provider.auth: no key; task.failed: internal: boom"
    status.alert(Alert.MODEL, None)
    status.alert(Alert.TASK, None)
    assert status.entry.alert is None


def test_a_failure_is_logged_and_shown_until_a_task_succeeds(
    status: AgentStatus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ateam.agent.tasks")
    journal.task_started(item("build\n  it"))
    journal.task_ended(
        status, item(), failed("provider.auth", "error [provider.auth]: no key — set it"), 0.25
    )

    assert status.entry.alert == "task.failed: provider.auth: no key — set it"
    assert status.entry.failure is not None
    assert (status.entry.failure.task_id, status.entry.failure.code) == ("q-1-000", "provider.auth")

    journal.task_ended(status, item(), TaskOutcome(True, None, "done", 10, 2, 1), 1.0)

    assert status.entry.alert is None and status.entry.failure is None
    assert caplog.messages == [
        "task q-1-000 started (from cli, attempt 1): build it",
        "task q-1-000 failed [provider.auth] after 0.2 s: no key — set it",
        "task q-1-000 done in 1.0 s (model calls: 1, tokens in/out: 10/2)",
    ]


def test_an_interrupted_task_is_logged_but_is_no_failure(
    status: AgentStatus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ateam.agent.tasks")
    journal.task_ended(status, item(), failed("internal", "error [internal]: boom"), 0.0)
    journal.task_ended(status, item(), failed("task.interrupted", "interrupted"), 0.0)

    # Stopped by a person: the earlier failure still stands, nothing new is raised.
    assert status.entry.alert == "task.failed: internal: boom"
    assert caplog.messages[-1] == "task q-1-000 stopped [task.interrupted] after 0.0 s: interrupted"
