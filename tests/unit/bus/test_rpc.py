"""RPC, lock, ownership and registry against a real Redis."""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus.codec import pack, unpack
from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from ateam.bus.lock import InstanceLock
from ateam.bus.ownership import Ownership, token_digest
from ateam.bus.registry import AgentEntry, Heartbeat, Registry
from ateam.bus.rpc import Call, Method, RefusalFold, Refused, RpcClient, RpcServer
from ateam.constants import PROTOCOL_VERSION, RPC_MAX_PAYLOAD
from ateam.errors import (
    AgentNotFound,
    BadRequest,
    DuplicateInstance,
    LockLost,
    NoSuchMethod,
    OwnershipDenied,
    PayloadTooLarge,
    RpcTimeout,
)
from ateam.wire.ownership import OwnerKind

AGENT = "proj/zeus"
TOKEN_A = "secret-of-console-a"


@pytest.fixture
async def server(client: aioredis.Redis, target: RedisTarget) -> AsyncIterator[dict[str, Any]]:
    keys = Keys(target.namespace)
    calls: list[Call] = []
    owner: dict[str, str | None] = {"session": "console:a", "token": TOKEN_A}

    async def echo(call: Call) -> Any:
        calls.append(call)
        return {"params": call.params, "caller": call.caller}

    async def add(call: Call) -> Any:
        calls.append(call)
        return len(calls)

    async def boom(call: Call) -> Any:
        raise RuntimeError("kaput")

    async def current_owner() -> tuple[str, str] | None:
        session, token = owner["session"], owner["token"]
        if session is None:
            return None
        return session, token_digest(token) if token is not None else ""

    methods = {
        "echo": Method("echo", echo, False, ""),
        "add": Method("add", add, True, ""),
        "boom": Method("boom", boom, False, ""),
    }
    bad: list[str] = []
    srv = RpcServer(
        client,
        keys,
        AGENT,
        methods,
        current_owner=current_owner,
        on_bad_request=lambda refused: bad.append(refused.message),
    )
    await client.set(keys.alive(AGENT), b"1")
    srv.start()
    yield {"keys": keys, "calls": calls, "owner": owner, "bad": bad, "server": srv}
    await srv.aclose()


async def test_round_trip_and_caller(client: aioredis.Redis, server: dict[str, Any]) -> None:
    rpc = RpcClient(client, server["keys"], caller="console:a")
    value = await rpc.call(AGENT, "echo", {"x": [1, "two"]})
    assert value == {"params": {"x": [1, "two"]}, "caller": "console:a"}


async def test_unknown_method(client: aioredis.Redis, server: dict[str, Any]) -> None:
    with pytest.raises(NoSuchMethod) as err:
        await RpcClient(client, server["keys"]).call(AGENT, "nope")
    assert err.value.code == "no_such_method"
    assert "echo" in err.value.detail["methods"]


async def test_handler_crash_is_an_internal_error_and_server_keeps_serving(
    client: aioredis.Redis, server: dict[str, Any]
) -> None:
    rpc = RpcClient(client, server["keys"])
    with pytest.raises(Exception) as err:
        await rpc.call(AGENT, "boom")
    assert getattr(err.value, "code", None) == "internal"
    assert await rpc.call(AGENT, "echo") == {"params": {}, "caller": None}


async def test_mutating_call_checked_against_owner(
    client: aioredis.Redis, server: dict[str, Any]
) -> None:
    with pytest.raises(OwnershipDenied):
        await RpcClient(client, server["keys"], caller="console:b", auth=TOKEN_A).call(AGENT, "add")
    assert await RpcClient(client, server["keys"], "console:a", TOKEN_A).call(AGENT, "add") == 1
    server["owner"]["session"] = None
    with pytest.raises(OwnershipDenied):
        await RpcClient(client, server["keys"], caller="console:a", auth=TOKEN_A).call(AGENT, "add")
    assert len(server["calls"]) == 1
    # Read-only calls are open to everyone.
    assert await RpcClient(client, server["keys"], caller="x").call(AGENT, "echo")


async def test_mutating_call_needs_the_owner_token_not_just_the_session(
    client: aioredis.Redis, server: dict[str, Any]
) -> None:
    keys = server["keys"]
    digest = token_digest(TOKEN_A)
    for auth in (None, "guess", digest, TOKEN_A.upper()):
        with pytest.raises(OwnershipDenied) as err:
            await RpcClient(client, keys, caller="console:a", auth=auth).call(AGENT, "add")
        assert "token" in err.value.message
    # A claim stored without a token admits nobody.
    server["owner"]["token"] = None
    with pytest.raises(OwnershipDenied):
        await RpcClient(client, keys, caller="console:a", auth=TOKEN_A).call(AGENT, "add")
    assert server["calls"] == []
    # The token travels only in the request, never into what a handler sees.
    server["owner"]["token"] = TOKEN_A
    assert await RpcClient(client, keys, caller="console:a", auth=TOKEN_A).call(AGENT, "add") == 1
    assert TOKEN_A not in repr(server["calls"][0])
    assert TOKEN_A not in repr(RpcClient(client, keys, caller="console:a", auth=TOKEN_A))


async def test_mutating_call_is_idempotent_by_request_id(
    client: aioredis.Redis, server: dict[str, Any]
) -> None:
    rpc = RpcClient(client, server["keys"], caller="console:a", auth=TOKEN_A)
    first = await rpc.call(AGENT, "add", request_id="r1")
    again = await rpc.call(AGENT, "add", request_id="r1")
    other = await rpc.call(AGENT, "add", request_id="r2")
    assert (first, again, other) == (1, 1, 2)
    assert len(server["calls"]) == 2


async def test_a_request_id_reused_by_a_stranger_neither_reads_nor_poisons_the_cache(
    client: aioredis.Redis, server: dict[str, Any]
) -> None:
    keys = server["keys"]
    owner = RpcClient(client, keys, caller="console:a", auth=TOKEN_A)
    stranger = RpcClient(client, keys, caller="console:a", auth="a guess")
    # A refusal planted first under the id the owner will use...
    with pytest.raises(OwnershipDenied):
        await stranger.call(AGENT, "add", request_id="r9")
    # ...is not what the owner is served, and the owner's reply is not the stranger's.
    assert await owner.call(AGENT, "add", request_id="r9") == 1
    with pytest.raises(OwnershipDenied):
        await stranger.call(AGENT, "add", request_id="r9")
    assert await owner.call(AGENT, "add", request_id="r9") == 1  # still idempotent
    assert len(server["calls"]) == 1


async def test_oversized_payload_refused_on_both_sides(
    client: aioredis.Redis, server: dict[str, Any]
) -> None:
    rpc = RpcClient(client, server["keys"], caller="console:a")
    big = {"text": "x" * (RPC_MAX_PAYLOAD + 1)}
    with pytest.raises(PayloadTooLarge):
        await rpc.call(AGENT, "echo", big)
    body = pack({"method": "echo", "params": big})
    with pytest.raises(PayloadTooLarge) as err:
        await rpc.send_raw(AGENT, "raw1", body, time.time() + 5)
    assert err.value.code == "payload.too_large"
    assert server["calls"] == []


async def test_malformed_msgpack_gets_bad_request(
    client: aioredis.Redis, server: dict[str, Any]
) -> None:
    rpc = RpcClient(client, server["keys"])
    with pytest.raises(BadRequest) as err:
        await rpc.send_raw(AGENT, "raw2", b"\xc1\xc1 not msgpack", time.time() + 5)
    assert err.value.code == "bad_request"
    with pytest.raises(BadRequest):
        await rpc.send_raw(AGENT, "raw3", pack({"method": 5}), time.time() + 5)
    assert server["bad"]
    assert await rpc.call(AGENT, "echo") is not None


async def test_request_without_id_is_dropped_not_fatal(
    client: aioredis.Redis, server: dict[str, Any]
) -> None:
    keys = server["keys"]
    await client.rpush(keys.rpc(AGENT), b"garbage-without-newline")
    assert await RpcClient(client, keys).call(AGENT, "echo") is not None
    assert any("without an id" in line for line in server["bad"])


def test_refusals_after_the_first_are_folded_into_one_report_per_interval() -> None:
    told: list[Refused] = []
    fold = RefusalFold(told.append, interval_s=5.0)

    fold.add("bad_request: not msgpack", now=100.0)  # the first is told at once
    assert told == [Refused("bad_request: not msgpack", 1)]
    for i in range(1, 1000):
        fold.add(f"refusal {i}", now=100.0 + i / 1000)
    fold.tick(104.9)
    assert len(told) == 1 and fold.folded == 999  # held until the interval is over

    fold.tick(105.0)
    assert told[1] == Refused("refusal 999", 999, pytest.approx(0.998))
    # Still coming: the next interval folds too, one report for it.
    fold.add("refusal 1000", now=106.0)
    fold.add("refusal 1001", now=107.0)
    assert len(told) == 2
    fold.tick(110.0)
    assert told[2] == Refused("refusal 1001", 2, 1.0)
    # A quiet interval closes the fold: the next refusal is told at once again.
    fold.tick(115.0)
    fold.add("much later", now=200.0)
    assert told[3] == Refused("much later", 1)
    assert sum(r.count for r in told) == 1003  # every refusal counted, none hidden


def test_with_no_interval_every_refusal_is_told_at_once() -> None:
    told: list[Refused] = []
    fold = RefusalFold(told.append, interval_s=0)
    for _ in range(3):
        fold.add("again", now=1.0)
    assert told == [Refused("again", 1)] * 3


async def test_a_flood_of_garbage_is_told_as_a_few_counted_reports(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    told: list[Refused] = []

    async def echo(call: Call) -> Any:
        return "ok"

    # An interval no test run reaches: the flood is one report, then one at close.
    server = RpcServer(
        client,
        keys,
        AGENT,
        {"echo": Method("echo", echo, False, "")},
        current_owner=_nobody,
        on_bad_request=told.append,
        fold_s=3600,
    )
    await client.set(keys.alive(AGENT), b"1")
    server.start()
    garbage = [f"r{i}".encode() + b"\n\xc1" if i % 2 else b"no id" for i in range(2000)]
    await client.rpush(keys.rpc(AGENT), *garbage)
    # Served in arrival order: once this is answered every refusal has been counted.
    assert await RpcClient(client, keys).call(AGENT, "echo", timeout=60) == "ok"
    assert len(told) == 1 and told[0].count == 1
    await server.aclose()
    assert len(told) == 2 and told[1].count == 1999
    assert "without an id" in told[0].message and "bad_request" in told[1].message


async def _nobody() -> None:
    return None


async def test_requests_past_their_deadline_are_dropped(
    client: aioredis.Redis, server: dict[str, Any]
) -> None:
    keys = server["keys"]
    await server["server"].aclose()  # the agent is busy elsewhere for a moment
    rpc = RpcClient(client, keys, caller="console:a", auth=TOKEN_A)
    with pytest.raises(RpcTimeout):
        await rpc.call(AGENT, "add", timeout=0.3)
    server["server"].start()
    await rpc.call(AGENT, "echo")
    assert server["calls"] and all(c.method == "echo" for c in server["calls"])


@pytest.mark.parametrize("deadline", [math.nan, math.inf, -math.inf], ids=str)
async def test_a_deadline_that_is_not_a_finite_number_is_a_bad_request(
    client: aioredis.Redis, server: dict[str, Any], deadline: float
) -> None:
    # NaN compares false with everything, so it used to pass as "not yet expired" (as did
    # +inf, a request that never expires); -inf was silently dropped, leaving the caller
    # to wait out its own timeout.
    rpc = RpcClient(client, server["keys"])
    body = pack({"method": "echo", "params": {}, "deadline": deadline})
    with pytest.raises(BadRequest) as err:
        await rpc.send_raw(AGENT, f"dl-{deadline}", body, time.time() + 3)
    assert "deadline" in err.value.message
    assert server["calls"] == []
    assert await rpc.call(AGENT, "echo") is not None


async def test_a_newer_protocol_version_is_a_bad_request_naming_both(
    client: aioredis.Redis, server: dict[str, Any]
) -> None:
    rpc = RpcClient(client, server["keys"])
    newer = PROTOCOL_VERSION + 1
    body = pack({"v": newer, "method": "echo", "params": {}, "deadline": time.time() + 5})
    with pytest.raises(BadRequest) as err:
        await rpc.send_raw(AGENT, "v-newer", body, time.time() + 3)
    assert f"version {newer}" in err.value.message
    assert f"version {PROTOCOL_VERSION}" in err.value.message
    assert err.value.detail == {"version": newer, "supported": PROTOCOL_VERSION}
    assert server["calls"] == []
    # The same version, or an older one, is still served.
    same = pack({"v": PROTOCOL_VERSION, "method": "echo", "params": {}})
    assert await rpc.send_raw(AGENT, "v-same", same, time.time() + 3) is not None


async def test_absent_agent_fails_fast(client: aioredis.Redis, target: RedisTarget) -> None:
    started = time.monotonic()
    with pytest.raises(AgentNotFound):
        await RpcClient(client, Keys(target.namespace)).call("proj/ghost", "status", timeout=10)
    assert time.monotonic() - started < 5  # not the whole deadline


# lock --------------------------------------------------------------------------------


async def test_lock_is_exclusive_and_fenced(client: aioredis.Redis, target: RedisTarget) -> None:
    keys = Keys(target.namespace)
    first = InstanceLock(client, keys, AGENT)
    assert await first.acquire() == 1
    second = InstanceLock(client, keys, AGENT)
    with pytest.raises(DuplicateInstance) as err:
        await second.acquire()
    assert str(err.value) == f"Another instance of {AGENT} is already registered on this Redis"
    # Only the holder can release; the loser's release is a no-op.
    assert not await second.release()
    assert await first.release()
    assert await second.acquire() == 2


async def test_lock_left_by_a_dead_local_process_is_taken_over(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    ghost = InstanceLock(client, keys, AGENT, pid=dead.pid)
    await ghost.acquire()
    heir = InstanceLock(client, keys, AGENT)
    assert await heir.acquire() == 2
    assert "no longer running" in heir.warnings[0]
    # The dead holder's token can no longer touch the successor's lock.
    assert not await ghost.release()
    with pytest.raises(LockLost):
        await ghost.refresh()


async def test_lock_of_a_live_local_process_is_not_taken(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    await InstanceLock(client, keys, AGENT, pid=os.getppid()).acquire()
    with pytest.raises(DuplicateInstance):
        await InstanceLock(client, keys, AGENT).acquire()


async def test_lock_of_another_host_is_never_taken(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    await InstanceLock(client, keys, AGENT, host="elsewhere", pid=999_999).acquire()
    with pytest.raises(DuplicateInstance):
        await InstanceLock(client, keys, AGENT).acquire()


async def test_refresh_reacquires_a_vanished_lock_but_never_a_taken_one(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    lock = InstanceLock(client, keys, AGENT)
    await lock.acquire()
    await client.delete(keys.lock(AGENT))
    await lock.refresh()
    assert lock.fence == 2
    await client.delete(keys.lock(AGENT))
    await InstanceLock(client, keys, AGENT, host="other").acquire()
    with pytest.raises(LockLost):
        await lock.refresh()


async def test_lock_expires_locally_without_refresh(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    lock = InstanceLock(client, Keys(target.namespace), AGENT, ttl_s=2.05)
    await lock.acquire()
    assert not lock.expired_locally()
    await asyncio.sleep(0.1)
    assert lock.expired_locally()  # TTL minus the 2 s margin has passed


# ownership ------------------------------------------------------------------------------


async def test_second_console_is_denied(client: aioredis.Redis, target: RedisTarget) -> None:
    keys = Keys(target.namespace)
    a, b = Ownership(client, keys, "console:a"), Ownership(client, keys, "console:b")
    assert await a.acquire(AGENT) is None
    with pytest.raises(OwnershipDenied) as err:
        await b.acquire(AGENT)
    assert err.value.detail["owner"] == "console:a"
    assert await a.acquire(AGENT) is None  # re-attaching is fine
    assert not await b.release(AGENT)
    current = await a.current(AGENT)
    assert current is not None and current.session == "console:a"


async def test_a_copied_session_id_cannot_claim_refresh_or_release(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    owner = Ownership(client, keys, "console:a")
    await owner.acquire(AGENT)
    # Anyone can read the session id from the owner hash; it is not a credential.
    copycat = Ownership(client, keys, "console:a")
    with pytest.raises(OwnershipDenied):
        await copycat.acquire(AGENT)
    assert not await copycat.refresh(AGENT)
    assert not await copycat.release(AGENT)
    assert await owner.refresh(AGENT)
    assert await owner.acquire(AGENT) is None  # the real owner may re-attach
    assert await owner.release(AGENT)


async def test_takeover_tells_the_old_owner_first(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    old = Ownership(client, keys, "console:old")
    new = Ownership(client, keys, "console:new", grace_s=0.2)
    await old.acquire(AGENT)
    pubsub = client.pubsub()
    await pubsub.subscribe(keys.console_channel("console:old"))
    await pubsub.get_message(timeout=1)
    previous = await new.acquire(AGENT, takeover=True)
    assert previous is not None and previous.session == "console:old"
    notices = []
    for _ in range(2):
        msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
        assert msg is not None
        notices.append(unpack(msg["data"])["event"])
    assert notices == ["takeover", "lost"]
    assert not await old.refresh(AGENT)
    assert await new.refresh(AGENT)
    await pubsub.aclose()


async def test_a_one_call_claim_is_waited_for_a_console_claim_is_not(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    sender = Ownership(client, keys, "send:host:1:aa")
    await sender.acquire(AGENT, kind=OwnerKind.CALL)
    current = await sender.current(AGENT)
    assert current is not None and current.kind is OwnerKind.CALL
    other = Ownership(client, keys, "send:host:2:bb")
    waiting = asyncio.create_task(other.acquire(AGENT, kind=OwnerKind.CALL))
    await asyncio.sleep(0.1)
    assert not waiting.done()  # still waiting, not refused
    assert await sender.release(AGENT)
    assert await asyncio.wait_for(waiting, 5) is None
    assert await other.release(AGENT)

    console = Ownership(client, keys, "console:a")
    await console.acquire(AGENT)
    started = time.monotonic()
    with pytest.raises(OwnershipDenied) as err:
        await other.acquire(AGENT, kind=OwnerKind.CALL)
    assert time.monotonic() - started < 1.0  # no point waiting for a console
    assert "attached by console console:a" in err.value.message


async def test_a_one_call_claim_that_outlasts_the_wait_is_named_as_such(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    await Ownership(client, keys, "send:host:1:aa").acquire(AGENT, kind=OwnerKind.CALL)
    with pytest.raises(OwnershipDenied) as err:
        await Ownership(client, keys, "console:b", call_wait_s=0.2).acquire(AGENT)
    assert "held by send:host:1:aa" in err.value.message
    assert "for one call" in err.value.message
    assert "console send:" not in err.value.message
    assert err.value.detail["kind"] == "call"


async def test_crashed_console_claim_lapses(client: aioredis.Redis, target: RedisTarget) -> None:
    keys = Keys(target.namespace)
    await Ownership(client, keys, "console:dead", ttl_s=0.2).acquire(AGENT)
    await asyncio.sleep(0.3)
    assert await Ownership(client, keys, "console:b").acquire(AGENT) is None


# registry -------------------------------------------------------------------------------


async def test_registry_lists_and_marks_disconnected(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    hb = Heartbeat(client, keys, AgentEntry(id=AGENT, name="zeus", project="proj", state="idle"))
    pubsub = client.pubsub()
    await pubsub.subscribe(keys.registry_channel("proj"))
    await pubsub.get_message(timeout=1)
    await hb.beat()
    joined = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
    assert joined is not None and unpack(joined["data"])["event"] == "join"
    views = await Registry(client, keys).list()
    assert [(v.id, v.state, v.connected) for v in views] == [(AGENT, "idle", True)]
    # Age the heartbeat past the TTL: the agent shows as disconnected.
    sec, _ = await client.time()
    await client.hset(keys.heartbeats("proj"), AGENT, (sec - 30) * 1000)
    (view,) = await Registry(client, keys).list()
    assert view.state == "disconnected"
    await hb.grace(5)
    (view,) = await Registry(client, keys).list()
    assert view.state == "restarting"
    # After two minutes it disappears.
    await client.hset(keys.heartbeats("proj"), AGENT, (sec - 200) * 1000)
    assert await Registry(client, keys).list() == []
    await hb.beat()
    await hb.leave()
    left = None
    for _ in range(3):
        left = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
        if left is not None and unpack(left["data"])["event"] == "leave":
            break
    assert left is not None and unpack(left["data"])["event"] == "leave"
    assert await Registry(client, keys).list() == []
    await pubsub.aclose()


async def test_lock_of_another_pid_namespace_is_never_taken(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    """Same hostname (e.g. a --network host container) but pids from another namespace."""
    keys = Keys(target.namespace)
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    ghost = InstanceLock(client, keys, AGENT, pid=dead.pid)
    value = unpack(ghost._value)
    value["pidns"] = -1
    ghost._value = pack(value)
    await ghost.acquire()
    with pytest.raises(DuplicateInstance):
        await InstanceLock(client, keys, AGENT).acquire()
