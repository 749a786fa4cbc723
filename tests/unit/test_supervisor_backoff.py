"""The supervisor's restart backoff, and its reset after a healthy run (issue 13 point 4)."""

from __future__ import annotations

from ateam.supervisor import HEALTHY_AFTER_S, RESTART_BACKOFF_S, restart_delay


def test_quick_failures_wait_longer_each_time_up_to_the_last_step() -> None:
    failures, delays = 0, []
    for _ in range(len(RESTART_BACKOFF_S) + 2):
        delay, failures = restart_delay(failures, ran_s=1.0)
        delays.append(delay)
    assert delays == [*RESTART_BACKOFF_S, RESTART_BACKOFF_S[-1], RESTART_BACKOFF_S[-1]]
    assert failures == len(RESTART_BACKOFF_S) + 2


def test_a_healthy_run_forgets_the_failures_before_it() -> None:
    # An outage (a partition, a Redis restart) left the agent failing to start...
    failures = 0
    for _ in range(4):
        _, failures = restart_delay(failures, ran_s=0.5)
    assert restart_delay(failures, ran_s=0.5)[0] == RESTART_BACKOFF_S[-1]
    # ...then it ran healthy: its next exit is restarted after the first step again.
    delay, failures = restart_delay(failures, ran_s=HEALTHY_AFTER_S)
    assert (delay, failures) == (RESTART_BACKOFF_S[0], 1)
    assert restart_delay(failures, ran_s=0.5)[0] == RESTART_BACKOFF_S[1]


def test_a_run_just_short_of_healthy_keeps_backing_off() -> None:
    delay, failures = restart_delay(3, ran_s=HEALTHY_AFTER_S - 0.1)
    assert (delay, failures) == (RESTART_BACKOFF_S[3], 4)
