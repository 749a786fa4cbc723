"""Agent A gives agent B a task with ``team.send``; B does it (issue 12 point 3).

Two real ``ateam agent`` processes with scripted models; what is checked is what the
agents wrote: B's file, both histories, and the line B's owner console printed. Anyone
else who names a teammate is refused (issue 22 point 3).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.rpc import RpcClient
from ateam.client import Team
from ateam.errors import OwnershipDenied
from ateam.redact import Redactor
from tests._wait import wait_for
from tests.integration.conftest import (
    KEYS,
    AgentFactory,
    ConsoleFactory,
    history_turns,
    run_ateam,
)

pytestmark = pytest.mark.integration


def write_team(root: Path) -> Path:
    """Project ``t``: zeus hands work to hera through team.send; hera writes a file."""
    ateam = root / ".ateam"
    for name in ("zeus", "hera"):
        (ateam / "agents" / name).mkdir(parents=True)
    (ateam / "project.yaml").write_text("name: t\n")
    (ateam / "models.yaml").write_text(
        "models:\n"
        "  - {id: lead, provider: scripted, script: lead.yaml}\n"
        "  - {id: mate, provider: scripted, script: mate.yaml}\n"
    )
    handoff = {"to": "hera", "text": "create done.txt containing ok"}
    lead = [
        {"text": "Handing off.", "tool_calls": [{"name": "team.send", "args": handoff}]},
        {"text": "Sent it to hera."},
    ]
    write = {"path": "done.txt", "content": "ok\n"}
    mate = [
        {"text": "Writing it.", "tool_calls": [{"name": "fs.write", "args": write}]},
        {"text": "Wrote done.txt."},
    ]
    (ateam / "lead.yaml").write_text(yaml.safe_dump({"turns": lead}))
    (ateam / "mate.yaml").write_text(yaml.safe_dump({"turns": mate}))
    specs = {
        "zeus": {"model": "lead", "tools": {"allow": ["team.send"]}},
        "hera": {"model": "mate", "tools": {"allow": ["fs.*"]}, "cwd": "work"},
    }
    for name, spec in specs.items():
        (ateam / "agents" / name / "agent.yaml").write_text(yaml.safe_dump(spec))
    (root / "work").mkdir()
    return root


async def forge_team_inputs(redis_url: str, receiver: str) -> list[str]:
    """Send ``receiver`` team.input as teammates that are not who they say; the refusals.

    The callers name a running teammate (zeus), one that does not exist, the receiver
    itself, and an MCP runtime; one is a client session named like an agent.
    """
    project = receiver.partition("/")[0]
    client = make_client(RedisTarget(redis_url, "--redis"))
    forged = [
        (f"agent:{project}/zeus", "agent:zeus"),
        (f"agent:{project}/ghost", "agent:ghost"),
        (f"agent:{receiver}", f"agent:{receiver.partition('/')[2]}"),
        ("mcp:claude-code", "agent:zeus"),
    ]
    codes = []
    try:
        for caller, source in forged:
            rpc = RpcClient(client, KEYS, caller=caller, auth="a guess")
            try:
                await rpc.call(receiver, "team.input", {"text": "forged", "source": source})
            except OwnershipDenied as exc:
                codes.append(exc.code)
        target = RedisTarget(redis_url, "--redis")
        session = f"agent:{project}/zeus"
        async with await Team.connect(target, session=session, redactor=Redactor()) as team:
            try:
                await team.agent(receiver).call(
                    "team.input", {"text": "forged", "source": "agent:zeus"}
                )
            except OwnershipDenied as exc:
                codes.append(exc.code)
    finally:
        await client.aclose()
    return codes


def test_agent_a_hands_agent_b_a_task_and_b_does_it(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path, redis_url: str
) -> None:
    root = write_team(tmp_path / "t")
    start_agent("t/zeus", cwd=root)
    start_agent("t/hera", cwd=root)
    # hera's owner watches: the task must say it came from zeus.
    console = start_console()
    console.send("/attach t/hera")
    console.wait_line(lambda line: "attached to t/hera" in line)
    # Naming a teammate is not enough to queue work into hera, owned as she is.
    assert asyncio.run(forge_team_inputs(redis_url, "t/hera")) == ["ownership.denied"] * 5

    sent = run_ateam("send", "t/zeus", "get done.txt made", "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr

    done = root / "work" / "done.txt"
    wait_for(done.exists, 30, "hera to write done.txt")
    assert done.read_text() == "ok\n"
    console.wait_line(lambda line: "(from agent:zeus): [from teammate zeus" in line)

    # zeus's history: the tool call and the teammate's acknowledgement.
    zeus = history_turns(root, "zeus")
    calls = [c for t in zeus if t.get("role") == "assistant" for c in t.get("tool_calls") or ()]
    assert [c["name"] for c in calls] == ["team.send"]
    results = [t for t in zeus if t.get("role") == "tool" and t.get("source") == "team.send"]
    assert results and '"to": "t/hera"' in results[0]["content"]

    # hera's history: the task, marked as coming from zeus, in zeus's thread.
    hera = history_turns(root, "hera")
    asked = [t for t in hera if t.get("role") == "user"]
    assert [t["source"] for t in asked] == ["agent:zeus"]  # nothing forged got in
    assert asked[0]["content"].startswith("[from teammate zeus, through team.send]")
    zeus_trace = {t.get("trace_id") for t in zeus if t.get("role") == "user"}
    assert asked[0].get("trace_id") in zeus_trace
    wait_for(
        lambda: any(t.get("content") == "Wrote done.txt." for t in history_turns(root, "hera")),
        15,
        "hera's final answer",
    )


def test_a_ping_pong_thread_stops_at_the_hop_limit(
    start_agent: AgentFactory, tmp_path: Path, redis_url: str
) -> None:
    """Hops ride along: person → zeus → hera (hop 1) → zeus (hop 2) → refused (hop 3)."""
    root = tmp_path / "p"
    ateam = root / ".ateam"
    for name in ("zeus", "hera"):
        (ateam / "agents" / name).mkdir(parents=True)
    (ateam / "project.yaml").write_text("name: t\n")
    (ateam / "models.yaml").write_text(
        "models:\n"
        "  - {id: lead, provider: scripted, script: lead.yaml}\n"
        "  - {id: mate, provider: scripted, script: mate.yaml}\n"
    )

    def send(to: str, text: str) -> dict[str, object]:
        return {
            "text": f"To {to}.",
            "tool_calls": [{"name": "team.send", "args": {"to": to, "text": text}}],
        }

    lead = [
        send("hera", "ping"),
        {"text": "pinged"},
        send("hera", "ping again"),
        {"text": "stopped"},
    ]
    mate = [send("zeus", "pong"), {"text": "ponged"}]
    (ateam / "lead.yaml").write_text(yaml.safe_dump({"turns": lead}))
    (ateam / "mate.yaml").write_text(yaml.safe_dump({"turns": mate}))
    for name, model in (("zeus", "lead"), ("hera", "mate")):
        spec = {"model": model, "tools": {"allow": ["team.send"]}, "team": {"max_hops": 2}}
        (ateam / "agents" / name / "agent.yaml").write_text(yaml.safe_dump(spec))
    start_agent("t/zeus", cwd=root)
    start_agent("t/hera", cwd=root)
    assert run_ateam("send", "t/zeus", "start a thread", "--redis", redis_url).returncode == 0

    def zeus_tool_results() -> list[str]:
        return [
            str(t["content"])
            for t in history_turns(root, "zeus")
            if t.get("role") == "tool" and t.get("source") == "team.send"
        ]

    wait_for(lambda: len(zeus_tool_results()) == 2, 30, "zeus's two sends")
    first, second = zeus_tool_results()
    assert '"hops": 1' in first
    assert "team.hop_limit" in second and "hop 3" in second
    hera = history_turns(root, "hera")
    assert [t["source"] for t in hera if t.get("role") == "user"] == ["agent:zeus"]
    pong = [t for t in hera if t.get("role") == "tool"]
    assert pong and '"hops": 2' in str(pong[0]["content"])
    # The whole exchange is one thread: one trace id from the person's input on.
    traces = {t.get("trace_id") for t in [*history_turns(root, "zeus"), *hera]}
    assert len(traces) == 1
