"""A board task never runs twice (issue 22 point 2): the whole team killed and brought
back, twenty times over.

Two agents with ``take_tasks: true`` pull tasks from their project's board and work them
with the ``scripted`` model, slowly, so each holds a task in flight. Each round kills
(-9) both agents, their supervisor and the embedded Redis server at once, then runs
``ateam up``, which brings them all back; each agent replays the item it was working
on. In two rounds the outage outlives the heartbeat TTL, as a long one does: in one the
first agent back finds its teammate's claim lost and reopens it while the teammate is
still starting (usually: who is back first is up to the scheduler), in the other a lead
lists the board during the outage, which reopens every claim. An agent whose replayed
item's claim was reopened must drop the item, not run it.

What is checked, from the agents' event streams and the board:

- each task's model requests (one per run: every scripted turn answers without tool
  calls) are exactly one more than its runs the kills cut short;
- no model is told a claim the board does not hold: at every kill each agent's running
  board task is claimed by that agent, and each task's one finished run is its
  assignee's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
import yaml

from ateam._proc import pid_is_running
from ateam.bus.board import TaskBoard
from ateam.bus.codec import unpack
from ateam.bus.embedded import socket_name
from ateam.constants import HEARTBEAT_TTL_S
from tests._wait import wait_for

from .conftest import KEYS, run_ateam

pytestmark = pytest.mark.integration

PROJECT = "crew"
AGENTS = ("crew/ada", "crew/bob")
ROUNDS = 20
FIRST_BACK_REOPENS = 7
"""A round whose outage outlives the heartbeat TTL: the first agent back reopens its
teammate's claim if it looks at the board before the teammate's first heartbeat (most
of the time; which agent is first back is up to the scheduler)."""
LEAD_REOPENS = 14
"""The same outage, and a lead lists the board before ``ateam up``: the listing reopens
every claim, so both agents come back to replayed items they no longer hold."""
OPEN_TASKS = 2
"""Open tasks kept on the board while the rounds go on, so nobody idles."""
WORDS = 8
TOKEN_DELAY_MS = 80
"""A request streams for about a second: in flight when killed, done soon after."""


# --- the project and its processes --------------------------------------------------------


def write_crew(root: Path) -> Path:
    ateam_dir = root / ".ateam"
    ateam_dir.mkdir(parents=True)
    (ateam_dir / "project.yaml").write_text(f"name: {PROJECT}\n")
    (ateam_dir / "models.yaml").write_text(
        "models:\n  - id: script\n    provider: scripted\n    script: script.yaml\n"
    )
    turn = {"text": " ".join(f"w{i}" for i in range(WORDS))}
    script = {"turns": [turn] * 500, "token_delay_ms": TOKEN_DELAY_MS}
    (ateam_dir / "script.yaml").write_text(yaml.safe_dump(script))
    for agent in AGENTS:
        agent_dir = ateam_dir / "agents" / agent.split("/")[1]
        agent_dir.mkdir(parents=True)
        (agent_dir / "agent.yaml").write_text("model: script\ntake_tasks: true\n")
    return root


def up(root: Path, env: dict[str, str]) -> None:
    started = run_ateam("up", str(root), "--detach", env=env, timeout=90)
    assert started.returncode == 0, started.stdout + started.stderr


def children_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[1]) == parent:
                    found.append(int(entry.name))
    return found


def kill_team(home: Path) -> None:
    """kill -9 the supervisor, every agent it runs and the server, all at once."""
    supervisor = json.loads((home / "run" / f"{PROJECT}.json").read_text())["supervisor"]
    server = int((home / "redis" / "redis.pid").read_text())
    victims = [supervisor, *children_of(supervisor), server]
    assert len(victims) == 2 + len(AGENTS), victims
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(map(pid_is_running, victims)), 20, "the team to be gone")


# --- what the bus says ----------------------------------------------------------------------


@dataclass
class Crew:
    """The test's view of the team: its project, and a link to the embedded server that
    is made again after every restart."""

    root: Path
    home: Path
    env: dict[str, str]
    rounds: int = 0
    marks: dict[str, list[int]] = field(default_factory=lambda: {a: [] for a in AGENTS})
    """Per agent, its last event offset at each kill."""
    _client: redis.Redis | None = None

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            password = (self.home / "redis" / "password").read_text().strip()
            runtime = Path(self.env["ATEAM_RUNTIME_DIR"])
            socket = runtime / socket_name((self.home / "redis").absolute())
            self._client = redis.Redis(unix_socket_path=str(socket), password=password)
        return self._client

    def forget(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def events(self, agent: str, since: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The agent's events after offset ``since``, as (offset, body)."""
        raw = self.client.xrange(KEYS.events(agent), min=f"{since + 1}-0")
        return [(int(eid.split(b"-")[0]), unpack(fields[b"d"])) for eid, fields in raw]

    def since_kill(self, agent: str) -> int:
        return self.marks[agent][-1] if self.marks[agent] else 0

    def tasks(self) -> dict[str, dict[str, Any]]:
        raw = self.client.hgetall(KEYS.board(PROJECT))
        return {k.decode(): unpack(v) for k, v in raw.items()}  # type: ignore[misc]

    def add_task(self, title: str) -> None:
        """Through the library, as a lead's console would."""

        async def add() -> None:
            password = (self.home / "redis" / "password").read_text().strip()
            runtime = Path(self.env["ATEAM_RUNTIME_DIR"])
            socket = runtime / socket_name((self.home / "redis").absolute())
            client = aioredis.Redis(unix_socket_path=str(socket), password=password)
            try:
                await TaskBoard(client, KEYS).add(PROJECT, title=title, created_by="cli")
            finally:
                await client.aclose()

        asyncio.run(add())


def running_run(events: list[tuple[int, dict[str, Any]]]) -> dict[str, Any] | None:
    """The ``task.start`` of the run in progress among ``events``, once it streams."""
    current: dict[str, Any] | None = None
    streamed = False
    for _, body in events:
        kind = body.get("type")
        if kind == "task.start":
            current, streamed = body, False
        elif kind == "task.end" and current is not None and body["task_id"] == current["task_id"]:
            current = None
        elif kind == "token" and current is not None and body.get("task_id") == current["task_id"]:
            streamed = True
    return current if streamed else None


def all_in_flight(crew: Crew) -> dict[str, dict[str, Any]] | None:
    """Each agent streaming a first attempt (an item killed twice would be a poison item
    to the queue: a whole-team kill is a crash to it), the board kept stocked."""
    tasks = crew.tasks()
    if sum(t["status"] == "open" for t in tasks.values()) < OPEN_TASKS:
        crew.add_task(f"round {crew.rounds} task {len(tasks)}")
    runs = {}
    for agent in AGENTS:
        run = running_run(crew.events(agent, crew.since_kill(agent)))
        if run is None or run.get("attempt") != 1 or not run["source"].startswith("board:"):
            return None
        runs[agent] = run
    return runs


def outage_until(crew: Crew) -> float:
    """When every heartbeat will have lapsed and every claim be older than the TTL."""
    now_s, now_us = crew.client.time()
    now = now_s + now_us / 1e6
    until = now
    for agent in AGENTS:
        until = max(until, now + max(crew.client.pttl(KEYS.alive(agent)), 0) / 1000)
    for task in crew.tasks().values():
        if task["status"] == "claimed":
            until = max(until, task["updated"] / 1e6 + HEARTBEAT_TTL_S)
    return until + 0.5


# --- the test ---------------------------------------------------------------------------


@pytest.fixture
def crew(embedded_env: dict[str, str], isolated_home: Path, tmp_path: Path) -> Iterator[Crew]:
    team = Crew(write_crew(tmp_path / PROJECT), isolated_home, embedded_env)
    up(team.root, embedded_env)
    yield team
    team.forget()
    run_ateam("up", str(team.root), "--down", env=embedded_env, timeout=60)


@pytest.mark.timeout(400)
def test_whole_team_restarts_run_every_board_task_once(crew: Crew) -> None:
    began = time.monotonic()
    wrong_claims: list[str] = []
    for number in range(1, ROUNDS + 1):
        crew.rounds = number
        runs = wait_for(lambda: all_in_flight(crew), 60, f"round {number}: both in flight")
        # What each model is working on at the kill must be the board's claim of it (or,
        # if the run ended since it was seen, the task it finished).
        tasks = crew.tasks()
        for agent, run in runs.items():
            task = tasks[run["source"].removeprefix("board:")]
            if task["status"] not in ("claimed", "done") or task["assignee"] != agent:
                wrong_claims.append(f"round {number}: {agent} runs {task}")
        for agent in AGENTS:
            crew.marks[agent].append(crew.events(agent, crew.since_kill(agent))[-1][0])
        long_outage = number in (FIRST_BACK_REOPENS, LEAD_REOPENS)
        until = outage_until(crew) if long_outage else 0.0
        crew.forget()
        kill_team(crew.home)
        # The outage's length is the scenario here, not a guess at how long work takes.
        time.sleep(max(0.0, until - time.time()))
        if number == LEAD_REOPENS:
            assert_the_listing_reopens(crew, runs)
        up(crew.root, crew.env)
    print(f"{ROUNDS} whole-team restarts at {time.monotonic() - began:.1f}s")

    def all_done() -> bool:
        return all(t["status"] == "done" for t in crew.tasks().values())

    try:
        wait_for(all_done, 60, "every board task to be done")
    except AssertionError:
        explain_unfinished(crew)
        raise
    print(f"done at {time.monotonic() - began:.1f}s")
    assert not wrong_claims, wrong_claims
    assert_each_task_ran_once(crew)


def explain_unfinished(crew: Crew) -> None:
    for task_id, task in crew.tasks().items():
        if task["status"] != "done":
            print("not done:", task_id, task)
    for agent in AGENTS:
        state = crew.root / ".ateam" / "agents" / agent.split("/")[1] / "state"
        for name in ("dead.jsonl", "agent.log"):
            if (state / name).exists():
                print(agent, name, (state / name).read_text()[-3000:])


def assert_the_listing_reopens(crew: Crew, runs: dict[str, dict[str, Any]]) -> None:
    """``ateam tasks ls`` while the team is down: the tasks in flight go back to open."""
    assert run_ateam("server", "start", env=crew.env).returncode == 0
    listed = run_ateam("tasks", "ls", "--json", env=crew.env, cwd=crew.root)
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    in_flight = [rows[run["source"].removeprefix("board:")] for run in runs.values()]
    # A run may have ended between being seen and the kill; none is claimed any more.
    assert all(row["status"] in ("open", "done") for row in in_flight), in_flight
    reopened = [row for row in in_flight if row["status"] == "open"]
    assert all("lost (heartbeat)" in row["reason"] for row in reopened), reopened


def assert_each_task_ran_once(crew: Crew) -> None:
    tasks = crew.tasks()
    requests: Counter[str] = Counter()
    interrupted: Counter[str] = Counter()
    finished_by: dict[str, list[str]] = {}
    dropped = 0
    for agent in AGENTS:
        marks = list(crew.marks[agent])
        running: dict[str, str] = {}  # queue item -> board task: started, not ended
        cut: dict[str, str] = {}  # the same, for the runs a kill cut short
        for offset, body in crew.events(agent):
            if marks and offset > marks[0]:
                # The first event of the process started after a kill.
                interrupted.update(running.values())
                cut.update(running)
                running.clear()
                marks = [mark for mark in marks if mark >= offset]
            kind = body.get("type")
            item = body.get("task_id")
            if kind == "task.start" and str(body.get("source")).startswith("board:"):
                requests[body["source"].removeprefix("board:")] += 1
                running[item] = body["source"].removeprefix("board:")
            elif kind == "task.end" and item in running:
                finished_by.setdefault(running.pop(item), []).append(agent)
            elif kind == "task.end" and body.get("recovered") and item in cut:
                # Its answer was written before the kill, its end only after the restart:
                # that run was not cut short after all.
                interrupted[cut[item]] -= 1
                finished_by.setdefault(cut.pop(item), []).append(agent)
            elif kind == "warn" and body.get("code") == "queue.dropped":
                dropped += 1
    print(f"{len(tasks)} tasks, {sum(interrupted.values())} runs cut short, {dropped} dropped")
    assert set(requests) == set(tasks)
    wrong = {
        task_id: (requests[task_id], interrupted[task_id])
        for task_id in tasks
        if requests[task_id] != interrupted[task_id] + 1
    }
    assert not wrong, f"task: (model requests, runs cut short): {wrong}"
    for task_id, task in tasks.items():
        assert finished_by.get(task_id) == [task["assignee"]], (task_id, task, finished_by)
