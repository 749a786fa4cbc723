"""A lead hears back, tells everyone, and messages wait for a stopped teammate (issue 26).

Real ``ateam agent`` processes on scripted models, driven through ``ateam send`` and
``ateam broadcast`` as a person would; what is checked is what the agents wrote (their
histories and queue files) and what the bus holds (the mailboxes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ateam.bus.mailbox import MAILBOX_MAX_MESSAGES, MailMessage
from tests._wait import wait_for
from tests.integration.conftest import (
    KEYS,
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    history_turns,
    run_ateam,
)

pytestmark = pytest.mark.integration


def write_team(root: Path, scripts: dict[str, list[dict[str, Any]]]) -> Path:
    """Project ``t``: one scripted agent per script, each allowed the team tools."""
    ateam = root / ".ateam"
    models = []
    for name, turns in scripts.items():
        (ateam / "agents" / name).mkdir(parents=True)
        (ateam / f"{name}.yaml").write_text(yaml.safe_dump({"turns": turns}))
        models.append({"id": name, "provider": "scripted", "script": f"{name}.yaml"})
        spec = {"model": name, "tools": {"allow": ["team.*"]}}
        (ateam / "agents" / name / "agent.yaml").write_text(yaml.safe_dump(spec))
    (ateam / "project.yaml").write_text("name: t\n")
    (ateam / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    return root


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"text": f"Calling {name}.", "tool_calls": [{"name": name, "args": args}]}


def asked(root: Path, agent: str) -> list[dict[str, Any]]:
    """The inputs ``agent`` ran (its history's user turns), oldest first."""
    return [t for t in history_turns(root, agent) if t.get("role") == "user"]


def tool_turns(root: Path, agent: str, tool: str) -> list[str]:
    return [
        str(t["content"])
        for t in history_turns(root, agent)
        if t.get("role") == "tool" and t.get("source") == tool
    ]


def tool_results(root: Path, agent: str, tool: str) -> list[dict[str, Any]]:
    """The tool's results that were answers (an error is not a JSON object)."""
    found = []
    for content in tool_turns(root, agent, tool):
        try:
            value = json.loads(content)
        except ValueError:
            continue
        if isinstance(value, dict) and "error" not in value:
            found.append(value)
    return found


def queue_ops(root: Path, agent: str) -> list[dict[str, Any]]:
    path = root / ".ateam" / "agents" / agent / "state" / "queue.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def idle_and_empty(bus: Bus, agent: str) -> bool:
    entry = bus.entry(agent)
    return bool(entry) and entry.get("state") == "idle" and entry.get("queue_len") == 0


def send(redis_url: str, *args: str) -> str:
    done = run_ateam("send", *args, "--redis", redis_url)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_reply_comes_back_to_the_lead_once_even_after_a_kill(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, redis_url: str
) -> None:
    root = write_team(
        tmp_path / "t",
        {
            "zeus": [
                call("team.send", to="hera", text="what is 6 times 7?", reply=True),
                {"text": "Asked hera; going on."},
                {"text": "hera says 42."},
            ],
            "hera": [{"text": "The answer is 42."}],
        },
    )
    start_agent("t/zeus", cwd=root)
    hera = start_agent("t/hera", cwd=root)
    send(redis_url, "t/zeus", "find out 6*7 from hera")

    def replies() -> list[dict[str, Any]]:
        return [t for t in asked(root, "zeus") if t.get("source") == "agent:hera"]

    wait_for(lambda: replies(), 30, "hera's reply in zeus's history")
    (sent,) = tool_results(root, "zeus", "team.send")
    assert sent["mailbox"] is False
    reply = replies()[0]
    assert reply["content"] == (
        f"[reply from teammate hera to your team.send {sent['id']}]\nThe answer is 42."
    )
    # The reply is one more hop of the lead's thread.
    (hera_task,) = asked(root, "hera")
    assert reply["trace_id"] == hera_task["trace_id"]
    wait_for(lambda: idle_and_empty(bus, "t/zeus"), 30, "zeus to run the reply")

    # Killed after answering, before the item was marked done: that is the answer in
    # the history and no end in the queue file. The restart sends the reply again.
    wait_for(lambda: idle_and_empty(bus, "t/hera"), 30, "hera to finish")
    hera.kill9()
    path = root / ".ateam" / "agents" / "hera" / "state" / "queue.jsonl"
    ops = queue_ops(root, "hera")
    kept = [op for op in ops if not (op.get("op") == "done" and op.get("id") == sent["id"])]
    assert len(kept) == len(ops) - 1, ops
    path.write_text("".join(json.dumps(op) + "\n" for op in kept))
    start_agent("t/hera", cwd=root)
    wait_for(
        lambda: any(
            b.get("code") == "queue.recovered" and b.get("task_id") == sent["id"]
            for _, b in bus.events("t/hera")
        ),
        30,
        "hera to settle the answered item",
    )
    wait_for(lambda: idle_and_empty(bus, "t/hera"), 30, "hera to finish again")
    assert bus.client.llen(KEYS.mailbox("t/zeus")) == 0
    wait_for(lambda: idle_and_empty(bus, "t/zeus"), 30, "zeus to be idle")
    # The queue file is written before the sender is acknowledged: one add, one reply.
    adds = [op for op in queue_ops(root, "zeus") if op.get("op") == "add"]
    assert [op["source"] for op in adds].count("agent:hera") == 1, adds
    assert len(replies()) == 1, "the reply sent twice was queued twice"
    assert [t["content"] for t in history_turns(root, "zeus") if t.get("role") == "assistant"][
        -1
    ] == "hera says 42."


def test_a_failed_task_replies_with_its_error(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, redis_url: str
) -> None:
    root = write_team(
        tmp_path / "t",
        {
            "zeus": [call("team.send", to="hera", text="do it", reply=True), {"text": "ok"}],
            "hera": [{"error": {"status": 401, "message": "bad key"}}],
        },
    )
    start_agent("t/zeus", cwd=root)
    start_agent("t/hera", cwd=root)
    send(redis_url, "t/zeus", "delegate")

    def reply() -> list[dict[str, Any]]:
        return [t for t in asked(root, "zeus") if t.get("source") == "agent:hera"]

    (got,) = wait_for(reply, 30, "hera's failure reported to zeus")
    assert "(the task failed: " in got["content"]


def test_a_broadcast_reaches_every_running_agent_but_the_sender(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, redis_url: str
) -> None:
    root = write_team(
        tmp_path / "t",
        {
            "zeus": [call("team.broadcast", text="stand-up in five"), {"text": "told all"}],
            "hera": [{"text": "noted"}, {"text": "noted too"}],
            "ares": [{"text": "noted"}, {"text": "noted too"}],
        },
    )
    for name in ("zeus", "hera", "ares"):
        start_agent(f"t/{name}", cwd=root)
    send(redis_url, "t/zeus", "tell everyone")
    (report,) = wait_for(lambda: tool_results(root, "zeus", "team.broadcast"), 30, "broadcast")
    assert report["sent"] == 2 and report["failed"] == 0 and report["hops"] == 1
    assert sorted(row["to"] for row in report["agents"]) == ["t/ares", "t/hera"]
    assert all(row["id"].startswith("q-") for row in report["agents"])
    for name in ("hera", "ares"):
        (got,) = wait_for(lambda n=name: asked(root, n), 30, f"{name} to run it")
        assert got["content"] == "[from teammate zeus, through team.send]\nstand-up in five"
        assert got["source"] == "agent:zeus"
    assert [t["source"] for t in asked(root, "zeus")] == ["cli"]

    # A person's broadcast reaches all three, each acknowledged.
    done = run_ateam("broadcast", "lunch", "--project", "t", "--json", "--redis", redis_url)
    assert done.returncode == 0, done.stderr
    people = json.loads(done.stdout)
    assert people["sent"] == 3
    assert sorted(row["to"] for row in people["agents"]) == ["t/ares", "t/hera", "t/zeus"]
    wait_for(lambda: len(asked(root, "hera")) == 2, 30, "hera to run the person's broadcast")
    assert asked(root, "hera")[1]["content"] == "lunch"


def test_messages_to_a_stopped_teammate_wait_in_its_mailbox(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, redis_url: str
) -> None:
    root = write_team(
        tmp_path / "t",
        {
            "zeus": [
                {
                    "text": "Two things for hera.",
                    "tool_calls": [
                        {"name": "team.send", "args": {"to": "hera", "text": "first"}},
                        {"name": "team.send", "args": {"to": "hera", "text": "second"}},
                    ],
                },
                {"text": "queued both"},
                call("team.send", to="nobody", text="hello?"),
                {"text": "no such teammate"},
            ],
            "hera": [{"text": "did first"}, {"text": "did second"}, {"text": "again?"}],
        },
    )
    start_agent("t/zeus", cwd=root)
    hera = start_agent("t/hera", cwd=root)
    assert hera.terminate() == 0
    send(redis_url, "t/zeus", "give hera two things")
    results = wait_for(
        lambda: (r := tool_results(root, "zeus", "team.send")) and len(r) == 2 and r, 30, "sends"
    )
    assert all(r["mailbox"] is True for r in results)
    assert {r["note"] for r in results} == {"queued for hera (not running)"}
    assert [r["queued"] for r in results] == [1, 2]
    raws = bus.client.lrange(KEYS.mailbox("t/hera"), 0, -1)
    assert [MailMessage.decode(raw).text for raw in raws] == ["first", "second"]

    # A name that never ran on this bus is not a mailbox: still agent.not_found.
    send(redis_url, "t/zeus", "and tell nobody")
    wait_for(lambda: len(tool_turns(root, "zeus", "team.send")) == 3, 30, "third send")
    assert "agent.not_found" in tool_turns(root, "zeus", "team.send")[-1]

    start_agent("t/hera", cwd=root)
    # Taken in before it served: no input sent now could be queued ahead of them.
    assert bus.client.llen(KEYS.mailbox("t/hera")) == 0
    wait_for(lambda: len(asked(root, "hera")) == 2, 30, "hera to run both")
    wait_for(lambda: idle_and_empty(bus, "t/hera"), 30, "hera idle")
    assert [t["content"] for t in asked(root, "hera")] == [
        "[from teammate zeus, through team.send]\nfirst",
        "[from teammate zeus, through team.send]\nsecond",
    ]
    assert bus.client.llen(KEYS.mailbox("t/hera")) == 0

    # Killed between queueing a message and taking it out of the mailbox: the message is
    # still first there at the next start, and is not queued (nor run) a second time.
    bus.client.lpush(KEYS.mailbox("t/hera"), raws[1])
    bus.client.incrby(KEYS.mailbox_bytes("t/hera"), len(raws[1]))
    # The running hera looks again every few seconds and finds the request id known.
    wait_for(lambda: bus.client.llen(KEYS.mailbox("t/hera")) == 0, 30, "the mailbox looked at")
    wait_for(lambda: idle_and_empty(bus, "t/hera"), 30, "hera idle")
    assert len(asked(root, "hera")) == 2


def test_a_restart_after_a_kill_during_delivery_queues_each_message_once(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, redis_url: str
) -> None:
    root = write_team(tmp_path / "t", {"hera": [{"text": "one"}, {"text": "two"}]})
    hera = start_agent("t/hera", cwd=root)
    assert hera.terminate() == 0
    for text in ("a", "b"):
        assert "queued for hera (not running)" in send(
            redis_url, "t/hera", text, "--wait-for-start"
        )
    first = bus.client.lindex(KEYS.mailbox("t/hera"), 0)
    hera = start_agent("t/hera", cwd=root)
    wait_for(lambda: len(asked(root, "hera")) == 2, 30, "hera to run both")
    hera.kill9()
    # As if the kill had come after "a" was queued and before it left the mailbox.
    bus.client.lpush(KEYS.mailbox("t/hera"), first)
    bus.client.incrby(KEYS.mailbox_bytes("t/hera"), len(first))
    start_agent("t/hera", cwd=root)
    wait_for(lambda: bus.client.llen(KEYS.mailbox("t/hera")) == 0, 30, "delivery")
    wait_for(lambda: idle_and_empty(bus, "t/hera"), 30, "hera idle")
    assert [t["content"] for t in asked(root, "hera")] == ["a", "b"]
    assert [t["source"] for t in asked(root, "hera")] == ["cli", "cli"]


def test_send_wait_for_start_and_a_full_mailbox(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, redis_url: str
) -> None:
    root = write_team(tmp_path / "t", {"hera": [{"text": "hi"}]})
    # Never started, but configured in the project here: the message may wait.
    out = run_ateam(
        "send", "hera", "hello", "--wait-for-start", "--json", "--redis", redis_url, cwd=root
    )
    assert out.returncode == 0, out.stderr
    kept = json.loads(out.stdout)
    assert kept["mailbox"] is True and kept["note"] == "queued for hera (not running)"
    # Without the flag, sending to an agent that is not running is refused, as before.
    refused = run_ateam("send", "t/hera", "hello", "--redis", redis_url)
    assert refused.returncode != 0 and "agent.not_found" in refused.stderr
    # Nor does a name nobody configured or ran get a mailbox.
    ghost = run_ateam("send", "t/ghost", "boo", "--wait-for-start", "--redis", redis_url)
    assert ghost.returncode != 0 and "agent.not_found" in ghost.stderr

    # Full: the bound refuses the next message with its code.
    filler = [MailMessage.new("x", "cli").encode() for _ in range(MAILBOX_MAX_MESSAGES - 1)]
    bus.client.rpush(KEYS.mailbox("t/hera"), *filler)
    over = run_ateam(
        "send", "hera", "one too many", "--wait-for-start", "--redis", redis_url, cwd=root
    )
    assert over.returncode != 0 and "mailbox.full" in over.stderr
    # Back to the one message sent above.
    bus.client.ltrim(KEYS.mailbox("t/hera"), 0, 0)
    bus.client.set(KEYS.mailbox_bytes("t/hera"), len(bus.client.lindex(KEYS.mailbox("t/hera"), 0)))

    start_agent("t/hera", cwd=root)
    (got,) = wait_for(lambda: asked(root, "hera"), 30, "hera to run the kept message")
    assert got["content"] == "hello" and got["source"] == "cli"


def test_a_person_broadcasts_from_the_cli_and_from_a_console(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path, redis_url: str
) -> None:
    root = write_team(
        tmp_path / "t",
        {"zeus": [{"text": "ok"}] * 2, "hera": [{"text": "ok"}] * 2},
    )
    start_agent("t/zeus", cwd=root)
    start_agent("t/hera", cwd=root)
    console = start_console()
    attach_and_send(console, "t/hera")
    # hera is this console's: another person's broadcast is refused there, and says so.
    done = run_ateam("broadcast", "from", "the", "cli", "--project", "t", "--redis", redis_url)
    assert done.returncode == 1, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert lines[0].startswith("t/hera: refused: ownership.denied")
    assert lines[1].startswith("t/zeus: q-")

    # The owner's own console reaches both (hera's, and zeus by a one-call claim).
    console.send("/broadcast from the console")
    console.wait_line(lambda line: line.startswith("t/zeus") and "queued q-" in line)
    console.wait_line(lambda line: line.startswith("t/hera") and "queued q-" in line)
    for name in ("zeus", "hera"):
        wait_for(
            lambda n=name: "from the console" in [t["content"] for t in asked(root, n)],
            30,
            f"{name} to run the console's broadcast",
        )
    assert [t["content"] for t in asked(root, "zeus")] == ["from the cli", "from the console"]


def test_a_message_to_a_teammate_killed_a_moment_ago_waits_for_it(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, redis_url: str
) -> None:
    """Crashed, not stopped: its registry entry and liveness key outlive it for a few
    seconds, so the send may be pushed and go unanswered; it is kept all the same, once."""
    root = write_team(
        tmp_path / "t",
        {
            "zeus": [call("team.send", to="hera", text="are you there?"), {"text": "sent"}],
            "hera": [{"text": "here"}, {"text": "here again?"}],
        },
    )
    start_agent("t/zeus", cwd=root)
    start_agent("t/hera", cwd=root).kill9()
    send(redis_url, "t/zeus", "ask hera")
    (sent,) = wait_for(lambda: tool_results(root, "zeus", "team.send"), 60, "zeus's send")
    assert sent["mailbox"] is True
    start_agent("t/hera", cwd=root)
    wait_for(lambda: asked(root, "hera"), 30, "hera to run it")
    wait_for(lambda: bus.client.llen(KEYS.mailbox("t/hera")) == 0, 30, "the mailbox emptied")
    wait_for(lambda: idle_and_empty(bus, "t/hera"), 30, "hera idle")
    assert [t["content"] for t in asked(root, "hera")] == [
        "[from teammate zeus, through team.send]\nare you there?"
    ]
