"""One writer per agent, enforced by the agent itself (SPEC §4.3, §12)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from ateam.bus.rpc import RpcClient
from ateam.errors import OwnershipDenied

from .conftest import (
    KEYS,
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    ConsoleFactory,
    run_ateam,
    wait_until,
)

pytestmark = pytest.mark.integration

AGENT = "guard/zeus"


async def test_attach_is_exclusive_takeover_works_and_the_agent_enforces_it(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    client: aioredis.Redis,
    bus: Bus,
    redis_url: str,
) -> None:
    start_agent(AGENT)
    first = start_console()
    first.send(f"/attach {AGENT}")
    first.wait_line(f"*** attached to {AGENT} as its writer")
    old_session = first.session

    # A second console is refused; in script mode that is exit code 3.
    denied = run_ateam("console", "--no-ui", "--redis", redis_url, input=f"/attach {AGENT}\n")
    assert denied.returncode == 3, denied.stdout + denied.stderr
    assert "ownership.denied" in denied.stdout

    # So is a scripted send.
    send = run_ateam("send", AGENT, "hello", "--redis", redis_url)
    assert send.returncode == 3, send.stdout + send.stderr

    # --takeover works, and the previous owner is told and turns read-only.
    thief = start_console()
    thief.send(f"/attach {AGENT} --takeover")
    thief.wait_line(f"*** attached to {AGENT} as its writer (took over from {old_session}")
    first.wait_line(lambda line: line.startswith("***") and "now read-only" in line)
    new_session = thief.session

    # The old session's writes are refused by the agent, whatever the console does.
    with pytest.raises(OwnershipDenied) as caught:
        await RpcClient(client, KEYS, caller=old_session).call(
            AGENT, "input", {"text": "sneaked in"}, timeout=5
        )
    assert caught.value.code == "ownership.denied"
    assert caught.value.detail["owner"] == new_session
    with pytest.raises(OwnershipDenied):
        await RpcClient(client, KEYS, caller=None).call(AGENT, "interrupt", timeout=5)

    # Read-only calls stay open to everyone; the new owner can write.
    status = await RpcClient(client, KEYS, caller=old_session).call(AGENT, "status", timeout=5)
    assert status["state"] in ("idle", "busy")
    reply = await RpcClient(client, KEYS, caller=new_session).call(
        AGENT, "input", {"text": "by the owner"}, timeout=5
    )
    wait_until(lambda: reply["id"] in bus.task_ends(AGENT), START_TIMEOUT_S, "the owner's task")
    texts = [b.get("text") for _, b in bus.events(AGENT) if b.get("type") == "task.start"]
    assert texts == ["by the owner"]
    thief.wait_line(f"[A:{AGENT}] echo: by the owner")

    # The read-only console cannot write either, and says so.
    first.send("typed while read-only")
    first.wait_line(lambda line: "ownership.denied" in line and "read-only" in line)
    assert first.wait_exit() == 3  # script mode stops at the first failing command
