"""The durable prompt queue (SPEC §5.2): ordering, durability, crash recovery, compaction."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from ateam import _fs as fs_mod
from ateam import _jsonl as jsonl_mod
from ateam._fs import Damage, Problem, keep_aside
from ateam.agent.state import queue as queue_mod
from ateam.agent.state import queue_item
from ateam.agent.state.queue import (
    DEAD_REASON,
    KILLED_REASON,
    KILLS_LIMIT,
    DurableQueue,
    RecoveryReport,
)
from ateam.agent.state.queue_item import QueueItem, next_queue_id
from ateam.constants import QUEUE_COMPACT_EVERY
from ateam.errors import StorageError, StorageFull

OpenQueue = Callable[[], tuple[DurableQueue, RecoveryReport]]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "agent" / "state"


@pytest.fixture
def open_queue(state_dir: Path) -> Iterator[OpenQueue]:
    """Opens a fresh DurableQueue on the same state dir each call; closes them all after."""
    opened: list[DurableQueue] = []

    def factory() -> tuple[DurableQueue, RecoveryReport]:
        queue = DurableQueue(state_dir)
        report = queue.open()
        opened.append(queue)
        return queue, report

    yield factory
    for queue in opened:
        queue.close()


def ids(items: list[QueueItem]) -> list[str]:
    return [item.id for item in items]


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def crash(queue: DurableQueue) -> None:
    """What kill -9 leaves: the file as written, nothing else (close only frees the fd)."""
    queue.close()


# --- ids -------------------------------------------------------------------------------------


def test_ids_have_the_spec_format_and_strictly_increase(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    made = [queue.append(f"p{i}", source="cli").id for i in range(50)]
    assert all(queue_item._ID_RE.fullmatch(item_id) for item_id in made)
    assert made == sorted(set(made))


def test_ids_increase_when_the_clock_goes_back(
    open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, _ = open_queue()
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.5)
    ahead = [queue.append("a", source="cli").id for _ in range(3)]
    monkeypatch.setattr(time, "time", lambda: 1_600_000_000.0)
    behind = [queue.append("b", source="cli").id for _ in range(3)]
    made = ahead + behind
    assert made == sorted(set(made))
    crash(queue)

    reopened, _ = open_queue()
    after = reopened.append("c", source="cli").id
    assert after > made[-1]


def test_ids_increase_across_reopen_even_when_compaction_emptied_the_file(
    open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, _ = open_queue()
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)
    first = queue.append("a", source="cli")
    taken = queue.take()
    assert taken is not None
    queue.done(taken.id)
    queue.close()

    monkeypatch.setattr(time, "time", lambda: 1_600_000_000.0)
    reopened, _ = open_queue()  # compacts the finished item away
    assert not any(line.get("op") == "add" for line in lines(reopened.path))
    assert reopened.append("b", source="cli").id > first.id


def test_id_counter_overflow_borrows_the_next_millisecond() -> None:
    assert next_queue_id(None, 1_700_000_000.0) == "q-1700000000000-000"
    assert next_queue_id("q-1700000000000-00a", 1_600_000_000.0) == "q-1700000000000-00b"
    rolled = next_queue_id("q-1700000000000-fff", 1_700_000_000.0)
    assert rolled == "q-1700000000001-000"
    assert rolled > "q-1700000000000-fff"


# --- order -----------------------------------------------------------------------------------


def test_take_is_fifo(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    made = [queue.append(f"p{i}", source="cli") for i in range(5)]
    assert ids(queue.pending()) == ids(made)
    taken = []
    while (item := queue.take()) is not None:
        taken.append(item)
        queue.done(item.id)
    assert ids(taken) == ids(made)
    assert len(queue) == 0


def test_higher_priority_first_and_stable_among_equals(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    low_a = queue.append("a", source="cli")
    low_b = queue.append("b", source="cli")
    high_c = queue.append("c", source="cli", priority=5)
    high_d = queue.append("d", source="cli", priority=5)
    mid_e = queue.append("e", source="cli", priority=1)
    expected = [high_c.id, high_d.id, mid_e.id, low_a.id, low_b.id]
    assert ids(queue.pending()) == expected
    crash(queue)

    reopened, _ = open_queue()
    assert ids(reopened.pending()) == expected
    assert (taken := reopened.take()) is not None and taken.id == high_c.id


def test_take_returns_none_when_empty_or_busy(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    assert queue.take() is None
    first = queue.append("a", source="cli")
    queue.append("b", source="cli")
    assert queue.take() == first
    assert queue.current == first
    assert queue.take() is None  # one item at a time
    assert len(queue) == 1
    queue.done(first.id)
    assert queue.current is None


def test_done_of_another_item_is_refused(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    queue.append("a", source="cli")
    with pytest.raises(ValueError, match="not the item in progress"):
        queue.done("q-1-000")


# --- durability ------------------------------------------------------------------------------


def test_append_is_on_disk_when_it_returns(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    item = queue.append("hello", source="console", rid="r-1", caller="c", trace_id="t")
    other, _ = open_queue()  # a second reader while the first is still open
    assert other.pending() == [item]


def test_the_same_instance_can_be_reopened(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    made = [queue.append(f"p{i}", source="cli") for i in range(3)]
    queue.close()
    queue.open()
    assert ids(queue.pending()) == ids(made)


def test_files_are_created_private(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    queue.append("a", source="cli")
    assert queue.path.stat().st_mode & 0o777 == 0o600
    queue.clear()  # rewritten atomically
    assert queue.path.stat().st_mode & 0o777 == 0o600
    assert queue.state_dir.stat().st_mode & 0o777 == 0o700


def test_torn_last_line_is_truncated_and_reported(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    made = [queue.append(f"p{i}", source="cli") for i in range(3)]
    crash(queue)
    torn = b'{"op":"add","id":"q-17000'
    with queue.path.open("ab") as handle:
        handle.write(torn)

    damaged = queue.path.read_bytes()

    reopened, report = open_queue()
    assert report.torn_bytes == len(torn)
    [damage] = reopened.damage.drain()
    assert (damage.problem, damage.dropped_bytes) == (Problem.TORN_TAIL, len(torn))
    assert damage.message().startswith(
        f"queue: repaired torn last line of queue.jsonl ({len(torn)} bytes dropped); "
        "the damaged file is kept as "
    )
    assert_kept(damage, damaged)
    assert ids(reopened.pending()) == ids(made)
    assert reopened.path.read_bytes().endswith(b"\n")

    # Appends after the repair are not glued onto the fragment.
    later = reopened.append("later", source="cli")
    crash(reopened)
    third, report = open_queue()
    assert report.torn_bytes == 0 and report.skipped == 0
    assert ids(third.pending()) == [*ids(made), later.id]


def test_torn_line_longer_than_the_scan_window_is_an_error(
    open_queue: OpenQueue, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, _ = open_queue()
    queue.append("a", source="cli")
    crash(queue)
    with queue.path.open("ab") as handle:
        handle.write(b"x" * 300)
    monkeypatch.setattr(queue_mod, "QUEUE_TAIL_SCAN", 64)
    with pytest.raises(StorageError, match="no line break"):
        DurableQueue(state_dir).open()


def test_unreadable_lines_inside_the_file_are_skipped(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    first = queue.append("a", source="cli")
    second = queue.append("b", source="cli")
    crash(queue)
    head, tail = queue.path.read_bytes().splitlines(keepends=True)
    garbage = [b"not json\n", b'{"op":"teleport"}\n', b'{"op":"add","id":"q-1-000"}\n']
    queue.path.write_bytes(b"".join([head, *garbage, tail]))

    damaged = queue.path.read_bytes()

    reopened, report = open_queue()
    assert report.skipped == 3
    [damage] = reopened.damage.drain()
    assert (damage.problem, damage.count) == (Problem.UNREADABLE_LINES, 3)
    assert "queue: skipped 3 unreadable line(s) of queue.jsonl" in damage.message()
    assert ids(reopened.pending()) == [first.id, second.id]
    assert b"teleport" not in reopened.path.read_bytes()  # compacted away
    assert_kept(damage, damaged)  # ...but kept aside first


def assert_kept(damage: Damage, original: bytes) -> None:
    """The copy of a damaged file holds its bytes as found, private to the user."""
    assert damage.kept is not None, damage
    assert damage.kept.parent == damage.path.parent
    assert damage.kept.name.startswith(f"{damage.path.name}.corrupt-")
    assert damage.kept.read_bytes() == original
    assert damage.kept.stat().st_mode & 0o777 == 0o600


def test_torn_and_unreadable_lines_share_one_copy(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    kept_item = queue.append("a", source="cli")
    crash(queue)
    with queue.path.open("ab") as handle:
        handle.write(b"garbage\n" + b'{"op":"add","id":"q-1')
    damaged = queue.path.read_bytes()

    reopened, _ = open_queue()

    torn, unreadable = reopened.damage.drain()
    assert (torn.problem, unreadable.problem) == (Problem.TORN_TAIL, Problem.UNREADABLE_LINES)
    assert torn.kept == unreadable.kept
    assert_kept(torn, damaged)
    assert [p.name for p in queue.state_dir.iterdir() if ".corrupt-" in p.name] == [
        torn.kept.name if torn.kept else ""
    ]
    assert ids(reopened.pending()) == [kept_item.id]


def test_a_copy_that_cannot_be_made_leaves_the_damaged_file_alone(
    open_queue: OpenQueue, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, _ = open_queue()
    queue.append("a", source="cli")
    crash(queue)
    with queue.path.open("ab") as handle:
        handle.write(b"not json\n{torn")
    damaged = queue.path.read_bytes()

    def no_room(path: Path, data: bytes | None = None) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(queue_mod, "keep_aside", no_room)
    with pytest.raises(StorageFull, match="No space left"):
        DurableQueue(state_dir).open()
    assert queue.path.read_bytes() == damaged  # not cut, not compacted


def test_torn_dead_letters_are_kept_aside(open_queue: OpenQueue, state_dir: Path) -> None:
    queue, _ = open_queue()
    crash(queue)
    dead = state_dir / "dead.jsonl"
    dead.write_bytes(b'{"id":"q-1-000","text":"x"}\n{"id":"q-2')
    damaged = dead.read_bytes()

    reopened, report = open_queue()

    assert report.dead_torn_bytes == len(b'{"id":"q-2')
    [damage] = reopened.damage.drain()
    assert damage.path == dead and damage.problem is Problem.TORN_TAIL
    assert_kept(damage, damaged)


def test_retry_keeps_unreadable_dead_letters_aside(open_queue: OpenQueue, state_dir: Path) -> None:
    queue, _ = open_queue()
    item = {"id": "q-1-000", "text": "x", "source": "cli", "enqueued_at": 1.0, "reason": "r"}
    dead = state_dir / "dead.jsonl"
    dead.write_bytes(json.dumps(item).encode() + b"\nnot json\n")
    damaged = dead.read_bytes()

    [again] = queue.retry_dead()

    assert again.text == "x"
    [damage] = queue.damage.drain()
    assert (damage.path, damage.count) == (dead, 1)
    assert_kept(damage, damaged)
    assert dead.read_bytes() == b""


def test_a_failed_write_leaves_no_fragment(
    open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, _ = open_queue()
    first = queue.append("a", source="cli")

    def disk_full(fd: int, data: bytes) -> None:
        os.write(fd, data[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(jsonl_mod, "append_durably", disk_full)
        with pytest.raises(StorageFull, match="No space left") as raised:
            queue.append("b", source="cli")
    assert raised.value.code == "storage.full"
    assert len(queue) == 1
    third = queue.append("c", source="cli")
    crash(queue)

    reopened, report = open_queue()
    assert report.skipped == 0 and report.torn_bytes == 0
    assert ids(reopened.pending()) == [first.id, third.id]


# --- crash recovery --------------------------------------------------------------------------


def test_item_in_progress_at_a_crash_comes_back_once_then_goes_dead(
    open_queue: OpenQueue,
) -> None:
    queue, _ = open_queue()
    victim = queue.append("crashes the agent", source="cli", rid="r-v")
    other = queue.append("fine", source="cli")
    assert queue.take() == victim
    crash(queue)

    # First crash: back at the head, reported.
    queue, report = open_queue()
    assert report.requeued == [victim.id] and report.dead == []
    assert any("put back at the head" in message for message in report.messages())
    assert ids(queue.pending()) == [victim.id, other.id]
    assert queue.pending()[0].attempts == 1
    crash(queue)

    # A restart that did not process it again is not a second crash.
    queue, report = open_queue()
    assert report.requeued == [] and report.dead == []
    assert ids(queue.pending()) == [victim.id, other.id]
    taken = queue.take()
    assert taken is not None and taken.id == victim.id and taken.attempts == 2
    crash(queue)

    # Second crash on the same item: dead-lettered with the reason.
    queue, report = open_queue()
    assert report.dead == [victim.id] and report.requeued == []
    assert any("dead.jsonl" in message for message in report.messages())
    assert ids(queue.pending()) == [other.id]
    [dead] = queue.dead_items()
    assert dead["id"] == victim.id
    assert dead["text"] == "crashes the agent"
    assert dead["reason"] == DEAD_REASON
    assert queue.dead_path.stat().st_mode & 0o777 == 0o600
    crash(queue)

    queue, report = open_queue()
    assert report.dead == [] and len(queue.dead_items()) == 1


def test_an_item_in_progress_at_kills_from_outside_keeps_its_attempts(state_dir: Path) -> None:
    queue = DurableQueue(state_dir)
    queue.open()
    victim = queue.append("in flight at every kill -9", source="cli")
    # Killed (not crashed) while it ran, again and again: each time back at the head.
    for kills in range(1, KILLS_LIMIT):
        taken = queue.take()
        assert taken is not None and taken.id == victim.id and taken.attempts == 1
        crash(queue)
        queue = DurableQueue(state_dir)
        report = queue.open(killed=True)
        assert report.requeued == [victim.id] and report.dead == []
        head = queue.pending()[0]
        assert (head.id, head.attempts, head.kills) == (victim.id, 0, kills)
    # A crash of its own still counts: with one attempt already used, a second is fatal.
    assert queue.take() is not None
    crash(queue)
    queue = DurableQueue(state_dir)
    assert queue.open().requeued == [victim.id]
    assert queue.take() is not None
    crash(queue)
    queue = DurableQueue(state_dir)
    assert queue.open().dead == [victim.id]
    queue.close()


def test_an_item_killed_with_too_often_is_moved_aside_all_the_same(state_dir: Path) -> None:
    queue = DurableQueue(state_dir)
    queue.open()
    victim = queue.append("makes the OOM killer strike", source="cli")
    for _ in range(KILLS_LIMIT):
        assert queue.take() is not None
        crash(queue)
        queue = DurableQueue(state_dir)
        report = queue.open(killed=True)
    assert report.dead == [victim.id]
    assert any("killed from outside too often" in m for m in report.messages())
    [dead] = queue.dead_items()
    assert dead["reason"] == KILLED_REASON and dead["kills"] == KILLS_LIMIT
    queue.close()


def test_a_crash_while_dead_lettering_does_not_duplicate_the_entry(
    open_queue: OpenQueue,
) -> None:
    queue, _ = open_queue()
    victim = queue.append("a", source="cli")
    assert queue.take() is not None
    crash(queue)
    queue, _ = open_queue()
    assert queue.take() is not None
    crash(queue)
    before_compaction = queue.path.read_bytes()

    queue, report = open_queue()
    assert report.dead == [victim.id]
    crash(queue)
    # As if the process died after writing dead.jsonl but before rewriting queue.jsonl.
    queue.path.write_bytes(before_compaction)

    queue, report = open_queue()
    assert report.dead == [victim.id]
    assert [entry["id"] for entry in queue.dead_items()] == [victim.id]


def test_requeued_item_goes_before_higher_priority_items(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    victim = queue.append("a", source="cli")
    assert queue.take() == victim
    urgent = queue.append("b", source="cli", priority=9)
    crash(queue)

    queue, report = open_queue()
    assert report.requeued == [victim.id]
    assert ids(queue.pending()) == [victim.id, urgent.id]
    crash(queue)
    queue, _ = open_queue()  # the head position survives the compacted file
    assert ids(queue.pending()) == [victim.id, urgent.id]


def test_kill_9_never_loses_an_acknowledged_append(state_dir: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from ateam.agent.state.queue import DurableQueue

        queue = DurableQueue(Path(sys.argv[1]))
        queue.open()
        n = 0
        while True:
            item = queue.append("prompt %d " % n + "x" * 300, source="cli")
            print(item.id, flush=True)
            n += 1
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(state_dir)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    acknowledged: list[str] = []
    try:
        while len(acknowledged) < 200:
            line = proc.stdout.readline()
            assert line.endswith(b"\n"), "writer exited early"
            acknowledged.append(line.decode().strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read()
        proc.stdout.close()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # Ids printed after the 200th before the kill landed count too; a cut-off line doesn't.
    acknowledged += [line.decode() for line in rest.split(b"\n")[:-1]]

    queue = DurableQueue(state_dir)
    try:
        report = queue.open()
        on_disk = ids(queue.pending())
        assert report.skipped == 0
        assert set(acknowledged) <= set(on_disk)
        assert on_disk == sorted(on_disk)
    finally:
        queue.close()


# --- compaction ------------------------------------------------------------------------------


def test_compaction_every_n_done_keeps_pending_and_shrinks_the_file(
    open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_mod, "QUEUE_COMPACT_EVERY", 5)
    queue, _ = open_queue()
    made = [queue.append(f"p{i}", source="cli", priority=i % 2) for i in range(12)]
    expected = ids(queue.pending())
    for _ in range(4):
        item = queue.take()
        assert item is not None
        queue.done(item.id)
    before = queue.path.stat().st_size
    item = queue.take()
    assert item is not None
    queue.done(item.id)  # the fifth: compacts

    assert queue.path.stat().st_size < before
    ops = [line["op"] for line in lines(queue.path)]
    assert ops == ["last"] + ["add"] * 7
    assert ids(queue.pending()) == expected[5:]
    crash(queue)

    reopened, report = open_queue()
    assert report == RecoveryReport()
    assert ids(reopened.pending()) == expected[5:]
    assert {item.id for item in made} >= set(expected[5:])
    # Appends after compaction go to the new file, not the replaced one.
    later = reopened.append("later", source="cli", priority=-1)
    crash(reopened)
    third, _ = open_queue()
    assert ids(third.pending()) == [*expected[5:], later.id]


def test_open_compacts_finished_items(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    for i in range(3):
        queue.append(f"p{i}", source="cli")
    item = queue.take()
    assert item is not None
    queue.done(item.id, ok=False, error="boom")
    crash(queue)
    before = queue.path.stat().st_size

    reopened, _ = open_queue()
    assert reopened.path.stat().st_size < before
    assert [line["op"] for line in lines(reopened.path)] == ["last", "add", "add"]
    assert len(reopened) == 2


# --- maintenance -----------------------------------------------------------------------------


def test_clear_drops_pending_durably_and_keeps_the_current_item(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    first = queue.append("a", source="cli")
    queue.append("b", source="cli")
    queue.append("c", source="cli")
    assert queue.take() == first
    assert queue.clear() == 2
    assert queue.pending() == [] and len(queue) == 0
    assert queue.current == first
    assert queue.clear() == 0
    crash(queue)

    reopened, report = open_queue()
    assert ids(reopened.pending()) == [first.id]
    assert report.requeued == [first.id]  # the in-progress marker survived the rewrite


def test_retry_dead_reenqueues_under_new_ids(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    victim = queue.append("crashy", source="console", rid="r-9", caller="me")
    for _ in range(2):
        assert queue.take() is not None
        crash(queue)
        queue, _ = open_queue()
    assert [entry["id"] for entry in queue.dead_items()] == [victim.id]
    waiting = queue.append("waiting", source="cli")

    [retried] = queue.retry_dead()
    assert retried.id > waiting.id
    assert (retried.text, retried.source, retried.rid, retried.caller) == (
        "crashy",
        "console",
        "r-9",
        "me",
    )
    assert retried.attempts == 0
    assert queue.dead_items() == []
    assert queue.find_rid("r-9") == retried
    assert queue.retry_dead() == []
    crash(queue)

    reopened, _ = open_queue()
    assert ids(reopened.pending()) == [waiting.id, retried.id]
    assert reopened.dead_items() == []


def test_find_rid_covers_pending_current_and_finished(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    item = queue.append("a", source="console", rid="r-1")
    queue.append("b", source="console", rid="r-2")
    assert queue.find_rid("r-1") == item
    assert queue.find_rid("nope") is None
    assert queue.take() == item
    assert queue.find_rid("r-1") == item
    queue.done(item.id)
    found = queue.find_rid("r-1")
    assert found is not None and found.id == item.id
    crash(queue)

    # Finished before the restart, still in the log: known after reopening.
    reopened, _ = open_queue()
    found = reopened.find_rid("r-1")
    assert found is not None and found.id == item.id
    assert reopened.clear() == 1
    assert reopened.find_rid("r-2") is not None  # a cleared request is still not re-enqueued


def test_request_ids_outlive_compactions_and_restarts(open_queue: OpenQueue) -> None:
    queue, _ = open_queue()
    first = queue.append("once", source="cli", rid="r-once", trace_id="t-once")
    assert queue.take() == first
    queue.done(first.id)
    # A full compaction rhythm of other work on top.
    for i in range(QUEUE_COMPACT_EVERY + 5):
        queue.append(f"item {i}", source="cli", rid=f"r-{i}")
        taken = queue.take()
        assert taken is not None
        queue.done(taken.id)
    crash(queue)
    for _ in range(3):  # each open compacts what the last one left
        queue, _ = open_queue()
        crash(queue)

    queue, report = open_queue()
    found = queue.find_rid("r-once")
    assert found is not None and (found.id, found.trace_id) == (first.id, "t-once")
    assert queue.find_rid(f"r-{QUEUE_COMPACT_EVERY}") is not None
    assert len(queue) == 0 and queue.current is None and report.skipped == 0
    # Only the newest 1024 are kept, as one small line each.
    assert sum(1 for line in lines(queue.path) if line["op"] == "seen") == QUEUE_COMPACT_EVERY + 6


def test_queue_item_round_trips_through_dict() -> None:
    item = QueueItem("q-1-000", "t", "cli", 1.5, priority=2, rid="r", attempts=1)
    assert QueueItem.from_dict({**item.to_dict(), "op": "add"}) == item
    with pytest.raises(ValueError):
        QueueItem.from_dict({**item.to_dict(), "text": 5})
    with pytest.raises(TypeError):
        QueueItem.from_dict({"id": "q-1-000"})


def test_release_puts_the_item_back_without_using_an_attempt(tmp_path: Path) -> None:
    queue = DurableQueue(tmp_path)
    queue.open()
    first = queue.append("a", source="cli")
    queue.append("b", source="cli")
    item = queue.take()
    assert item is not None and item.id == first.id
    queue.release(item.id)
    assert queue.pending()[0].id == first.id
    queue.close()
    # Released twice across restarts and it is still not dead-lettered.
    for _ in range(2):
        reopened = DurableQueue(tmp_path)
        report = reopened.open()
        assert report.dead == [] and report.requeued == []
        again = reopened.take()
        assert again is not None and again.id == first.id and again.attempts == 1
        reopened.release(again.id)
        reopened.close()


# --- a full disk -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("err", "expected"),
    [(errno.ENOSPC, StorageFull), (errno.EDQUOT, StorageFull), (errno.EIO, StorageError)],
)
def test_write_errors_say_what_happened(
    open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch, err: int, expected: type
) -> None:
    queue, _ = open_queue()

    def failing(fd: int, data: bytes) -> None:
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(jsonl_mod, "append_durably", failing)
    with pytest.raises(StorageError) as raised:
        queue.append("a", source="cli")
    assert type(raised.value) is expected
    assert raised.value.detail["errno"] == err


def test_a_full_disk_takes_nothing_and_finishes_nothing(
    open_queue: OpenQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, _ = open_queue()
    first = queue.append("a", source="cli")

    def disk_full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(jsonl_mod, "append_durably", disk_full)
        with pytest.raises(StorageFull):
            queue.take()
    # Not taken: still first in line, no attempt used.
    assert queue.current is None and ids(queue.pending()) == [first.id]
    assert queue.pending()[0].attempts == 0

    item = queue.take()
    assert item is not None and item.attempts == 1
    with monkeypatch.context() as patch:
        patch.setattr(jsonl_mod, "append_durably", disk_full)
        with pytest.raises(StorageFull):
            queue.done(item.id)
        with pytest.raises(StorageFull):
            queue.release(item.id)
    # Neither finished nor released: the same write can be tried again.
    assert queue.current is item
    queue.release(item.id)
    crash(queue)

    reopened, report = open_queue()
    assert report.requeued == [] and report.dead == []
    again = reopened.take()
    assert again is not None and again.id == first.id and again.attempts == 1


def test_copies_kept_in_the_same_second_do_not_overwrite_each_other(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = SimpleNamespace(gmtime=lambda: time.gmtime(0), strftime=time.strftime)
    monkeypatch.setattr(fs_mod, "time", frozen)
    state_dir.mkdir(parents=True)
    damaged = state_dir / "queue.jsonl"
    damaged.write_bytes(b"one")
    first = keep_aside(damaged)
    damaged.write_bytes(b"two")
    second = keep_aside(damaged)
    assert first.name == "queue.jsonl.corrupt-19700101T000000Z"
    assert second.name == "queue.jsonl.corrupt-19700101T000000Z-2"
    assert (first.read_bytes(), second.read_bytes()) == (b"one", b"two")


def test_a_failed_atomic_write_leaves_no_temp_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a full disk a half-written temp file would hold the room the next try needs.
    target = tmp_path / "state" / "handoff.json"
    target.parent.mkdir()
    target.write_bytes(b"old")

    def disk_full(fd: int, data: bytes) -> None:
        os.write(fd, data[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fs_mod, "append_durably", disk_full)
    with pytest.raises(OSError):
        fs_mod.atomic_write(target, b"new content")
    assert [p.name for p in target.parent.iterdir()] == ["handoff.json"]
    assert target.read_bytes() == b"old"
