"""Bad input gets its stable error code and never takes an agent down (SPEC §4.4, §12)."""

from __future__ import annotations

import math
import time
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from ateam.bus.codec import pack, unpack
from ateam.bus.rpc import RpcClient
from ateam.constants import PROTOCOL_VERSION, RPC_MAX_PAYLOAD
from ateam.errors import BadRequest, NoSuchMethod, PayloadTooLarge

from .conftest import KEYS, AgentFactory, AgentProcess, Bus, ConsoleFactory

pytestmark = pytest.mark.integration

AGENT = "rough/zeus"


@pytest.fixture
def agent(start_agent: AgentFactory) -> AgentProcess:
    return start_agent(AGENT)


async def assert_still_serving(client: aioredis.Redis, agent: AgentProcess) -> None:
    status = await RpcClient(client, KEYS).call(AGENT, "status", timeout=5)
    assert status["pid"] == agent.pid
    assert status["state"] == "idle"
    assert agent.running()


async def test_malformed_msgpack_gets_bad_request(
    client: aioredis.Redis, agent: AgentProcess, bus: Bus
) -> None:
    rid = uuid.uuid4().hex
    await client.rpush(KEYS.rpc(AGENT), rid.encode() + b"\n" + b"\xc1garbage")

    popped = await client.blpop([KEYS.reply(AGENT, rid)], timeout=10)

    assert popped is not None, "the agent never answered a malformed request"
    reply = unpack(popped[1])
    assert reply["ok"] is False
    assert reply["id"] == rid
    assert reply["error"]["code"] == "bad_request"
    await assert_still_serving(client, agent)
    warns = [b for _, b in bus.events(AGENT) if b.get("type") == "warn"]
    assert any(w.get("code") == "bad_request" for w in warns), warns


async def test_unknown_method_gets_no_such_method(
    client: aioredis.Redis, agent: AgentProcess
) -> None:
    with pytest.raises(NoSuchMethod) as caught:
        await RpcClient(client, KEYS).call(AGENT, "no_such_method", timeout=5)

    assert caught.value.code == "no_such_method"
    assert "status" in caught.value.detail["methods"]
    await assert_still_serving(client, agent)


async def test_oversized_payload_is_refused_on_both_sides(
    client: aioredis.Redis, agent: AgentProcess
) -> None:
    big = "x" * (RPC_MAX_PAYLOAD + 1024)
    rpc = RpcClient(client, KEYS, caller="whoever")

    # Client side: never leaves the process.
    with pytest.raises(PayloadTooLarge) as client_side:
        await rpc.call(AGENT, "input", {"text": big}, timeout=5)
    assert client_side.value.code == "payload.too_large"
    assert await client.llen(KEYS.rpc(AGENT)) == 0

    # Server side: the same body pushed raw, past the client's check.
    rid = uuid.uuid4().hex
    body = pack(
        {"id": rid, "method": "input", "params": {"text": big}, "caller": "whoever",
         "deadline": time.time() + 10}
    )  # fmt: skip
    assert len(body) > RPC_MAX_PAYLOAD
    with pytest.raises(PayloadTooLarge) as server_side:
        await rpc.send_raw(AGENT, rid, body, time.time() + 10)
    assert server_side.value.code == "payload.too_large"
    assert "bytes exceeds" in server_side.value.message

    await assert_still_serving(client, agent)
    queue = await RpcClient(client, KEYS).call(AGENT, "queue.list", timeout=5)
    assert queue["current"] is None and queue["pending"] == []


async def test_unusable_deadlines_and_newer_versions_get_bad_request(
    client: aioredis.Redis, agent: AgentProcess
) -> None:
    rpc = RpcClient(client, KEYS)
    for deadline in (math.nan, math.inf, -math.inf):
        body = pack({"method": "status", "params": {}, "deadline": deadline})
        with pytest.raises(BadRequest) as caught:
            await rpc.send_raw(AGENT, uuid.uuid4().hex, body, time.time() + 5)
        assert "deadline" in caught.value.message, deadline

    newer = PROTOCOL_VERSION + 1
    body = pack({"v": newer, "method": "status", "params": {}, "deadline": time.time() + 10})
    with pytest.raises(BadRequest) as caught:
        await rpc.send_raw(AGENT, uuid.uuid4().hex, body, time.time() + 5)
    assert f"version {newer}" in caught.value.message
    assert f"version {PROTOCOL_VERSION}" in caught.value.message
    await assert_still_serving(client, agent)


def test_invalid_yaml_exits_12_naming_the_file(start_agent: AgentFactory, tmp_path: Path) -> None:
    root = tmp_path / "broken"
    agent_dir = root / ".ateam" / "agents" / "zeus"
    agent_dir.mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: broken\n")
    bad = agent_dir / "agent.yaml"
    bad.write_text("model: [echo\ntools: {allow: [plan.*]\n")

    proc = start_agent("broken/zeus", cwd=root, wait=False)

    assert proc.wait_exit() == 12
    lines = [line for line in proc.stderr().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert str(bad) in lines[0]
    assert "config.invalid" in lines[0]


def test_one_forged_stream_entry_does_not_silence_the_consoles(
    agent: AgentProcess, start_console: ConsoleFactory, bus: Bus
) -> None:
    watcher = start_console()
    watcher.send(f"/tail {AGENT}")
    owner = start_console()
    owner.send(f"/attach {AGENT}")
    owner.wait_line(f"*** attached to {AGENT} as its writer")
    owner.send("before the forgery")
    owner.wait_line(f"[A:{AGENT}] echo: before the forgery")
    watcher.wait_line(f"[A:{AGENT}] echo: before the forgery")

    # One XADD by anyone who can reach Redis: every later id looked stale, for ever.
    bus.client.xadd(KEYS.events(AGENT), {"d": b"forged"}, id="999999999999-0")
    owner.wait_line(lambda line: "999999999999" in line and "not written by" in line)

    owner.send("after the forgery")
    for console in (owner, watcher):
        console.wait_line(f"[A:{AGENT}] echo: after the forgery")
        console.wait_line(lambda line: "tail rewind" in line)
    warns = [b for _, b in bus.events(AGENT) if b.get("code") == "events.forged"]
    assert len(warns) == 1 and "999999999999-0" in warns[0]["msg"]
    ids = [int(entry_id.split(b"-")[0]) for entry_id, _ in bus.client.xrange(KEYS.events(AGENT))]
    assert max(ids) < 10**6 and ids == sorted(ids)
    assert agent.running()
