"""How a front end learns the end of the tasks it queued (``ateam.client.outcomes``)."""

from __future__ import annotations

from typing import Any

from ateam.client import Event, Outcomes, TaskResult
from ateam.errors import TaskFailed
from ateam.exits import Exit, cli_exit_code


def end(task: str, offset: int = 1, **fields: Any) -> Event:
    return Event("p/zeus", offset, "task.end", 0.0, {"task_id": task, **fields})


def test_a_queued_task_is_pending_until_its_end_is_seen() -> None:
    outcomes = Outcomes()
    outcomes.queued("p/zeus", "q-1")
    outcomes.seen(Event("p/zeus", 1, "token", 0.0, {"task_id": "q-1", "text": "hi"}))

    assert outcomes.pending("p/zeus") == ["q-1"] and not outcomes.changed.is_set()

    outcomes.seen(end("q-1", 2, ok=True))

    assert outcomes.pending() == [] and outcomes.changed.is_set()
    assert outcomes.results == [TaskResult("p/zeus", "q-1", True)]
    assert outcomes.failures() == []


def test_an_end_seen_before_the_reply_that_names_its_task_still_counts() -> None:
    # A fast agent's task.end can reach the console before the input's reply does.
    outcomes = Outcomes()
    outcomes.seen(end("q-2", ok=False, error="error [provider.auth]: no key", code="provider.auth"))
    outcomes.seen(end("q-other", ok=False, error="not ours"))

    outcomes.queued("p/zeus", "q-2")

    assert outcomes.pending() == []
    [failed] = outcomes.failures()
    assert (failed.task_id, failed.code, failed.error) == (
        "q-2",
        "provider.auth",
        "error [provider.auth]: no key",
    )


def test_the_code_of_an_older_agent_is_read_from_its_error_line() -> None:
    result = TaskResult.of("p/zeus", end("q-3", ok=False, error="error [runtime.missing]: gone"))
    assert result.code == "runtime.missing"
    stopped = TaskResult.of("p/zeus", end("q-4", ok=False, error="interrupted"))
    assert stopped.code == "internal" and not stopped.ok


def test_a_failure_is_one_task_failed_error_with_exit_status_5() -> None:
    result = TaskResult(
        "p/zeus", "q-5", False, "error [provider.auth]: no key — check it", "provider.auth"
    )

    failure = result.failure()

    assert isinstance(failure, TaskFailed)
    assert failure.one_line() == (
        "error [task.failed]: task q-5 of p/zeus failed [provider.auth]: no key — check it; "
        "its events: `ateam tail p/zeus`"
    )
    assert failure.detail == {"agent": "p/zeus", "task": "q-5", "task_code": "provider.auth"}
    assert cli_exit_code(failure) == Exit.TASK_FAILED == 5
    assert TaskResult("p/zeus", "q-6", True).failure() is None


def test_giving_up_on_a_gone_agent_fails_its_pending_tasks_only() -> None:
    outcomes = Outcomes()
    outcomes.queued("p/zeus", "q-7")
    outcomes.queued("p/hera", "q-8")

    outcomes.give_up("p/zeus", "p/zeus stopped before the task ended")

    assert outcomes.pending() == ["q-8"]
    [failed] = outcomes.failures()
    assert (failed.task_id, failed.ok, failed.code) == ("q-7", False, None)
