"""Damage is reported, never silently absorbed (issue 10): a real agent's files, damaged.

Each finding is a warning in the agent's log with its counts, a ``storage.damaged`` event
that ``ateam tail`` (and so every console) shows, and a copy of the damaged file kept
beside it as ``NAME.corrupt-<UTC time>`` before anything rewrote it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for

from .conftest import (
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    ConsoleFactory,
    embedded_ps,
    run_ateam,
    subprocess_env,
    write_project,
)

pytestmark = pytest.mark.integration


def send(agent_id: str, text: str, redis_url: str) -> str:
    sent = run_ateam("send", agent_id, text, "--redis", redis_url)
    assert sent.returncode == 0, sent.stderr
    return sent.stdout.strip()


def damage_events(bus: Bus, agent_id: str) -> list[dict[str, Any]]:
    return [
        body
        for _, body in bus.events(agent_id)
        if body.get("type") == "warn" and body.get("code") == "storage.damaged"
    ]


def one(events: list[dict[str, Any]], name: str, problem: str) -> dict[str, Any]:
    found = [
        e for e in events if Path(e.get("file", "")).name == name and e.get("problem") == problem
    ]
    assert len(found) == 1, (name, problem, events)
    return found[0]


def test_damaged_files_of_a_real_agent_are_reported_and_kept_aside(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    agent_id = "dmg/zeus"
    root = write_project(tmp_path / "dmg", "dmg", delay_ms=1)
    state = root / ".ateam" / "agents" / "zeus" / "state"
    first = start_agent(agent_id, cwd=root)
    done = [send(agent_id, f"task {n}", redis_url) for n in range(2)]
    wait_for(lambda: all(i in bus.task_ends(agent_id) for i in done), START_TIMEOUT_S, "two tasks")
    assert first.terminate() == 0

    # Damage every file the agent wrote, the way disks and killed writers do.
    queue = state / "queue.jsonl"
    queue.write_bytes(queue.read_bytes() + b"not json\n" + b'{"op":"add","id":"q-99999')
    history = state / "history.jsonl"
    turns = history.read_bytes().splitlines(keepends=True)
    assert len(turns) == 4
    history.write_bytes(b"".join([*turns[:2], b"{garbled\n", *turns[2:]]) + b'{"role":"us')
    handoff = state / "handoff.json"
    record = json.loads(handoff.read_bytes())
    record["task"]["description"] = "something nobody wrote"  # checksum no longer matches
    handoff.write_text(json.dumps(record))
    progress = state / "context" / "progress.json"
    progress.write_bytes(progress.read_bytes()[:-5])  # cut short: no longer JSON
    damaged = {path.name: path.read_bytes() for path in (queue, history, handoff, progress)}

    second = start_agent(agent_id, cwd=root)
    task = send(agent_id, "after the damage", redis_url)  # reads and rewrites progress.json
    wait_for(lambda: task in bus.task_ends(agent_id), START_TIMEOUT_S, "the next task")
    assert bus.task_ends(agent_id)[task]["ok"] is True

    # progress.json is read as the task ends: its report may follow the task's end event.
    def all_reported() -> list[dict[str, Any]]:
        found = damage_events(bus, agent_id)
        return found if len(found) >= 6 else []

    events = wait_for(all_reported, START_TIMEOUT_S, "six damage reports")
    queue_torn = one(events, "queue.jsonl", "torn_tail")
    queue_bad = one(events, "queue.jsonl", "unreadable_lines")
    history_torn = one(events, "history.jsonl", "torn_tail")
    history_bad = one(events, "history.jsonl", "unreadable_lines")
    handoff_bad = one(events, "handoff.json", "bad_checksum")
    progress_bad = one(events, "progress.json", "not_json")
    assert len(events) == 6, events
    assert queue_torn["dropped_bytes"] == len(b'{"op":"add","id":"q-99999')
    assert queue_bad["count"] == 1 and history_bad["count"] == 1
    assert history_torn["dropped_bytes"] == len(b'{"role":"us')

    # The copies hold the damaged bytes as they were before any repair or rewrite. The
    # queue's torn tail and bad line share one copy; the history's bad line is found
    # after its torn tail was cut, so its copy lacks only that tail.
    assert queue_torn["kept"] == queue_bad["kept"]
    expected = {
        queue_torn["kept"]: damaged["queue.jsonl"],
        history_torn["kept"]: damaged["history.jsonl"],
        history_bad["kept"]: damaged["history.jsonl"][: -len(b'{"role":"us')],
        handoff_bad["kept"]: damaged["handoff.json"],
        progress_bad["kept"]: damaged["progress.json"],
    }
    for kept, original in expected.items():
        copy = Path(kept)
        assert copy.parent in (state, state / "context")
        assert ".corrupt-" in copy.name
        assert copy.read_bytes() == original, copy
        assert copy.stat().st_mode & 0o777 == 0o600
    # ...while the files themselves were repaired or replaced. The history is append-only:
    # its unreadable line stays where it was, skipped; only the torn tail was cut.
    for line in queue.read_bytes().splitlines():
        json.loads(line)
    assert b"not json" not in queue.read_bytes()
    assert history.read_bytes().startswith(damaged["history.jsonl"][: -len(b'{"role":"us')])
    assert json.loads(progress.read_bytes())["tasks_since_summary"] >= 1

    # The agent's log has each warning, with its counts.
    log = second.stderr()
    for line in (
        "WARNING queue: repaired torn last line of queue.jsonl (25 bytes dropped); "
        "the damaged file is kept as ",
        "WARNING queue: skipped 1 unreadable line(s) of queue.jsonl; the damaged file is kept",
        "WARNING history: repaired torn last line of history.jsonl (11 bytes dropped)",
        "WARNING history: skipped 1 unreadable line(s) of history.jsonl",
        "WARNING handoff: handoff.json fails its checksum",
        "WARNING context: progress.json is not valid JSON; it reads as empty",
    ):
        assert line in log, (line, log)

    # A console shows them: `ateam tail` renders events the way the plain console does.
    tail = run_ateam("tail", agent_id, "--from", "1", "--redis", redis_url)
    assert tail.returncode == 0, tail.stderr
    for event in events:
        assert f"[A:{agent_id}] warn: {event['msg']}" in tail.stdout
    assert second.running()


def ps(redis_url: str) -> dict[str, dict[str, Any]]:
    listed = run_ateam("ps", "--json", "--redis", redis_url)
    assert listed.returncode == 0, listed.stderr
    return {row["id"]: row for row in json.loads(listed.stdout)}


def ps_table(redis_url: str) -> str:
    listed = run_ateam("ps", "--redis", redis_url)
    assert listed.returncode == 0, listed.stderr
    return listed.stdout


def test_a_queue_damaged_beyond_repair_is_a_final_exit_that_ps_and_up_show(
    redis_url: str, tmp_path: Path, isolated_home: Path
) -> None:
    root = write_project(tmp_path / "proj", "wreck")
    state = root / ".ateam" / "agents" / "zeus" / "state"
    state.mkdir(parents=True)
    queue = state / "queue.jsonl"
    # More than the tail scan (1 MiB) without a line break: not a torn line, a wreck.
    queue.write_bytes(b'{"op":"add"' + b"x" * (1024 * 1024 + 10))
    try:
        up = run_ateam("up", str(root), "--detach", "--redis", redis_url, timeout=60)
        assert up.returncode == 1, up.stdout + up.stderr
        # `up` names the agent, the code and the file to move aside.
        [line] = [ln for ln in up.stdout.splitlines() if ln.startswith("wreck/zeus: FAILED")]
        assert "exited with 20 (not restarted: " in line, line
        assert f"move it aside to start afresh: {queue}" in line, line
        # Final: the supervisor gives up on it, and leaves with nothing left to keep.
        wait_for(
            lambda: not (isolated_home / "run" / "wreck.json").exists(),
            START_TIMEOUT_S,
            "the supervisor to leave",
        )
        log = (state / "agent.log").read_text()
        assert log.count("supervisor: zeus exited with 20") == 1, log
        assert "restarting in" not in log, log
        record = json.loads((state / "exit.json").read_text())
        assert record["code"] == 20 and record["file"] == str(queue)

        # `ps` lists it, though no process runs it, with the reason and the file.
        row = ps(redis_url)["wreck/zeus"]
        assert row["state"] == "exited"
        assert row["exit"]["code"] == 20 and row["exit"]["file"] == str(queue)
        assert f"move {queue} aside" in row["alert"]
        table = ps_table(redis_url)
        assert "wreck/zeus" in table and "exited" in table and f"move {queue} aside" in table

        # Acknowledged, it is no longer listed.
        ack = run_ateam("ack", "wreck/zeus", "--redis", redis_url)
        assert ack.returncode == 0, ack.stderr
        assert "exit 20" in ack.stdout
        assert "wreck/zeus" not in ps(redis_url)
        again = run_ateam("ack", "wreck/zeus", "--redis", redis_url)
        assert again.returncode == 4 and "agent.not_found" in again.stderr
    finally:
        run_ateam("up", str(root), "--down", timeout=60)


def test_a_final_exit_is_listed_until_the_agent_runs_again(
    redis_url: str, bus: Bus, tmp_path: Path, isolated_home: Path
) -> None:
    root = write_project(tmp_path / "proj", "wreck")
    state = root / ".ateam" / "agents" / "zeus" / "state"
    state.mkdir(parents=True)
    queue = state / "queue.jsonl"
    queue.write_bytes(b"y" * (1024 * 1024 + 10))
    try:
        up = run_ateam("up", str(root), "--detach", "--redis", redis_url, timeout=60)
        assert up.returncode == 1, up.stdout + up.stderr
        wait_for(lambda: "wreck/zeus" in ps(redis_url), START_TIMEOUT_S, "the exit recorded")
        assert ps(redis_url)["wreck/zeus"]["state"] == "exited"
        # The person moves the file aside, as told, and starts the team again.
        queue.rename(queue.with_name("queue.jsonl.moved"))
        up = run_ateam("up", str(root), "--detach", "--redis", redis_url, timeout=60)
        assert up.returncode == 0, up.stdout + up.stderr
        row = ps(redis_url)["wreck/zeus"]
        assert row["state"] in ("idle", "busy") and "exit" not in row and not row["alert"]
    finally:
        run_ateam("up", str(root), "--down", timeout=60)


def copies(state: Path, name: str) -> list[Path]:
    return sorted(state.glob(f"{name}.corrupt-*"))


def test_damage_found_at_start_shows_in_ps_until_a_clean_start_or_an_ack(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    agent_id = "dmg/zeus"
    root = write_project(tmp_path / "dmg", "dmg", delay_ms=1)
    state = root / ".ateam" / "agents" / "zeus" / "state"
    first = start_agent(agent_id, cwd=root)
    done = [send(agent_id, f"task {n}", redis_url) for n in range(2)]
    wait_for(lambda: all(i in bus.task_ends(agent_id) for i in done), START_TIMEOUT_S, "two tasks")
    assert first.terminate() == 0
    assert not ps(redis_url).get(agent_id)

    # A bad line inside the history (append-only: it stays there), a dead letter nobody
    # retries, a usage file cut short.
    history = state / "history.jsonl"
    turns = history.read_bytes().splitlines(keepends=True)
    history.write_bytes(b"".join([*turns[:2], b"{garbled\n", *turns[2:]]))
    dead = state / "dead.jsonl"
    dead.write_bytes(b'{"id":"q-1-000","text":"old","source":"cli","enqueued_at":1}\nnot json\n')
    usage = state / "usage.json"
    usage.write_bytes(usage.read_bytes()[:-3])

    second = start_agent(agent_id, cwd=root)
    expected = {"history.jsonl", "dead.jsonl", "usage.json"}

    def alerted() -> dict[str, Any] | None:
        row = ps(redis_url).get(agent_id)
        found = {Path(d["file"]).name for d in (row or {}).get("damage", [])}
        return row if found >= expected else None

    row = wait_for(alerted, START_TIMEOUT_S, "the damage in ps")
    assert row["state"] in ("idle", "busy")
    for shown in ("history.jsonl unreadable_lines", "dead.jsonl unreadable_lines", "usage.json"):
        assert shown in row["alert"], row["alert"]
    assert "ALERT" in ps_table(redis_url) and "damaged: " in ps_table(redis_url)
    # dead.jsonl was read at start: no retry asked for it.
    events = damage_events(bus, agent_id)
    assert one(events, "dead.jsonl", "unreadable_lines")["count"] == 1
    history_copies = copies(state, "history.jsonl")
    assert len(history_copies) == 1
    # The history grows before the next start, so a copy of it would differ now.
    task = send(agent_id, "one more", redis_url)
    wait_for(lambda: task in bus.task_ends(agent_id), START_TIMEOUT_S, "the task")
    reported = len(damage_events(bus, agent_id))
    assert second.terminate() == 0

    # The next start is clean: the history's bad line (still there) and the dead letter
    # were reported and copied once already, the usage file has been rewritten.
    third = start_agent(agent_id, cwd=root)
    task = send(agent_id, "reads the history back", redis_url)
    wait_for(lambda: task in bus.task_ends(agent_id), START_TIMEOUT_S, "the task")
    row = ps(redis_url)[agent_id]
    assert row["damage"] == [] and not row["alert"], row
    assert len(damage_events(bus, agent_id)) == reported
    assert copies(state, "history.jsonl") == history_copies
    assert len(copies(state, "dead.jsonl")) == 1
    assert third.terminate() == 0

    # New damage shows until someone acknowledges it.
    queue = state / "queue.jsonl"
    queue.write_bytes(queue.read_bytes() + b'{"op":"add","id":"q-9')
    start_agent(agent_id, cwd=root)
    wait_for(lambda: (ps(redis_url).get(agent_id) or {}).get("damage"), START_TIMEOUT_S, "damage")
    assert "queue.jsonl torn_tail" in ps(redis_url)[agent_id]["alert"]
    ack = run_ateam("ack", "zeus", "--project", "dmg", "--redis", redis_url)
    assert ack.returncode == 0, ack.stderr
    assert f"{agent_id}: 1 damage alert(s) cleared" in ack.stdout
    # The agent publishes its entry with the next beat, at once when it changed.
    wait_for(lambda: not ps(redis_url)[agent_id]["alert"], START_TIMEOUT_S, "the alert cleared")
    assert ps(redis_url)[agent_id]["damage"] == []


def test_a_kept_agent_that_exits_finally_is_listed_by_ps(
    redis_url: str, tmp_path: Path, isolated_home: Path
) -> None:
    """An agent a console started runs under a keeper, which records a final exit too."""
    root = write_project(tmp_path / "proj", "kept")
    state = root / ".ateam" / "agents" / "zeus" / "state"
    state.mkdir(parents=True)
    queue = state / "queue.jsonl"
    queue.write_bytes(b"z" * (1024 * 1024 + 10))
    agent = ["-m", "ateam", "agent", "--project", "kept", "--name", "zeus"]
    log = state / "agent.log"
    with log.open("ab") as output:  # as a console starts it: both write to the agent's log
        keeper = subprocess.run(
            [sys.executable, "-m", "ateam.fleet", "--log", str(log), "--",
             sys.executable, *agent, "--redis", redis_url, "--no-repl"],
            cwd=root, env=subprocess_env(), stdout=output, stderr=output, timeout=60,
        )  # fmt: skip
    assert keeper.returncode == 20, log.read_text()
    assert "keeper: agent exited with 20" in log.read_text()
    row = ps(redis_url)["kept/zeus"]
    assert row["state"] == "exited" and row["exit"]["file"] == str(queue), row
    assert json.loads((state / "exit.json").read_text())["code"] == 20


def test_a_final_exit_on_the_embedded_server_is_listed_too(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """No --redis: the supervisor finds the embedded server its agents used."""
    root = write_project(tmp_path / "proj", "emb")
    state = root / ".ateam" / "agents" / "zeus" / "state"
    state.mkdir(parents=True)
    (state / "queue.jsonl").write_bytes(b"e" * (1024 * 1024 + 10))
    up = run_ateam("up", str(root), "--detach", env=embedded_env, timeout=60)
    assert up.returncode == 1 and "exited with 20" in up.stdout, up.stdout + up.stderr
    row = wait_for(lambda: embedded_ps(embedded_env).get("emb/zeus"), START_TIMEOUT_S, "ps")
    assert row["state"] == "exited" and row["exit"]["code"] == 20


def test_the_console_shows_the_damage_in_ps_and_acknowledges_it(
    start_agent: AgentFactory, start_console: ConsoleFactory, redis_url: str, tmp_path: Path
) -> None:
    agent_id = "dmg/zeus"
    root = write_project(tmp_path / "dmg", "dmg", delay_ms=1)
    state = root / ".ateam" / "agents" / "zeus" / "state"
    state.mkdir(parents=True)
    (state / "queue.jsonl").write_bytes(b'{"op":"last","last_id":"q-1-000"}\n{"op":"ad')
    start_agent(agent_id, cwd=root)
    wait_for(lambda: ps(redis_url)[agent_id]["damage"], START_TIMEOUT_S, "the damage in ps")
    console = start_console()
    console.send("/ps")
    console.wait_line("damaged: queue.jsonl torn_tail")
    console.send("/ack zeus")
    console.wait_line(f"{agent_id}: 1 damage alert(s) cleared")
    wait_for(lambda: not ps(redis_url)[agent_id]["alert"], START_TIMEOUT_S, "the alert cleared")
