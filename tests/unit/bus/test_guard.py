"""The eviction guard (SPEC §4): a server that may evict ateam's keys is refused at start.

One real server of the module's own, switched between policies with ``CONFIG SET`` (the
test may; ateam itself only reads ``INFO``). The agent and the client session are
checked through their real start paths.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis

from ateam.agent.runtime.process import Agent
from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget, make_client, resolve_target
from ateam.bus.guard import ALLOW_EVICTION_ENV, MemoryPolicy, check_eviction, read_policy
from ateam.bus.keys import Keys
from ateam.client import Team
from ateam.config import standalone_agent
from ateam.errors import Code, EvictionPolicyRefused, RedisPermissionDenied
from ateam.exits import Exit, agent_exit_code
from ateam.providers import EchoProvider
from ateam.redact import Redactor
from ateam.supervisor import FINAL_EXITS
from tests.servers.redis import RedisProcess

EVICTING = ("allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-ttl")


@pytest.fixture(scope="module")
def policed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """A server started as the issue's: 2 MB and allkeys-lru."""
    server = RedisProcess(
        tmp_path_factory.mktemp("evicting"),
        extra=("--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"),
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def server(policed: RedisProcess) -> Iterator[RedisProcess]:
    """The module's server, set back to 2 MB and allkeys-lru after each test."""
    yield policed
    admin = policed.client()
    admin.config_set("maxmemory", "2mb")
    admin.config_set("maxmemory-policy", "allkeys-lru")
    admin.acl_deluser("noinfo")
    admin.close()


def configure(server: RedisProcess, *, policy: str, maxmemory: str = "2mb") -> None:
    admin = server.client()
    admin.config_set("maxmemory", maxmemory)
    admin.config_set("maxmemory-policy", policy)
    admin.close()


def target_of(server: RedisProcess, namespace: str, **extra: object) -> RedisTarget:
    return RedisTarget(server.url, "test", namespace=namespace, **extra)  # type: ignore[arg-type]


async def check(target: RedisTarget) -> str | None:
    client = make_client(target)
    try:
        return await check_eviction(client, target)
    finally:
        await client.aclose()


@pytest.fixture(autouse=True)
def no_opt_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_EVICTION_ENV, raising=False)


@pytest.mark.parametrize("policy", EVICTING)
async def test_a_policy_that_may_evict_is_refused_with_its_name_and_the_fix(
    server: RedisProcess, namespace: str, policy: str
) -> None:
    configure(server, policy=policy)

    with pytest.raises(EvictionPolicyRefused) as refused:
        await check(target_of(server, namespace))

    error = refused.value
    assert error.code == Code.REDIS_EVICTION_POLICY == "redis.eviction_policy"
    assert error.detail == {"policy": policy, "maxmemory": 2 * 1024 * 1024}
    line = error.one_line()
    assert "\n" not in line
    assert line.startswith("error [redis.eviction_policy]: ")
    assert f"maxmemory-policy {policy}" in line
    assert "CONFIG SET maxmemory-policy noeviction" in line
    assert ALLOW_EVICTION_ENV in line


async def test_noeviction_passes_even_with_a_memory_limit(
    server: RedisProcess, namespace: str
) -> None:
    configure(server, policy="noeviction")

    assert await check(target_of(server, namespace)) is None


async def test_no_memory_limit_passes_whatever_the_policy(
    server: RedisProcess, namespace: str
) -> None:
    configure(server, policy="allkeys-lru", maxmemory="0")

    assert await check(target_of(server, namespace)) is None


async def test_the_policy_is_read_from_info_not_config(
    server: RedisProcess, namespace: str
) -> None:
    # A user without CONFIG (as on managed services) but with INFO is checked all the same.
    admin = server.client()
    admin.acl_setuser(
        "noinfo", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-config"]
    )
    admin.close()
    url = server.url.replace("redis://", "redis://noinfo:pw@")
    target = RedisTarget(url, "test", namespace=namespace)
    client = make_client(target)
    try:
        assert await read_policy(client) == MemoryPolicy("allkeys-lru", 2 * 1024 * 1024)
        with pytest.raises(EvictionPolicyRefused):
            await check_eviction(client, target)
    finally:
        await client.aclose()


async def test_a_user_without_info_is_told_to_grant_it(
    server: RedisProcess, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = server.client()
    admin.acl_setuser(
        "noinfo", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-info"]
    )
    admin.close()
    url = server.url.replace("redis://", "redis://noinfo:pw@")
    target = RedisTarget(url, "test", namespace=namespace)

    with pytest.raises(RedisPermissionDenied) as refused:
        await check(target)
    assert refused.value.code == "redis.noperm"
    assert "+info" in refused.value.one_line()

    # With the opt-out the unknown policy is a warning, not a refusal.
    monkeypatch.setenv(ALLOW_EVICTION_ENV, "1")
    warning = await check(target)
    assert warning is not None and "maxmemory-policy not reported" in warning


async def test_the_environment_opt_out_starts_with_a_loud_warning(
    server: RedisProcess,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(ALLOW_EVICTION_ENV, "1")

    with caplog.at_level(logging.WARNING, logger="ateam.bus.guard"):
        warning = await check(target_of(server, namespace))

    assert warning is not None
    assert "maxmemory-policy allkeys-lru" in warning and ALLOW_EVICTION_ENV in warning
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert logged == [f"warning [redis.eviction_policy]: {warning}"]


@pytest.mark.parametrize("value", ["", "0", "no", "false"])
async def test_an_opt_out_that_is_not_yes_is_no_opt_out(
    server: RedisProcess, namespace: str, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(ALLOW_EVICTION_ENV, value)

    with pytest.raises(EvictionPolicyRefused):
        await check(target_of(server, namespace))


async def test_tools_yaml_allow_eviction_is_an_opt_out(
    server: RedisProcess, namespace: str
) -> None:
    transport = SimpleNamespace(url=server.url, namespace=namespace, allow_eviction=True)
    target = resolve_target(None, transport=transport)
    assert target is not None and target.allow_eviction

    warning = await check(target)

    assert warning is not None and "transport.allow_eviction" in warning
    # Unset (the default), it is no opt-out.
    plain = resolve_target(None, transport=SimpleNamespace(url=server.url, namespace=namespace))
    assert plain is not None and not plain.allow_eviction


async def test_a_team_session_refuses_an_evicting_server(
    server: RedisProcess, namespace: str
) -> None:
    with pytest.raises(EvictionPolicyRefused):
        await Team.connect(target_of(server, namespace), redactor=Redactor())

    configure(server, policy="noeviction")
    async with await Team.connect(target_of(server, namespace), redactor=Redactor()) as team:
        assert await team.agents() == []


async def test_an_agent_refuses_before_it_takes_its_lock(
    server: RedisProcess, namespace: str, tmp_path: Path
) -> None:
    config = standalone_agent("proj", "zeus", tmp_path)
    agent = Agent(config, target_of(server, namespace), EchoProvider())

    with pytest.raises(EvictionPolicyRefused) as refused:
        await agent.start()
    await agent._abandon_start()
    await agent._close_client()

    status = agent_exit_code(refused.value)
    assert status == Exit.EVICTION_POLICY == 19
    assert status in FINAL_EXITS  # a supervisor does not restart it
    keys = Keys(namespace)
    admin: redis.Redis = server.client()
    try:
        assert not admin.exists(keys.lock("proj/zeus"), keys.fence("proj/zeus"))
    finally:
        admin.close()


async def test_an_agent_that_accepts_the_risk_says_so_in_a_warn_event(
    server: RedisProcess, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ALLOW_EVICTION_ENV, "yes")
    # Evicting, with room for a whole agent: this is about the warning, not memory
    # pressure, and 2 MB is less than Redis 7 needs for an agent's connections.
    configure(server, policy="allkeys-lru", maxmemory="32mb")
    config = standalone_agent("proj", "zeus", tmp_path)
    agent = Agent(config, target_of(server, namespace), EchoProvider())
    await agent.start()
    try:
        assert await agent.parts.events.flush(5)
        admin: redis.Redis = server.client()
        try:
            entries = admin.xrange(Keys(namespace).events("proj/zeus"))
        finally:
            admin.close()
        bodies = [unpack(fields[b"d"]) for _, fields in entries]
        warns = [
            b for b in bodies if b["type"] == "warn" and b.get("code") == Code.REDIS_EVICTION_POLICY
        ]
        assert len(warns) == 1 and "allkeys-lru" in warns[0]["msg"]
    finally:
        await agent.stop()
