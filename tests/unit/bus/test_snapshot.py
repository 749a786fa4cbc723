"""The session snapshot against a real Redis (issue 12 §4): what it shows, how its file is
written (whole, only on change, archived per day) and how one writer per host is chosen."""

from __future__ import annotations

import json
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from ateam.bus import snapshot as snapshot_module
from ateam.bus.board import TaskBoard
from ateam.bus.connection import RedisTarget
from ateam.bus.context_items import ContextStore
from ateam.bus.keys import Keys
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.bus.snapshot import (
    SESSION_FILE,
    SNAPSHOT_VERSION,
    Snapshot,
    SnapshotFile,
    SnapshotReader,
    WriterSeat,
    build_snapshot,
    fingerprint,
)
from ateam.errors import BadRequest
from tests._wait import async_wait_for


@pytest.fixture
def keys(target: RedisTarget) -> Keys:
    return Keys(target.namespace)


async def join(client: aioredis.Redis, keys: Keys, agent_id: str, **fields: Any) -> Heartbeat:
    project, name = agent_id.split("/")
    beat = Heartbeat(client, keys, AgentEntry(id=agent_id, name=name, project=project, **fields))
    await beat.beat()
    return beat


def document(**changes: Any) -> dict[str, Any]:
    """A small snapshot document, as :meth:`Snapshot.to_json` shapes it."""
    agent = {"id": "p/a", "state": "idle", "last_seen": "2026-02-06T10:00:00.000Z"}
    doc: dict[str, Any] = {
        "version": SNAPSHOT_VERSION,
        "generated_at": "2026-02-06T10:00:00.000Z",
        "writer": {"agent": "p/a", "host": "h", "pid": 1},
        "bus": "redis://x",
        "namespace": "ateam:",
        "projects": {"p": {"agents": [agent], "tasks": [], "task_counts": {}, "attention": []}},
    }
    doc.update(changes)
    return doc


def identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


# ---------------------------------------------------------------- what it shows


async def test_agents_open_and_claimed_tasks_and_urgent_items_per_project(
    client: aioredis.Redis, keys: Keys
) -> None:
    await join(
        client, keys, "proj/zeus", state="busy", current_task="q-1", queue_len=2,
        model="m1", host="h1", pid=42, cwd="/w",
    )  # fmt: skip
    await join(client, keys, "proj/hera", state="idle")
    await join(client, keys, "other/ares", state="idle")
    board = TaskBoard(client, keys)
    open_ = await board.add("proj", title="open one", created_by="cli")
    held = await board.add("proj", title="held one", priority=5, created_by="cli")
    await board.claim("proj", held.id, agent="proj/zeus")
    finished = await board.add("proj", title="finished", created_by="cli")
    await board.claim("proj", finished.id, agent="proj/hera")
    await board.done("proj", finished.id, agent="proj/hera")
    context = ContextStore(client, keys)
    await context.post("proj", type="status", title="quiet", urgency="background")
    await context.post("proj", type="alert", title="look", urgency="attention")
    await context.post("proj", type="request", title="stop", urgency="blocking")
    await context.post("other", type="alert", title="elsewhere", urgency="attention")

    snap = await build_snapshot(client, keys, bus="redis://b")
    doc = json.loads(json.dumps(snap.to_json()))  # plain JSON all the way down

    assert doc["version"] == SNAPSHOT_VERSION and doc["bus"] == "redis://b"
    assert doc["generated_at"].endswith("Z") and doc["writer"] is None
    assert list(doc["projects"]) == ["other", "proj"]
    proj = doc["projects"]["proj"]
    assert [a["id"] for a in proj["agents"]] == ["proj/hera", "proj/zeus"]
    zeus = proj["agents"][1]
    assert {k: zeus[k] for k in ("name", "state", "current_task", "model", "host", "pid")} == {
        "name": "zeus", "state": "busy", "current_task": "q-1", "model": "m1", "host": "h1",
        "pid": 42,
    }  # fmt: skip
    assert zeus["queue_len"] == 2 and zeus["cwd"] == "/w" and zeus["last_seen"].endswith("Z")
    assert [(t["id"], t["status"], t["assignee"]) for t in proj["tasks"]] == [
        (held.id, "claimed", "proj/zeus"),
        (open_.id, "open", None),
    ]
    assert proj["task_counts"] == {"open": 1, "claimed": 1, "done": 1, "failed": 0}
    assert [(i["title"], i["urgency"]) for i in proj["attention"]] == [
        ("stop", "blocking"),
        ("look", "attention"),
    ]
    assert [i["title"] for i in doc["projects"]["other"]["attention"]] == ["elsewhere"]
    assert [a["id"] for a in doc["projects"]["other"]["agents"]] == ["other/ares"]


async def test_a_silent_agent_reads_disconnected_with_the_time_it_was_last_seen(
    client: aioredis.Redis, keys: Keys
) -> None:
    await join(client, keys, "proj/zeus", state="idle")
    sec, _ = await client.time()
    await client.hset(keys.heartbeats("proj"), "proj/zeus", (int(sec) - 30) * 1000)

    doc = (await build_snapshot(client, keys)).to_json()

    [zeus] = doc["projects"]["proj"]["agents"]
    assert zeus["state"] == "disconnected"
    assert zeus["last_seen"] < doc["generated_at"]
    assert zeus["last_seen"][:19] == _iso_seconds(int(sec) - 30)


def _iso_seconds(epoch: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S")


async def test_projects_can_be_chosen_or_added_and_a_bad_name_is_refused(
    client: aioredis.Redis, keys: Keys
) -> None:
    await join(client, keys, "proj/zeus")
    only = (await build_snapshot(client, keys, projects=["empty"])).to_json()
    assert only["projects"] == {
        "empty": {
            "agents": [],
            "tasks": [],
            "task_counts": {"open": 0, "claimed": 0, "done": 0, "failed": 0},
            "attention": [],
        }
    }
    both = (await build_snapshot(client, keys, also=("lonely",))).to_json()
    assert list(both["projects"]) == ["lonely", "proj"]
    with pytest.raises(BadRequest, match="invalid project name"):
        await build_snapshot(client, keys, projects=["no such/project"])


async def test_a_reader_reads_items_again_only_when_the_index_moved_or_one_expired(
    client: aioredis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans: list[str] = []
    real_list = ContextStore.list

    async def counted(self: ContextStore, project: str, **options: Any) -> Any:
        scans.append(project)
        return await real_list(self, project, **options)

    monkeypatch.setattr(ContextStore, "list", counted)
    context = ContextStore(client, keys)
    reader = SnapshotReader(client, keys)

    def titles(snap: Snapshot) -> list[str]:
        return [item.title for item in snap.projects[0].attention]

    await context.post("proj", type="alert", title="brief", urgency="attention", ttl_s=1.5)
    assert titles(await reader.read(projects=["proj"])) == ["brief"]
    assert titles(await reader.read(projects=["proj"])) == ["brief"] and len(scans) == 1

    await context.post("proj", type="status", title="quiet", urgency="background")
    await context.post("other", type="alert", title="elsewhere", urgency="attention")
    assert titles(await reader.read(projects=["proj"])) == ["brief"] and len(scans) == 2
    await context.post("proj", type="alert", title="everyone", urgency="blocking", scope="global")
    assert titles(await reader.read(projects=["proj"])) == ["everyone", "brief"]

    async def expired() -> bool:
        return titles(await reader.read(projects=["proj"])) == ["everyone"]

    await async_wait_for(expired, 10, "the brief item to expire from the snapshot")


# ---------------------------------------------------------------- the file


def test_the_file_is_written_whole_private_and_archived(tmp_path: Path) -> None:
    home = tmp_path / "home"
    file = SnapshotFile(home)
    doc = document()

    assert file.write(doc) is True

    assert json.loads((home / SESSION_FILE).read_text()) == doc
    archive = home / "sessions" / "2026-02-06.json"
    assert archive.read_bytes() == (home / SESSION_FILE).read_bytes()
    assert stat.S_IMODE((home / SESSION_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert [p.name for p in home.iterdir() if p.name.endswith(".tmp")] == []


def test_only_a_change_beyond_the_volatile_fields_rewrites_the_file(tmp_path: Path) -> None:
    file = SnapshotFile(tmp_path)
    path = tmp_path / SESSION_FILE
    file.write(document())
    before = identity(path)

    moved = document(generated_at="2026-02-06T10:00:05.000Z", writer={"agent": "p/b"})
    moved["projects"]["p"]["agents"][0]["last_seen"] = "2026-02-06T10:00:04.000Z"
    assert fingerprint(moved) == fingerprint(document())
    assert file.write(moved) is False
    assert SnapshotFile(tmp_path).write(moved) is False  # a new writer reads the file
    assert identity(path) == before

    busy = document()
    busy["projects"]["p"]["agents"][0]["state"] = "busy"
    assert file.write(busy) is True
    assert identity(path) != before
    assert json.loads(path.read_text())["projects"]["p"]["agents"][0]["state"] == "busy"


def test_a_file_replaced_behind_the_writers_back_is_put_right(tmp_path: Path) -> None:
    file = SnapshotFile(tmp_path)
    path = tmp_path / SESSION_FILE
    current = document()
    file.write(current)
    stale = document()
    stale["projects"]["p"]["agents"][0]["state"] = "busy"
    SnapshotFile(tmp_path).write(stale)  # a writer whose term lapsed, late

    assert file.write(current) is True
    assert fingerprint(json.loads(path.read_text())) == fingerprint(current)

    path.write_text('{"torn": ')
    assert file.write(current) is True
    assert json.loads(path.read_text()) == current


def test_the_archive_keeps_each_days_latest(tmp_path: Path) -> None:
    file = SnapshotFile(tmp_path)
    day1 = tmp_path / "sessions" / "2026-02-06.json"
    file.write(document())
    later = document(generated_at="2026-02-06T23:59:00.000Z")
    later["projects"]["p"]["tasks"] = [{"id": "t-1"}]
    file.write(later)
    assert json.loads(day1.read_text()) == later

    next_day = document(generated_at="2026-02-07T00:00:01.000Z")
    next_day["projects"]["p"]["tasks"] = [{"id": "t-1"}]
    assert file.write(next_day) is False  # no news: session.json stays...
    day2 = tmp_path / "sessions" / "2026-02-07.json"
    assert json.loads(day2.read_text()) == next_day  # ...but the new day gets its copy
    assert json.loads(day1.read_text()) == later


def test_a_reader_of_a_new_file_finds_a_copy_at_least_as_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = SnapshotFile(tmp_path)
    file.write(document())
    day = tmp_path / "sessions" / "2026-02-06.json"
    seen: list[bool] = []
    real = snapshot_module.atomic_write

    def watched(path: Path, data: bytes) -> None:
        real(path, data)
        if path.name == SESSION_FILE:  # the moment a reader could see the new file
            seen.append(day.read_bytes() == data)

    monkeypatch.setattr(snapshot_module, "atomic_write", watched)
    busy = document()
    busy["projects"]["p"]["agents"][0]["state"] = "busy"
    assert file.write(busy) is True
    assert seen == [True]


def test_a_copy_that_cannot_be_written_leaves_the_live_file_current(tmp_path: Path) -> None:
    file = SnapshotFile(tmp_path)
    file.write(document())
    shutil.rmtree(tmp_path / "sessions")
    (tmp_path / "sessions").write_text("a file where the copies go\n")
    busy = document()
    busy["projects"]["p"]["agents"][0]["state"] = "busy"

    with pytest.raises(OSError):
        file.write(busy)
    assert json.loads((tmp_path / SESSION_FILE).read_text()) == busy


def test_readers_never_see_a_torn_file(tmp_path: Path) -> None:
    file = SnapshotFile(tmp_path)
    path = tmp_path / SESSION_FILE
    file.write(document())
    stop = threading.Event()
    seen: list[int] = []
    bad: list[str] = []

    def read() -> None:
        # The pause between reads leaves the writer the GIL: two readers spinning on
        # json.loads starved it into minutes per write on a busy CI host.
        while not stop.wait(0.0005):
            try:
                doc = json.loads(path.read_bytes())
                seen.append(len(doc["projects"]["p"]["tasks"]))
            except (OSError, ValueError, KeyError) as exc:
                bad.append(repr(exc))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for n in range(1, 301):
            doc = document()
            # Large enough that a write takes several syscalls.
            doc["projects"]["p"]["tasks"] = [{"id": f"t-{i}", "title": "x" * 200} for i in range(n)]
            assert file.write(doc)
    finally:
        stop.set()
        for reader in readers:
            reader.join(30)
    assert bad == []
    assert len(seen) > 100 and len(set(seen)) > 10


# ---------------------------------------------------------------- the writer seat


async def test_one_seat_per_host_and_home(client: aioredis.Redis, keys: Keys) -> None:
    home = Path("/home/u/.ateam")
    first = WriterSeat(client, keys, home, holder="p/a", host="h1")
    second = WriterSeat(client, keys, home, holder="p/b", host="h1")
    elsewhere = WriterSeat(client, keys, home, holder="p/c", host="h2")
    other_home = WriterSeat(client, keys, Path("/tmp/x"), holder="p/d", host="h1")

    assert await first.claim() and not await second.claim()
    assert await elsewhere.claim() and await other_home.claim()
    assert await first.claim()  # renewed
    assert (await second.holder() or "").startswith("p/a ")

    await first.release()
    assert not first.held and await second.claim()
    assert not await first.claim()


async def test_a_lapsed_holder_cannot_renew_or_end_its_successors_term(
    client: aioredis.Redis, keys: Keys
) -> None:
    home = Path("/home/u/.ateam")
    late = WriterSeat(client, keys, home, holder="p/a", host="h", ttl_s=0.2)
    successor = WriterSeat(client, keys, home, holder="p/b", host="h")
    assert await late.claim()

    async def lapsed() -> bool:
        return not await client.exists(late.key)

    await async_wait_for(lapsed, 5, "the first term to lapse")
    assert await successor.claim()

    assert not await late.claim()
    late.held = True  # as a paused process still believes
    await late.release()
    assert (await successor.holder() or "").startswith("p/b ")
    assert await client.pttl(successor.key) > 0
