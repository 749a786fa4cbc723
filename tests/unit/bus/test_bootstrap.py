"""One-time bootstrap tokens against a real Redis (SPEC §11)."""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest
import redis.asyncio as aioredis

from ateam.bus.bootstrap import TOKEN_TTL_S, issue, redeem, token_hash
from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from ateam.cli import build_parser
from ateam.errors import BootstrapRefused
from ateam.exits import AGENT_EXIT, agent_exit_code
from tests._wait import async_wait_for


@pytest.fixture
def keys(target: RedisTarget) -> Keys:
    return Keys(target.namespace)


async def namespace_dump(client: aioredis.Redis, keys: Keys) -> list[bytes]:
    """Every key of the test's namespace and its raw value, as one list of bytes."""
    found: list[bytes] = []
    async for key in client.scan_iter(match=f"{keys.ns}*"):
        found.append(key)
        value = await client.get(key)
        if value is not None:
            found.append(value)
    return found


async def test_only_the_hash_is_stored_with_a_five_minute_ttl(
    client: aioredis.Redis, keys: Keys
) -> None:
    token = await issue(client, keys, agent_id="p/ares", spec={"model": "echo"})

    assert len(bytes.fromhex(token)) == 32
    stored = await namespace_dump(client, keys)
    assert stored == [
        keys.bootstrap("p", hashlib.sha256(token.encode()).hexdigest()).encode(),
        stored[1],
    ]
    assert not any(token.encode() in item for item in stored)
    record = unpack(stored[1])
    assert record["agent_id"] == "p/ares"
    assert record["spec"] == {"model": "echo"}
    assert abs(record["issued_at"] - time.time()) < 60
    ttl = await client.pttl(keys.bootstrap("p", token_hash(token)))
    assert TOKEN_TTL_S * 1000 - 5000 < ttl <= TOKEN_TTL_S * 1000


async def test_a_token_is_always_one_command_line_word(client: aioredis.Redis, keys: Keys) -> None:
    # A token starting with "-" would be read by argparse as an option, not as the value of
    # --bootstrap (URL-safe base64 did that one time in 64 and failed CI once).
    tokens = [await issue(client, keys, agent_id="p/ares", spec={}, ttl_s=5) for _ in range(300)]

    parser = build_parser()
    for token in tokens:
        args = parser.parse_args(
            ["agent", "--project", "p", "--name", "ares", "--bootstrap", token]
        )
        assert args.bootstrap == token


async def test_a_token_works_once(client: aioredis.Redis, keys: Keys) -> None:
    token = await issue(client, keys, agent_id="p/ares", spec={"cwd": "/srv/p"})

    record = await redeem(client, keys, token, agent_id="p/ares")

    assert record["agent_id"] == "p/ares"
    assert record["spec"] == {"cwd": "/srv/p"}
    assert await namespace_dump(client, keys) == []  # deleted on use
    with pytest.raises(BootstrapRefused, match="unknown, expired or already used"):
        await redeem(client, keys, token, agent_id="p/ares")


async def test_two_racing_redemptions_admit_exactly_one(client: aioredis.Redis, keys: Keys) -> None:
    token = await issue(client, keys, agent_id="p/ares", spec={})

    results = await asyncio.gather(
        *(redeem(client, keys, token, agent_id="p/ares") for _ in range(10)),
        return_exceptions=True,
    )

    assert sum(isinstance(r, dict) for r in results) == 1
    assert sum(isinstance(r, BootstrapRefused) for r in results) == 9


async def test_an_expired_token_is_refused(client: aioredis.Redis, keys: Keys) -> None:
    token = await issue(client, keys, agent_id="p/ares", spec={}, ttl_s=0.2)
    key = keys.bootstrap("p", token_hash(token))

    async def expired() -> bool:
        return not await client.exists(key)

    await async_wait_for(expired, 10, "the token to expire", interval=0.05)

    with pytest.raises(BootstrapRefused):
        await redeem(client, keys, token, agent_id="p/ares")


async def test_a_token_for_another_agent_is_refused_and_burnt(
    client: aioredis.Redis, keys: Keys
) -> None:
    token = await issue(client, keys, agent_id="p/ares", spec={})

    with pytest.raises(BootstrapRefused, match="issued for p/ares, not p/zeus"):
        await redeem(client, keys, token, agent_id="p/zeus")
    with pytest.raises(BootstrapRefused):
        await redeem(client, keys, token, agent_id="p/ares")


async def test_unknown_and_garbage_tokens_are_refused(client: aioredis.Redis, keys: Keys) -> None:
    for token in ("", "x" * 43, "not a token at all"):
        with pytest.raises(BootstrapRefused):
            await redeem(client, keys, token, agent_id="p/ares")


def test_a_refused_token_has_its_own_code_and_agent_exit() -> None:
    error = BootstrapRefused("bootstrap token refused: it is unknown, expired or already used")

    assert error.code == "bootstrap.refused"
    assert agent_exit_code(error) == AGENT_EXIT["bootstrap.refused"] == 16
    assert error.one_line().startswith("error [bootstrap.refused]: bootstrap token refused")


async def test_the_texts_a_token_carries_are_stored_redacted(
    client: aioredis.Redis, keys: Keys
) -> None:
    key = "sk-ant-api03-" + "Qw3Er5Ty7Ui9" * 3
    spec = {"model": "echo", "first_task": f"deploy with {key}", "source": "offload"}
    token = await issue(client, keys, agent_id="p/ares", spec=spec)

    assert not any(key.encode() in blob for blob in await namespace_dump(client, keys))
    redeemed = await redeem(client, keys, token, agent_id="p/ares")
    assert redeemed["spec"]["first_task"] == "deploy with ****"


async def test_a_token_lives_in_its_projects_key_space(client: aioredis.Redis, keys: Keys) -> None:
    token = await issue(client, keys, agent_id="p/ares", spec={})
    assert await client.exists(keys.bootstrap("p", token_hash(token)))
    assert keys.bootstrap("p", token_hash(token)).startswith(keys.project_prefix("p"))
    # Presented under another project, it is not found there (a project's Redis user
    # reaches its own project's tokens only) and stays for its own agent.
    with pytest.raises(BootstrapRefused, match="unknown"):
        await redeem(client, keys, token, agent_id="q/ares")
    assert (await redeem(client, keys, token, agent_id="p/ares"))["agent_id"] == "p/ares"
