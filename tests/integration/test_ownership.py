"""One writer per agent, enforced by the agent itself (SPEC §4.3, §12)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as aioredis

from ateam.bus.rpc import RpcClient
from ateam.errors import OwnershipDenied
from tests._wait import async_wait_for

from .conftest import (
    KEYS,
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    ConsoleFactory,
    run_ateam,
    write_project,
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

    # So is a scripted send, told which console is in the way.
    send = run_ateam("send", AGENT, "hello", "--redis", redis_url)
    assert send.returncode == 3, send.stdout + send.stderr
    assert f"is already attached by console {old_session} (" in send.stderr

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

    # Read-only calls stay open to everyone; the new owner can write (only the new
    # owner's own process: it alone holds the claim's token).
    status = await RpcClient(client, KEYS, caller=old_session).call(AGENT, "status", timeout=5)
    assert status["state"] in ("idle", "busy")
    with pytest.raises(OwnershipDenied):
        await RpcClient(client, KEYS, caller=new_session).call(
            AGENT, "input", {"text": "not the owner's process"}, timeout=5
        )
    thief.send("by the owner")
    thief.wait_line(f"[A:{AGENT}] echo: by the owner")
    texts = [b.get("text") for _, b in bus.events(AGENT) if b.get("type") == "task.start"]
    assert texts == ["by the owner"]

    # The read-only console cannot write either, and says so.
    first.send("typed while read-only")
    first.wait_line(lambda line: "ownership.denied" in line and "read-only" in line)
    assert first.wait_exit() == 3  # script mode stops at the first failing command


async def test_a_session_id_copied_from_redis_cannot_write(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    client: aioredis.Redis,
    bus: Bus,
    tmp_path: Path,
) -> None:
    """Anyone who can read ``owner:{agent}`` learns the session id; that must not be enough."""
    root = write_project(tmp_path / "guard", "guard", delay_ms=100)
    start_agent(AGENT, cwd=root)
    owner = start_console()
    owner.send(f"/attach {AGENT}")
    owner.wait_line(f"*** attached to {AGENT} as its writer")
    long_text = " ".join(f"word{i}" for i in range(100))  # ~10 s of streaming
    owner.send(long_text)
    await async_wait_for(
        lambda: any(b.get("type") == "token" for _, b in bus.events(AGENT)),
        START_TIMEOUT_S,
        "the owner's task to stream",
    )

    stored: dict[bytes, bytes] = await client.hgetall(KEYS.owner(AGENT))
    session = stored[b"session"].decode()
    assert session == owner.session
    copycat = RpcClient(client, KEYS, caller=session)
    with pytest.raises(OwnershipDenied):
        await copycat.call(AGENT, "input", {"text": "sneaked in"}, timeout=5)
    with pytest.raises(OwnershipDenied):
        await copycat.call(AGENT, "cancel", {"hard": True}, timeout=5)
    # What Redis holds about the secret (its hash) does not open the door either.
    for field, value in stored.items():
        forged = RpcClient(client, KEYS, caller=session, auth=value.decode())
        with pytest.raises(OwnershipDenied):
            await forged.call(AGENT, "cancel", {"hard": True}, timeout=5)
        assert field != b"token", "the token itself must never be written to Redis"

    queue = await RpcClient(client, KEYS).call(AGENT, "queue.list", timeout=5)
    assert queue["current"] is not None and queue["current"]["text"] == long_text
    assert queue["pending"] == []

    # The real owner's calls go through.
    owner.send("/cancel --hard")
    owner.wait_line(f"hard-cancelled {queue['current']['id']}")
    owner.send("by the owner")
    owner.wait_line(f"[A:{AGENT}] echo: by the owner")
    starts = [b.get("text") for _, b in bus.events(AGENT) if b.get("type") == "task.start"]
    assert starts == [long_text, "by the owner"]
