"""Parallel ``ateam send``s while the supervisor restarts their agent (issue 22 point 7d).

Each send takes a one-call claim around its call. The first one's request waits in the
agent's request list until the restarted agent serves it, so its claim lasts as long as
the restart, back-off included; the other sends must wait for it, bounded by their own
timeout, rather than fail with ``ownership.denied … held for one call``. A console's
claim, which lasts as long as the console stays attached, is still refused at once.

The supervisor's back-off grows with each crash of a short run (1, 2, 5, 10 s), so the
agent is killed four times: the last restart then outlasts the few seconds a one-call
claim used to be waited for.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ateam.client import Target, Team
from ateam.redact import Redactor
from tests._wait import wait_for

from .conftest import KEYS, Bus, ateam_cmd, run_ateam, subprocess_env, write_project

pytestmark = pytest.mark.integration

AGENT = "rs/zeus"
SENDS = 5
KILLS = 4
SEND_TIMEOUT_S = 60.0
"""Each send's ``--timeout``: the last restart takes its 10 s back-off plus a start-up
on a busy machine, and the first send's request waits all of it."""


@pytest.fixture
def supervised(tmp_path: Path, redis_url: str) -> Iterator[Path]:
    root = write_project(tmp_path / "rs", "rs", delay_ms=1)
    up = run_ateam("up", str(root), "--detach", "--redis", redis_url, timeout=60)
    assert up.returncode == 0, up.stdout + up.stderr
    yield root
    run_ateam("up", str(root), "--down", timeout=60)


def serving_pid(bus: Bus, other_than: set[int]) -> int | None:
    """The pid serving the agent, once it is one none of ``other_than``."""
    entry = bus.entry(AGENT)
    if entry is None or entry.get("state") not in ("idle", "busy"):
        return None
    pid = int(entry["pid"])
    if pid in other_than or not bus.client.exists(KEYS.alive(AGENT)):
        return None
    return pid


def started_texts(bus: Bus) -> Counter[str]:
    """How many times each text was started as a task."""
    return Counter(
        str(body.get("text")) for _, body in bus.events(AGENT) if body.get("type") == "task.start"
    )


@pytest.mark.timeout(240)
def test_parallel_sends_during_a_restart_wait_and_each_is_queued_once(
    supervised: Path, bus: Bus, redis_url: str
) -> None:
    killed: set[int] = set()
    for _ in range(KILLS):
        pid = wait_for(lambda: serving_pid(bus, killed), 90, "the agent to serve again")
        os.kill(pid, signal.SIGKILL)
        killed.add(pid)

    # The agent is down, its restart some seconds away: send from several processes.
    texts = [f"restart send {i}" for i in range(SENDS)]
    sends = [
        subprocess.Popen(
            ateam_cmd("send", AGENT, text, "--redis", redis_url, "--timeout", f"{SEND_TIMEOUT_S}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        for text in texts
    ]
    outcomes = [send.communicate(timeout=SEND_TIMEOUT_S * 2) for send in sends]
    for send, (out, err) in zip(sends, outcomes, strict=True):
        assert send.returncode == 0, f"exit {send.returncode}: {out}{err}"
    task_ids = [out.strip() for out, _ in outcomes]
    assert len(set(task_ids)) == SENDS, task_ids

    def drained() -> bool:
        entry = bus.entry(AGENT) or {}
        ended = {str(body["task_id"]) for body in bus.task_end_list(AGENT)}
        return set(task_ids) <= ended and entry.get("queue_len") == 0

    wait_for(drained, 60, "every sent text to be done and the queue empty")
    started = started_texts(bus)
    assert {text: started[text] for text in texts} == {text: 1 for text in texts}
    assert serving_pid(bus, killed) is not None  # the restarted agent did the work


async def test_a_console_claim_still_refuses_a_send_at_once(
    supervised: Path, bus: Bus, redis_url: str, target: Target
) -> None:
    wait_for(lambda: serving_pid(bus, set()), 60, "the agent to serve")
    async with await Team.connect(target, redactor=Redactor()) as console:
        async with console.agent(AGENT).attach():
            send = run_ateam("send", AGENT, "not now", "--redis", redis_url, "--timeout", "60")
    assert send.returncode == 3, send.stdout + send.stderr
    assert f"already attached by console {console.session}" in send.stderr
    assert "after waiting" not in send.stderr
