"""Typed methods: parameters checked at the server's edge, before the handler runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from ateam.bus.rpc import Call, Method, RpcClient, RpcServer
from ateam.errors import BadRequest
from ateam.wire.rpc import HistoryTailParams, InputParams

AGENT = "proj/typed"


@pytest.fixture
async def served(client: aioredis.Redis, target: RedisTarget) -> AsyncIterator[dict[str, Any]]:
    keys = Keys(target.namespace)
    seen: list[Any] = []

    async def take_input(call: Call) -> dict[str, Any]:
        params = call.args(InputParams)
        seen.append(params)
        return {"text": params.text, "source": params.source}

    async def tail(call: Call) -> int:
        params = call.args(HistoryTailParams)
        seen.append(params)
        return params.n

    methods = {
        "input": Method("input", take_input, False, "", InputParams),
        "history.tail": Method("history.tail", tail, False, "", HistoryTailParams),
    }
    server = RpcServer(client, keys, AGENT, methods, current_owner=_nobody)
    await client.set(keys.alive(AGENT), b"1")
    server.start()
    yield {"rpc": RpcClient(client, keys), "seen": seen, "methods": methods}
    await server.aclose()


async def _nobody() -> None:
    return None


async def test_the_handler_gets_typed_parameters(served: dict[str, Any]) -> None:
    reply = await served["rpc"].call(AGENT, "input", {"text": "hello", "extra": 1})
    assert reply == {"text": "hello", "source": "console"}
    assert isinstance(served["seen"][0], InputParams)
    assert await served["rpc"].call(AGENT, "history.tail", {}) == 20


@pytest.mark.parametrize(
    ("method", "params", "words"),
    [
        ("input", {"text": "  "}, "input: 'text' "),
        ("input", {}, "input: 'text' is required"),
        ("history.tail", {"n": True}, "history.tail: 'n' must be an integer"),
        ("history.tail", {"n": 10_000}, "history.tail: 'n' "),
    ],
)
async def test_a_malformed_request_never_reaches_the_handler(
    served: dict[str, Any], method: str, params: dict[str, Any], words: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        await served["rpc"].call(AGENT, method, params)
    assert caught.value.code == "bad_request"
    assert caught.value.message.startswith(words)
    assert served["seen"] == []


def test_an_in_process_call_is_checked_the_same_way() -> None:
    # The agent's REPL builds calls by hand: no server in between, the same refusal.
    call = Call("local", "input", {"text": ""}, "local", 0.0)
    with pytest.raises(BadRequest, match=r"^input: 'text' "):
        call.args(InputParams)
    assert Call("local", "input", {"text": "x"}, None, 0.0).args(InputParams).text == "x"


def test_a_typed_method_names_its_model(served: dict[str, Any]) -> None:
    # MCP and the docs read the parameter schema from the catalogue itself.
    assert served["methods"]["input"].params is InputParams
    assert "text" in InputParams.model_json_schema()["required"]
