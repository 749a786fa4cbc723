"""ateam on a Sentinel-watched master (issue 13 point 6): ``redis+sentinel://``.

A real master, replica and Sentinel. ``ateam up`` starts an agent on the master; two
inputs are acknowledged, the master is killed mid-task and the Sentinel promotes the
replica. The same agent process goes on: both inputs end, a new ``ateam send`` is
answered, and a plain console attaches and talks to it on the new master.

``ateam acl --apply`` makes its user on the master and on the replica (users are not
replicated), so the project's user still logs in after a failover.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.sentinel import Sentinel

from tests._wait import wait_for
from tests.servers.sentinel import MASTER_NAME, SentinelSet

from .conftest import (
    START_TIMEOUT_S,
    Bus,
    ConsoleFactory,
    attach_and_send,
    run_ateam,
    write_project,
)

pytestmark = [pytest.mark.integration, pytest.mark.redis_matrix]

FAILOVER_S = 30.0
"""Sentinel's detection (1 s here) and promotion, and the agent's reconnection, on 2 busy cores."""


class SentinelBus(Bus):
    """The tests' view of the bus (:class:`Bus`) through the master Sentinel names now."""

    def __init__(self, servers: SentinelSet) -> None:
        self.url = servers.url
        self._sentinel = Sentinel([("127.0.0.1", servers.sentinel_port)])
        self.client = self._sentinel.master_for(MASTER_NAME)

    def close(self) -> None:
        super().close()
        for sentinel in self._sentinel.sentinels:
            sentinel.close()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[SentinelSet]:
    servers = SentinelSet(tmp_path / "sentinel-set")
    servers.start()
    yield servers
    servers.stop()


@pytest.fixture
def sbus(servers: SentinelSet) -> Iterator[SentinelBus]:
    bus = SentinelBus(servers)
    yield bus
    bus.close()


def _send(url: str, agent: str, text: str) -> str:
    sent = run_ateam("send", agent, text, "--redis", url)
    assert sent.returncode == 0, sent.stderr
    return sent.stdout.strip()


def test_agent_goes_on_after_a_failover_and_loses_no_acknowledged_input(
    servers: SentinelSet, sbus: SentinelBus, start_console: ConsoleFactory, tmp_path: Path
) -> None:
    agent = "vault/zeus"
    url = servers.url
    root = write_project(tmp_path / "vault", "vault", delay_ms=100)
    up = run_ateam("up", "--detach", "--redis", url, str(root), timeout=60)
    try:
        assert up.returncode == 0, up.stdout + up.stderr

        def serving() -> dict[str, Any] | None:
            entry = sbus.entry(agent)
            return entry if entry is not None and entry.get("state") == "idle" else None

        pid = wait_for(serving, START_TIMEOUT_S, f"{agent} to serve")["pid"]
        long_text = " ".join(f"word{i}" for i in range(40))  # ~4 s of streaming
        first = _send(url, agent, long_text)
        second = _send(url, agent, "queued before the failover")

        def streaming() -> bool:
            return any(
                b.get("type") == "token" and b.get("task_id") == first
                for _, b in sbus.events(agent)
            )

        wait_for(streaming, START_TIMEOUT_S, "the first task to stream")
        assert second not in sbus.task_ends(agent)

        servers.kill_master()

        def ended(*tasks: str) -> bool:
            ends = sbus.task_ends(agent)
            return all(task in ends for task in tasks)

        wait_for(
            lambda: ended(first, second),
            FAILOVER_S,
            "both acknowledged inputs to end on the new master",
            ignore=(redis.RedisError,),
        )
        third = _send(url, agent, "after the failover")
        wait_for(lambda: ended(third), START_TIMEOUT_S, "the new input to end")
        ends = sbus.task_ends(agent)
        assert all(ends[t]["ok"] is True for t in (first, second, third)), ends
        entry = sbus.entry(agent)
        assert entry is not None and entry["pid"] == pid, "the agent was restarted"

        console = start_console(redis_url=url)
        attach_and_send(console, agent, "hello from a console")
        console.wait_line("echo: hello from a console")
        console.send("/quit")
        assert console.wait_exit() == 0
    finally:
        down = run_ateam("up", "--down", "--redis", url, str(root), timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr


def test_acl_apply_makes_the_user_on_the_replica_too(servers: SentinelSet, tmp_path: Path) -> None:
    user, password = "hello-user", "hello-password-0123456789"
    secret = tmp_path / "hello.password"
    secret.write_text(password + "\n")
    made = run_ateam(
        "acl", "hello", "--apply", "--user", user, "--password-file", str(secret),
        "--redis", servers.url,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    for node in (servers.master, servers.replica):
        assert node is not None
        with node.client() as client:
            assert client.acl_getuser(user) is not None, f"no {user} on {node.port}"

    sentinel = servers.url.removeprefix("redis+sentinel://")
    as_user = f"redis+sentinel://{user}:{password}@{sentinel}"
    assert run_ateam("ps", "--redis", as_user).returncode == 0
    servers.kill_master()
    # The promoted replica knows the user: the project's verbs go on as before.
    listed = run_ateam("ps", "--json", "--redis", as_user)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
