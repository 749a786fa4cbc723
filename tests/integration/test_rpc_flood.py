"""Garbage cannot flush the event log (issue 22): refused requests are folded.

Every refused request used to be a ``warn`` event of its own, and the event log keeps
the newest 10 000: ten thousand garbage requests pushed every real event out of it. A
real agent is sent more than that; its log keeps the events before the flood, and the
refusals are a few ``bad_request`` warnings whose counts add up to every request.
"""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis

from ateam.bus.ownership import Ownership
from ateam.bus.rpc import RpcClient
from ateam.constants import EVENT_LOG_MAXLEN, RPC_REFUSAL_FOLD_S
from tests._wait import async_wait_for

from .conftest import KEYS, START_TIMEOUT_S, AgentFactory, Bus

pytestmark = pytest.mark.integration

AGENT = "flood/zeus"
FLOOD = EVENT_LOG_MAXLEN + 500
"""Past the log's count (and its slack of 100): unfolded, nothing before would be left."""


def refusal_warnings(bus: Bus) -> list[dict[str, object]]:
    return [
        body
        for _, body in bus.events(AGENT)
        if body.get("type") == "warn" and body.get("code") == "bad_request"
    ]


def counted(bus: Bus) -> int:
    return sum(int(str(body.get("count", 1))) for body in refusal_warnings(bus))


@pytest.mark.timeout(240)
async def test_ten_thousand_garbage_requests_leave_the_real_events_in_the_log(
    start_agent: AgentFactory, bus: Bus, client: aioredis.Redis
) -> None:
    start_agent(AGENT)
    owner = Ownership(client, KEYS, "test:flood", ttl_s=240)
    await owner.acquire(AGENT)
    rpc = RpcClient(client, KEYS, caller="test:flood", auth=owner.token)
    item = (await rpc.call(AGENT, "input", {"text": "before the flood"}, timeout=5))["id"]
    await async_wait_for(lambda: item in bus.task_ends(AGENT), START_TIMEOUT_S, "the task")
    real = bus.events(AGENT)

    # Half not msgpack (each answered bad_request), half without a request id (dropped).
    garbage = [
        uuid.uuid4().hex.encode() + b"\n\xc1garbage" if i % 2 else b"no id at all"
        for i in range(FLOOD)
    ]
    for start in range(0, FLOOD, 1000):
        await client.rpush(KEYS.rpc(AGENT), *garbage[start : start + 1000])
    # Requests are served in arrival order: once this one is answered, all were read.
    status = await RpcClient(client, KEYS).call(AGENT, "status", timeout=180)
    assert status["state"] == "idle"
    # The last interval's refusals are told once it is over (unfolded, they all are told
    # at once: more than a handful is enough to judge).
    await async_wait_for(
        lambda: counted(bus) >= FLOOD or len(refusal_warnings(bus)) > 20,
        RPC_REFUSAL_FOLD_S + START_TIMEOUT_S,
        "every refusal to be told",
    )

    # Every real event from before the flood is still there, as it was.
    kept = dict(bus.events(AGENT))
    assert [(offset, kept.get(offset)) for offset, _ in real] == real
    # One warning at once, then one per interval: a handful, not one per request...
    warnings = refusal_warnings(bus)
    assert len(warnings) <= 20, f"{len(warnings)} warnings for {FLOOD} refused requests"
    assert warnings[0]["count"] == 1 and "without an id" in str(warnings[0]["msg"])
    folded = [w for w in warnings if int(str(w["count"])) > 1]
    assert folded and all("folded" in str(w["msg"]) for w in folded)
    # ...whose counts add up to every refused request: none is hidden.
    assert counted(bus) == FLOOD
