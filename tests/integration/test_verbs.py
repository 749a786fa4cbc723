"""The scriptable verbs against real agents (SPEC §2, §4.3, §9)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator

import pytest

from tests._wait import wait_for

from .conftest import (
    KEYS,
    START_TIMEOUT_S,
    AgentFactory,
    AgentProcess,
    Bus,
    ateam_cmd,
    run_ateam,
    subprocess_env,
)

pytestmark = pytest.mark.integration

UNREACHABLE = "redis://127.0.0.1:1"


def test_ps_json_lists_agents_and_send_queues_work(
    start_agent: AgentFactory, bus: Bus, redis_url: str
) -> None:
    zeus = start_agent("verbs/zeus")
    hera = start_agent("verbs/hera")

    ps = run_ateam("ps", "--json", "--redis", redis_url)

    assert ps.returncode == 0, ps.stderr
    rows = {row["id"]: row for row in json.loads(ps.stdout)}
    assert set(rows) == {"verbs/zeus", "verbs/hera"}
    assert rows["verbs/zeus"]["pid"] == zeus.pid
    assert rows["verbs/hera"]["pid"] == hera.pid
    for row in rows.values():
        assert row["state"] == "idle"
        assert row["project"] == "verbs"
        assert row["model"] == "echo"

    send = run_ateam("send", "verbs/hera", "hello", "there", "--redis", redis_url)

    assert send.returncode == 0, send.stderr
    task_id = send.stdout.strip()
    assert task_id.startswith("q-")
    ends = wait_for(
        lambda: bus.task_ends("verbs/hera").get(task_id), START_TIMEOUT_S, "the sent task"
    )
    assert ends["ok"] is True
    # send released its ownership again, so the next send (or a console) can write.
    assert not bus.client.exists("ateam:owner:{verbs/hera}")
    tail = run_ateam("tail", "verbs/hera", "--from", "1", "--redis", redis_url)
    assert tail.returncode == 0, tail.stderr
    assert "[A:verbs/hera] echo: hello there" in tail.stdout.splitlines()


@pytest.mark.parametrize(
    "args",
    [
        ("ps", "--json"),
        ("send", "verbs/zeus", "hi"),
        ("tail", "verbs/zeus"),
        ("stop", "verbs/zeus"),
        ("console", "--no-ui"),
    ],
    ids=lambda a: a[0],
)
def test_unreachable_redis_exits_2(args: tuple[str, ...]) -> None:
    result = run_ateam(*args, "--redis", UNREACHABLE, input="/ps\n")

    assert result.returncode == 2, result.stdout + result.stderr
    assert "redis.unavailable" in result.stdout + result.stderr


def test_agent_exits_13_when_redis_is_unreachable_at_start() -> None:
    result = run_ateam(
        "agent", "--project", "verbs", "--name", "zeus", "--redis", UNREACHABLE, "--no-repl"
    )

    assert result.returncode == 13, result.stderr
    assert "redis.unavailable" in result.stderr


@contextlib.contextmanager
def stalled(agent: AgentProcess) -> Iterator[None]:
    """The agent is frozen (SIGSTOP) inside the block: requests wait, nothing answers."""
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(agent.pid, signal.SIGCONT)


def start_send(redis_url: str, agent: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ateam_cmd("send", agent, *args, "--redis", redis_url),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )


def test_concurrent_sends_to_an_unowned_agent_all_get_through(
    start_agent: AgentFactory, bus: Bus, redis_url: str
) -> None:
    agent = "verbs/hera"
    hera = start_agent(agent)
    texts = [f"script {i} says hello" for i in range(5)]
    with stalled(hera):
        # The first send holds its one-call claim while it waits for the frozen agent...
        first = start_send(redis_url, agent, texts[0])
        # (The frozen agent's blocked BLPOP takes the request off the list at once, so
        # the claim is what shows the send is in flight.)
        wait_for(
            lambda: bus.client.hget(KEYS.owner(agent), "kind") == b"call",
            START_TIMEOUT_S,
            "the first send to claim the agent",
        )
        # ...while four more scripts try to claim the agent too.
        others = [start_send(redis_url, agent, text) for text in texts[1:]]

        def all_tried() -> bool:
            claiming = [c for c in bus.client.client_list() if c.get("cmd") == "evalsha"]
            return len(claiming) >= len(others) or any(p.poll() is not None for p in others)

        wait_for(all_tried, START_TIMEOUT_S, "every other send to try to claim the agent")
    procs = [first, *others]
    results = [proc.communicate(timeout=30) for proc in procs]

    for proc, (_, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
    ids = [out.strip() for out, _ in results]
    assert len(set(ids)) == len(texts) and all(i.startswith("q-") for i in ids), ids
    wait_for(
        lambda: all(i in bus.task_ends(agent) for i in ids), START_TIMEOUT_S, "every sent task"
    )
    starts = [b["text"] for _, b in bus.events(agent) if b.get("type") == "task.start"]
    assert sorted(starts) == sorted(texts)  # each text queued exactly once
    assert not bus.client.exists(KEYS.owner(agent))


def test_a_send_that_times_out_says_how_to_check_and_resend_safely(
    start_agent: AgentFactory, bus: Bus, redis_url: str
) -> None:
    agent = "verbs/zeus"
    zeus = start_agent(agent)
    with stalled(zeus):
        send = run_ateam("send", agent, "hello", "--timeout", "1", "--redis", redis_url)

    assert send.returncode == 1, send.stdout + send.stderr
    assert send.stdout == ""
    lines = send.stderr.strip().splitlines()
    assert len(lines) == 1, send.stderr
    line = lines[0]
    assert line.startswith("error [timeout]:"), line
    found = re.search(r"request ([0-9a-f]{32})\b", line)
    assert found is not None, line
    rid = found.group(1)
    assert "may or may not have been queued" in line
    assert f"ateam tail {agent}" in line
    assert f"ateam send {agent} --request-id {rid}" in line

    # Resending with that id is safe whether or not the first attempt got through.
    again = [
        run_ateam("send", agent, "hello", "--request-id", rid, "--redis", redis_url)
        for _ in range(2)
    ]
    assert [r.returncode for r in again] == [0, 0], [r.stderr for r in again]
    task_id = again[0].stdout.strip()
    assert again[1].stdout.strip() == task_id
    wait_for(lambda: task_id in bus.task_ends(agent), START_TIMEOUT_S, "the resent task")
    starts = [b["text"] for _, b in bus.events(agent) if b.get("type") == "task.start"]
    assert starts == ["hello"]


def _ignores_sigpipe(pid: int) -> bool:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        mask = next(line for line in status if line.startswith("SigIgn:")).split()[1]
    return bool(int(mask, 16) & (1 << (signal.SIGPIPE - 1)))


def test_a_closed_stdout_ends_tail_quietly_and_no_process_dies_of_sigpipe(
    start_agent: AgentFactory, redis_url: str
) -> None:
    zeus = start_agent("verbs/zeus")
    # A write to a Redis connection the server has just reset raises SIGPIPE; with its
    # default action restored, that would kill the agent instead of being retried.
    assert _ignores_sigpipe(zeus.pid)
    assert run_ateam("send", "verbs/zeus", "one", "--redis", redis_url).returncode == 0
    tail = subprocess.Popen(
        [*ateam_cmd(), "tail", "verbs/zeus", "--from", "1", "--follow", "--redis", redis_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
    )
    try:
        assert tail.stdout is not None and tail.stdout.readline()
        assert _ignores_sigpipe(tail.pid)
        tail.stdout.close()  # as `| head -1` does once it has its line
        assert run_ateam("send", "verbs/zeus", "two", "--redis", redis_url).returncode == 0

        code = tail.wait(START_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            tail.kill()
    assert tail.stderr is not None
    stderr = tail.stderr.read().decode()
    assert code == 141, stderr  # 128 + SIGPIPE, as a shell shows a reader that left
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
