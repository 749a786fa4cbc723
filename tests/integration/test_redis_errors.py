"""Honest errors, no loops (issue 13 point 3), with real ``ateam`` processes and servers.

NOPERM, refused credentials, OOM and READONLY each reach people as one line with their
own code. Permission and credential refusals are final: the supervisor does not restart
the agent, and ``ateam up --detach`` exits non-zero naming the agent and the cause.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests._wait import wait_for
from tests.servers.redis import RedisProcess

from .conftest import (
    START_TIMEOUT_S,
    AgentFactory,
    ateam_cmd,
    run_ateam,
    subprocess_env,
    write_project,
)

pytestmark = pytest.mark.integration

ServerFactory = Callable[..., RedisProcess]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerFactory]:
    """``server(*extra)`` → a running server of the test's own."""
    started: list[RedisProcess] = []

    def start(*extra: str) -> RedisProcess:
        process = RedisProcess(tmp_path / f"server-{len(started)}", extra=extra)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def down() -> Iterator[list[Path]]:
    """Projects to bring down at the end, whatever happened."""
    started: list[Path] = []
    yield started
    for root in started:
        run_ateam("up", str(root), "--down", timeout=60)


def add_user(server: RedisProcess, name: str, *rules: str) -> str:
    """An ACL user with password ``pw``; returns its URL."""
    admin = server.client()
    try:
        admin.execute_command("ACL", "SETUSER", name, "on", ">pw", *rules)
    finally:
        admin.close()
    return server.url.replace("redis://", f"redis://{name}:pw@")


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error [")]


def test_a_permission_refused_at_start_is_final_and_up_names_the_agent(
    server: ServerFactory, tmp_path: Path, isolated_home: Path, down: list[Path]
) -> None:
    # A least-privilege user of another project: PING and INFO pass, the agent's keys not.
    url = add_user(server(), "other", "~elsewhere:*", "&*", "+@all")
    root = write_project(tmp_path / "proj", "hello")
    down.append(root)

    up = run_ateam("up", str(root), "--detach", "--redis", url, timeout=60)

    assert up.returncode == 1, up.stdout + up.stderr
    assert "hello/zeus: FAILED, exited with 17" in up.stdout
    assert "error [redis.noperm]" in up.stdout
    [summary] = error_lines(up.stderr)
    assert summary.startswith("error [spawn.failed]: ") and "hello/zeus" in summary
    # Final: the supervisor does not restart it, and with nothing left to keep, it leaves.
    wait_for(
        lambda: not (isolated_home / "run" / "hello.json").exists(),
        START_TIMEOUT_S,
        "the supervisor to leave",
    )
    state = root / ".ateam" / "agents" / "zeus" / "state"
    log = (state / "agent.log").read_text()
    assert len(error_lines(log)) == 1, log
    assert log.count("supervisor: zeus exited with 17") == 1
    assert "not restarting" in log
    record = json.loads((state / "exit.json").read_text())
    assert record["code"] == 17 and record["final"] and "redis.noperm" in record["cause"]


def test_up_detach_names_the_one_agent_that_did_not_come_up(
    redis_url: str, tmp_path: Path, down: list[Path]
) -> None:
    root = write_project(tmp_path / "proj", "hello", agents=("zeus", "hera"))
    down.append(root)
    # hera's queue is damaged beyond repair (an instance running elsewhere is no
    # failure: `up` leaves a running agent alone, see test_cli_lifecycle.py).
    state = root / ".ateam" / "agents" / "hera" / "state"
    state.mkdir(parents=True)
    (state / "queue.jsonl").write_bytes(b'{"op":"add"' + b"x" * (1024 * 1024 + 10))

    up = run_ateam("up", str(root), "--detach", "--redis", redis_url, timeout=60)

    assert up.returncode == 1, up.stdout + up.stderr
    lines = up.stdout.splitlines()
    assert any(line.startswith("hello/zeus: started") for line in lines), up.stdout
    [hera] = [line for line in lines if line.startswith("hello/hera:")]
    assert "FAILED, exited with 20" in hera and "storage.corrupt" in hera
    [summary] = error_lines(up.stderr)
    assert "1 of 2 agents" in summary and "hello/hera" in summary
    assert "hello/zeus" not in summary


def test_up_detach_reports_an_agent_that_keeps_failing(
    server: ServerFactory, tmp_path: Path, down: list[Path]
) -> None:
    # A replica answers PING and INFO, so up starts the agents; each start is refused
    # (READONLY), restartable, so up waits its bound and reports the last cause.
    primary = server()
    replica = server("--replicaof", "127.0.0.1", str(primary.port))
    root = write_project(tmp_path / "proj", "hello")
    down.append(root)

    up = run_ateam("up", str(root), "--detach", "--redis", replica.url, timeout=90)

    assert up.returncode == 1, up.stdout + up.stderr
    [zeus] = [line for line in up.stdout.splitlines() if line.startswith("hello/zeus:")]
    assert "FAILED, exited with 13 (restarting)" in zeus and "error [redis.readonly]" in zeus
    assert "hello/zeus" in error_lines(up.stderr)[0]


def test_wrong_password_is_one_line_with_its_code_everywhere(
    server: ServerFactory, start_agent: AgentFactory, tmp_path: Path
) -> None:
    redis = server()
    add_user(redis, "alice", "~*", "&*", "+@all")
    wrong = redis.url.replace("redis://", "redis://alice:not-it@")

    agent = start_agent("hello/zeus", redis_url=wrong, wait=False)
    assert agent.wait_exit() == 18  # final
    [line] = error_lines(agent.stderr())
    assert line.startswith("error [redis.auth]: ") and "not-it" not in line

    for command in (("ps",), ("console", "--no-ui"), ("send", "hello/zeus", "hi")):
        result = run_ateam(*command, "--redis", wrong, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stdout + result.stderr)
        [line] = error_lines(result.stdout + result.stderr)
        assert line.startswith("error [redis.auth]: ") and "not-it" not in line

    up = run_ateam(
        "up", str(write_project(tmp_path / "proj", "hello")), "--detach", "--redis", wrong
    )
    assert up.returncode == 2 and error_lines(up.stderr)[0].startswith("error [redis.auth]")


def test_a_replica_is_readonly(
    server: ServerFactory, start_agent: AgentFactory, tmp_path: Path
) -> None:
    primary = server()
    replica = server("--replicaof", "127.0.0.1", str(primary.port))

    agent = start_agent("hello/zeus", redis_url=replica.url, wait=False)
    assert agent.wait_exit() == 13  # not final: a failover may make it writable
    [line] = error_lines(agent.stderr())
    assert line.startswith("error [redis.readonly]: ")

    send = run_ateam("send", "hello/zeus", "hi", "--redis", replica.url, cwd=tmp_path)
    assert send.returncode == 2
    [line] = error_lines(send.stderr)
    assert line.startswith("error [redis.readonly]: ")


def test_a_full_server_is_oom(
    server: ServerFactory, start_agent: AgentFactory, tmp_path: Path
) -> None:
    full = server("--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
    admin = full.client()
    try:
        # Lifted for a moment so one value takes the server far past its limit: a fill
        # that stops at the first OOM leaves it just below, and the next write passes.
        admin.config_set("maxmemory", "0")
        admin.set("ballast", b"x" * (3 * 1024 * 1024))
        admin.config_set("maxmemory", "1mb")
    finally:
        admin.close()

    agent = start_agent("hello/zeus", redis_url=full.url, wait=False)
    assert agent.wait_exit() == 13  # not final: memory may be freed
    [line] = error_lines(agent.stderr())
    assert line.startswith("error [redis.oom]: ")

    send = run_ateam("send", "hello/zeus", "hi", "--redis", full.url, cwd=tmp_path)
    assert send.returncode == 2, send.stdout + send.stderr
    [line] = error_lines(send.stderr)
    assert line.startswith("error [redis.oom]: ")


def test_a_permission_refused_after_start_stops_the_agent_finally(
    server: ServerFactory, tmp_path: Path
) -> None:
    # Everything but XADD: the agent starts, then its first event is refused.
    url = add_user(server(), "noxadd", "~*", "&*", "+@all", "-xadd")
    root = write_project(tmp_path / "proj", "hello")
    agent = subprocess.run(
        ateam_cmd("agent", "--project", "hello", "--name", "zeus", "--no-repl", "--redis", url),
        cwd=root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )
    assert agent.returncode == 17, agent.stderr  # final: a supervisor would not restart it
    assert "error [redis.noperm]" in agent.stderr
    assert "Traceback" not in agent.stderr
