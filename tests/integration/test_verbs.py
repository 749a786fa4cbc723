"""The scriptable verbs against real agents (SPEC §2, §4.3, §9)."""

from __future__ import annotations

import json

import pytest

from .conftest import START_TIMEOUT_S, AgentFactory, Bus, run_ateam, wait_until

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
    ends = wait_until(
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
