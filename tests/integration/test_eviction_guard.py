"""The eviction guard end to end (issue 13 point 1): real ``ateam`` processes on a real
server started with ``--maxmemory 2mb --maxmemory-policy allkeys-lru``.

The agent, the console, the verbs and ``ateam up`` refuse it with ``redis.eviction_policy``
before touching anything; the opt-out (``ATEAM_ALLOW_EVICTION``, ``tools.yaml``
``transport.allow_eviction``) lets them start with a warning; ``noeviction`` and
``maxmemory 0`` pass. Under that opt-out and real memory pressure, the agent's lock and
fence are evicted behind its back: no second instance gets in, and the agent re-takes
its identity with a higher fence once the pressure passes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ateam.bus.codec import unpack
from ateam.bus.keys import Keys
from ateam.constants import LOCK_TTL_S
from tests._wait import wait_for
from tests.servers.redis import RedisProcess

from .conftest import (
    START_TIMEOUT_S,
    AgentFactory,
    AgentProcess,
    Bus,
    run_ateam,
    subprocess_env,
    wait_serving,
    write_project,
)

pytestmark = pytest.mark.integration

CODE = "redis.eviction_policy"
ServerFactory = Callable[..., RedisProcess]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerFactory]:
    """``server(policy, maxmemory="2mb")`` → a running server of the test's own."""
    started: list[RedisProcess] = []

    def start(policy: str = "allkeys-lru", maxmemory: str = "2mb") -> RedisProcess:
        process = RedisProcess(
            tmp_path / f"server-{len(started)}",
            extra=("--maxmemory", maxmemory, "--maxmemory-policy", policy),
        )
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error [")]


def test_an_agent_refuses_an_evicting_server_and_takes_no_lock(
    server: ServerFactory, start_agent: AgentFactory
) -> None:
    evicting = server()

    agent = start_agent("hello/zeus", redis_url=evicting.url, wait=False)

    assert agent.wait_exit() == 19, agent.stderr()
    [line] = error_lines(agent.stderr())
    assert line.startswith(f"error [{CODE}]: ")
    assert "maxmemory-policy allkeys-lru" in line
    assert "CONFIG SET maxmemory-policy noeviction" in line
    keys = Keys()
    admin = evicting.client()
    try:
        assert not admin.exists(keys.lock("hello/zeus"), keys.fence("hello/zeus"))
        assert admin.dbsize() == 0  # refused before writing anything at all
    finally:
        admin.close()


def test_the_console_and_the_verbs_refuse_an_evicting_server(
    server: ServerFactory, tmp_path: Path
) -> None:
    url = server().url
    for command in (
        ("console", "--no-ui"),
        ("ps",),
        ("send", "hello/zeus", "hi"),
        ("tasks", "ls", "--project", "hello"),
    ):
        result = run_ateam(*command, "--redis", url, cwd=tmp_path)
        out = result.stdout + result.stderr
        assert result.returncode == 2, (command, out)
        assert f"error [{CODE}]" in out and "allkeys-lru" in out, (command, out)
        assert "Traceback" not in out


def test_up_refuses_before_starting_anything(
    server: ServerFactory, tmp_path: Path, isolated_home: Path
) -> None:
    root = write_project(tmp_path / "proj", "hello")

    up = run_ateam("up", str(root), "--detach", "--redis", server().url, timeout=60)

    assert up.returncode == 2, up.stdout + up.stderr
    assert error_lines(up.stderr)[0].startswith(f"error [{CODE}]: ")
    assert not (isolated_home / "run" / "hello.json").exists()  # no supervisor
    assert not (root / ".ateam" / "agents" / "zeus" / "state" / "agent.log").exists()


def wait_up(url: str, agent: AgentProcess) -> None:
    bus = Bus(url)
    try:
        wait_serving(bus, agent)
    finally:
        bus.close()


@pytest.mark.parametrize("how", ["env", "tools.yaml"])
def test_the_opt_out_starts_with_a_warning_every_time(
    server: ServerFactory, start_agent: AgentFactory, tmp_path: Path, how: str
) -> None:
    # An evicting policy with room to spare: this is about the warning at each start, and
    # 2 MB is too little for Redis 7 to keep an agent's connections and its stream.
    evicting = server(maxmemory="32mb")
    project = write_project(tmp_path / "proj", "hello")
    env = {"ATEAM_ALLOW_EVICTION": "1"} if how == "env" else {}
    if how == "tools.yaml":
        (project / ".ateam" / "tools.yaml").write_text("transport:\n  allow_eviction: true\n")
    why = "ATEAM_ALLOW_EVICTION is set" if how == "env" else "transport.allow_eviction"

    for start in (1, 2):  # said at every start, not once
        agent = start_agent("hello/zeus", redis_url=evicting.url, wait=False, env=env, cwd=project)
        wait_up(evicting.url, agent)
        warned = [line for line in agent.stderr().splitlines() if f"warning [{CODE}]" in line]
        assert len(warned) == 1 and "WARNING" in warned[0] and why in warned[0], agent.stderr()
        bus = Bus(evicting.url)
        try:
            warns = [
                body
                for _, body in bus.events("hello/zeus")
                if body["type"] == "warn" and body.get("code") == CODE
            ]
        finally:
            bus.close()
        assert len(warns) == start
        assert agent.terminate() == 0

    ps = run_ateam("ps", "--redis", evicting.url, cwd=project, env=subprocess_env(**env))
    assert ps.returncode == 0, ps.stderr
    assert f"warning [{CODE}]" in ps.stderr


@pytest.mark.parametrize(
    ("policy", "maxmemory"),
    [("noeviction", "2mb"), ("allkeys-lru", "0")],
    ids=["noeviction", "no-limit"],
)
def test_a_server_that_never_evicts_passes_without_a_warning(
    server: ServerFactory, start_agent: AgentFactory, policy: str, maxmemory: str
) -> None:
    safe = server(policy, maxmemory)

    agent = start_agent("hello/zeus", redis_url=safe.url, wait=False)
    wait_up(safe.url, agent)

    assert CODE not in agent.stderr()
    ps = run_ateam("ps", "--redis", safe.url)
    assert ps.returncode == 0 and "hello/zeus" in ps.stdout, ps.stderr
    assert CODE not in ps.stderr


class Pressure:
    """Memory pressure: a thread writing fresh 1 KiB values as fast as the server takes
    them, so ``allkeys-lru`` evicts whatever was touched least recently — sooner or
    later every key of the agent, its lock and fence among them."""

    def __init__(self, server: RedisProcess) -> None:
        self._client = server.client()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="pressure", daemon=True)
        self.written = 0

    def _fill(self) -> None:
        value = b"x" * 1024
        while not self._stop.is_set():
            pipe = self._client.pipeline(transaction=False)
            for i in range(200):
                pipe.set(f"filler:{self.written + i}", value)
            pipe.execute()
            self.written += 200

    def __enter__(self) -> Pressure:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._client.flushdb()  # the memory back, as when the pressure passes
        self._client.close()


@pytest.mark.timeout(180)
def test_evicted_lock_and_fence_never_let_a_second_instance_in(
    server: ServerFactory, start_agent: AgentFactory, tmp_path: Path
) -> None:
    evicting = server("allkeys-lru", "4mb")
    project = write_project(tmp_path / "proj", "hello")
    env = {"ATEAM_ALLOW_EVICTION": "1"}
    first = start_agent("hello/zeus", redis_url=evicting.url, wait=False, env=env, cwd=project)
    wait_up(evicting.url, first)
    keys = Keys()
    lock, fence = keys.lock("hello/zeus"), keys.fence("hello/zeus")
    admin = evicting.client()
    try:
        first_fence = int(admin.get(fence) or 0)
        assert first_fence >= 1
        with Pressure(evicting):
            # EXISTS does not count as a use for the LRU clock: watching does not
            # keep the keys alive.
            wait_for(
                lambda: not admin.exists(lock) and not admin.exists(fence),
                60,
                "the lock and the fence to be evicted",
            )
            assert int(admin.info("stats")["evicted_keys"]) > 0
            # While the pressure lasts, the lock is gone again and again: a second
            # instance would get it, and the first would find itself replaced.
            second = start_agent(
                "hello/zeus", redis_url=evicting.url, wait=False, env=env, cwd=project
            )
            assert second.wait_exit() == 11, second.stderr()
            assert "Another instance of hello/zeus is already registered" in second.stderr()
            assert f"pid {first.pid}" in second.stderr()
            assert first.running(), first.stderr()
        # The pressure over, the agent re-takes its identity, with a fence above any
        # it was issued (its local high-water mark: Redis lost the counter)...
        wait_for(
            lambda: admin.exists(lock) and int(admin.get(fence) or 0) > first_fence,
            LOCK_TTL_S + 10,
            "the agent to re-take its lock",
        )
        assert unpack(admin.get(lock))["pid"] == first.pid  # type: ignore[arg-type]
        wait_up(evicting.url, first)  # ...re-registers, and serves
        send = run_ateam(
            "send", "hello/zeus", "still", "here", "--redis", evicting.url,
            cwd=project, env=subprocess_env(**env),
        )  # fmt: skip
        assert send.returncode == 0, send.stderr
        bus = Bus(evicting.url)
        try:
            ends = wait_for(
                lambda: bus.task_ends("hello/zeus").get(send.stdout.strip()),
                START_TIMEOUT_S,
                "the task sent after the pressure",
            )
        finally:
            bus.close()
        assert ends["ok"] is True
        assert first.running()
        assert "Traceback" not in first.stderr() + second.stderr()
    finally:
        admin.close()
