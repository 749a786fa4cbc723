"""The handoff record (SPEC §7): checksum, validity, merge under lock, crash safety."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import portalocker
import pytest

from ateam._fs import Problem
from ateam.agent.context.handoff import (
    HANDOFF_TTL_S,
    HandoffStore,
    Validity,
    canonical_bytes,
    check,
    compute_checksum,
    empty_record,
    merge,
    verify_checksum,
)
from ateam.errors import StorageError

T0 = 1_800_000_000.0
"""A fixed write time, so expiry is judged against a known clock."""


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "agent" / "state"


@pytest.fixture
def store(state_dir: Path) -> HandoffStore:
    return HandoffStore(state_dir, model="m1", project="/proj")


def independent_checksum(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def altered(value: Any) -> Any:
    """A different value of the same JSON kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, "x"]
    if isinstance(value, dict):
        return {**value, "x": 1}
    return "x"


# -- checksum and validity ----------------------------------------------------------------


def test_checksum_is_sha256_of_the_canonical_json_without_checksum(store: HandoffStore) -> None:
    record = store.update(
        {"task": {"description": "café ✓ — naïve"}, "context": {"decisions": ["zé"]}},
        author="m1",
        now=T0,
    )
    expected = independent_checksum(record)
    assert record["checksum"] == expected
    body = {k: v for k, v in record.items() if k != "checksum"}
    assert canonical_bytes(record) == json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")
    assert "café".encode() in canonical_bytes(record)  # UTF-8, not \u escapes
    assert compute_checksum(record) == expected
    on_disk = json.loads(store.path.read_bytes())
    assert on_disk == record
    assert independent_checksum(on_disk) == on_disk["checksum"]
    assert verify_checksum(on_disk)


def test_any_altered_field_fails_with_bad_checksum(store: HandoffStore) -> None:
    record = store.update({"task": {"description": "build"}}, author="m1", now=T0)
    assert check(record, now=T0 + 1) == Validity(ok=True, reason=None)
    for key in record:
        if key == "checksum":
            continue
        tampered = {**record, key: altered(record[key])}
        assert check(tampered, now=T0 + 1) == Validity(ok=False, reason="bad_checksum"), key
    nested = json.loads(store.path.read_bytes())
    nested["context"]["next_steps"].append("sneaked in")
    assert check(nested, now=T0 + 1).reason == "bad_checksum"
    assert check({**record, "checksum": "sha256:" + "0" * 64}, now=T0 + 1).reason == (
        "bad_checksum"
    )


def test_a_record_altered_on_disk_fails_with_bad_checksum(store: HandoffStore) -> None:
    store.update({"task": {"status": "in_progress"}}, author="m1", now=T0)
    text = store.path.read_text(encoding="utf-8").replace("in_progress", "done")
    store.path.write_text(text, encoding="utf-8")
    record, validity = store.show(now=T0 + 1)
    assert record is not None and record["task"]["status"] == "done"
    assert validity == Validity(ok=False, reason="bad_checksum")


def test_check_reasons(store: HandoffStore) -> None:
    assert check(None) == Validity(ok=False, reason="missing")
    assert store.show() == (None, Validity(ok=False, reason="missing"))

    record = store.update({}, author="m1", ready=False, now=T0)
    assert check(record, now=T0 + 1) == Validity(ok=False, reason="not_ready")

    record = store.update({}, author="m1", now=T0)
    assert epoch(record["handoff_expires"]) == pytest.approx(epoch(record["timestamp"]) + 300)
    assert epoch(record["timestamp"]) == pytest.approx(T0)
    assert check(record, now=T0 + HANDOFF_TTL_S - 1).ok
    assert check(record, now=T0 + HANDOFF_TTL_S + 1) == Validity(ok=False, reason="expired")
    assert store.show(now=T0 + 1) == (record, Validity(ok=True, reason=None))


def test_check_malformed_even_with_a_matching_checksum() -> None:
    record = empty_record(model="m1", project="/p")
    assert check(record) == Validity(ok=False, reason="not_ready")
    for key, bad in (("schema_version", 2), ("model", "m1"), ("sequence", "7")):
        broken = {**record, key: bad, "handoff_ready": True}
        broken["checksum"] = compute_checksum(broken)
        assert check(broken).reason == "malformed", key
    ready_without_expiry = {**record, "handoff_ready": True}
    ready_without_expiry["checksum"] = compute_checksum(ready_without_expiry)
    assert check(ready_without_expiry).reason == "malformed"
    assert check({"checksum": 5}).reason == "malformed"


def test_empty_record_is_schema_complete() -> None:
    record = empty_record(model="m1", project="/p")
    assert set(record) == {
        "schema_version",
        "sequence",
        "timestamp",
        "handoff_expires",
        "handoff_ready",
        "checksum",
        "author",
        "model",
        "task",
        "context",
        "files_touched",
    }
    assert record["schema_version"] == 1 and record["handoff_ready"] is False
    assert record["model"] == {"current": "m1", "usage_percent": None, "history": []}
    assert set(record["task"]) == {"description", "status", "project"}
    assert record["task"]["project"] == "/p"
    assert record["context"] == {
        "recent_actions": [],
        "decisions": [],
        "next_steps": [],
        "blockers": [],
        "failures": [],
    }
    assert verify_checksum(record)


# -- merge --------------------------------------------------------------------------------


def test_merge_rules() -> None:
    base: dict[str, Any] = {"a": {"x": 1, "y": [1, 2]}, "keep": "k", "s": "old"}
    patch: dict[str, Any] = {"a": {"y": [3], "z": {"deep": True}}, "s": None, "new": [None]}
    merged = merge(base, patch)
    assert merged == {
        "a": {"x": 1, "y": [3], "z": {"deep": True}},
        "keep": "k",
        "s": "old",  # None means no change
        "new": [None],  # inside a replacing list, None is just a value
    }
    assert base == {"a": {"x": 1, "y": [1, 2]}, "keep": "k", "s": "old"}
    merged["a"]["z"]["deep"] = False
    assert patch["a"]["z"] == {"deep": True}  # no aliasing into the patch


def test_update_merges_sections_and_replaces_lists(store: HandoffStore) -> None:
    first = store.update({"task": {"description": "x"}}, author="m1", now=T0)
    store.update({"context": {"next_steps": ["a", "b"], "decisions": ["d"]}}, author="m1")
    last = store.update(
        {"task": {"status": "in_progress"}, "context": {"next_steps": ["c"]}}, author="m2"
    )
    assert last["task"] == {"description": "x", "status": "in_progress", "project": "/proj"}
    assert last["context"]["next_steps"] == ["c"]
    assert last["context"]["decisions"] == ["d"]
    assert [first["sequence"], last["sequence"]] == [1, 3]
    assert last["author"] == "m2"
    assert store.read() == last
    assert os.stat(store.path).st_mode & 0o777 == 0o600
    assert os.stat(store.lock_path).st_mode & 0o777 == 0o600


def test_bookkeeping_fields_cannot_be_patched(store: HandoffStore) -> None:
    store.update({}, author="m1", now=T0)
    record = store.update(
        {"sequence": 99, "checksum": "sha256:nope", "schema_version": 7}, author="m1", now=T0
    )
    assert (record["sequence"], record["schema_version"]) == (2, 1)
    assert check(record, now=T0).ok


def test_a_patch_that_breaks_the_schema_is_refused(store: HandoffStore) -> None:
    before = store.update({}, author="m1", now=T0)
    with pytest.raises(TypeError):
        store.update({"model": "m2"}, author="m1", now=T0)
    assert store.read() == before


def test_first_update_starts_the_model_history(store: HandoffStore) -> None:
    record = store.update({}, author="m1", now=T0)
    assert record["model"]["history"] == [
        {"model": "m1", "from": record["timestamp"], "until": None, "reason": "start"}
    ]
    again = store.update({}, author="m1", now=T0 + 5)
    assert again["model"]["history"] == record["model"]["history"]


# -- model switches -----------------------------------------------------------------------


def test_record_switch_closes_and_chains_history(store: HandoffStore) -> None:
    store.update({"task": {"description": "build"}}, author="m1", now=T0)
    one = store.record_switch(
        from_model="m1", to_model="m2", reason="rate_limited", usage_percent=0.97, now=T0 + 10
    )
    history = one["model"]["history"]
    assert len(history) == 2
    assert history[0]["until"] == history[1]["from"] == one["timestamp"]
    assert history[0]["reason"] == "start"
    assert history[1] == {
        "model": "m2",
        "from": one["timestamp"],
        "until": None,
        "reason": "rate_limited",
    }
    assert one["model"]["current"] == "m2"
    assert one["model"]["usage_percent"] == 0.97
    assert one["task"]["description"] == "build"
    assert one["author"] == "m1"
    assert check(one, now=T0 + 11).ok

    two = store.record_switch(
        from_model="m2", to_model="m1", reason="switch_back", usage_percent=None, now=T0 + 20
    )
    history = two["model"]["history"]
    assert [e["model"] for e in history] == ["m1", "m2", "m1"]
    assert [e["reason"] for e in history] == ["start", "rate_limited", "switch_back"]
    assert history[0]["until"] == history[1]["from"]
    assert history[1]["until"] == history[2]["from"] == two["timestamp"]
    assert history[2]["until"] is None
    assert [e["until"] is None for e in history] == [False, False, True]
    assert two["model"]["current"] == "m1"
    assert two["model"]["usage_percent"] is None
    assert two["sequence"] == 3
    assert store.read() == two


def test_record_switch_keeps_readiness_and_works_on_a_fresh_store(store: HandoffStore) -> None:
    fresh = store.record_switch(
        from_model="m1", to_model="m2", reason="incomplete_handoff", usage_percent=None, now=T0
    )
    assert [(e["model"], e["until"] is None) for e in fresh["model"]["history"]] == [
        ("m1", False),
        ("m2", True),
    ]
    assert check(fresh, now=T0).reason == "not_ready"
    store.update({}, author="m2", ready=False, now=T0 + 1)
    after = store.record_switch(
        from_model="m2", to_model="m3", reason="overloaded", usage_percent=None, now=T0 + 2
    )
    assert after["handoff_ready"] is False


# -- mirror, corrupt files, locks ---------------------------------------------------------


def test_mirror_gets_the_file_bytes_and_cannot_fail_the_write(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[bytes] = []
    store = HandoffStore(state_dir, model="m1", project="/p", mirror=seen.append)
    record = store.update({"task": {"description": "x"}}, author="m1")
    assert seen == [store.path.read_bytes()]
    assert json.loads(seen[0]) == record

    def broken(data: bytes) -> None:
        raise ConnectionError("redis is down")

    failing = HandoffStore(state_dir, model="m1", project="/p", mirror=broken)
    with caplog.at_level(logging.WARNING, logger="ateam.agent.context.handoff"):
        record = failing.update({"task": {"status": "done"}}, author="m1")
    assert record["sequence"] == 2
    assert failing.read() == record
    assert any("mirror" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("content", [b'{"schema_version": 1, "seq', b"[1, 2]", b"\xff\xfe{}", b""])
def test_read_of_a_corrupt_file_returns_none(store: HandoffStore, content: bytes) -> None:
    store.state_dir.mkdir(parents=True)
    store.path.write_bytes(content)
    assert store.read() is None
    assert store.show() == (None, Validity(ok=False, reason="missing"))
    record = store.update({"task": {"description": "again"}}, author="m1", now=T0)
    assert record["sequence"] == 1 and check(record, now=T0).ok


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"schema_version": 1, "seq', Problem.NOT_JSON),
        (b"[1, 2]", Problem.WRONG_SHAPE),
        (b'{"sequence": 3, "checksum": "sha256:00"}', Problem.BAD_CHECKSUM),
    ],
)
def test_a_corrupt_record_is_reported_once_and_kept_before_it_is_replaced(
    store: HandoffStore, content: bytes, problem: Problem
) -> None:
    store.state_dir.mkdir(parents=True)
    store.path.write_bytes(content)
    store.read()
    store.show()  # read again: the same damage is not news

    [damage] = store.damage.drain()
    assert damage.problem is problem and damage.store == "handoff"
    assert damage.message().startswith("handoff: handoff.json ")
    assert damage.kept is not None and damage.kept.read_bytes() == content
    assert damage.kept.stat().st_mode & 0o777 == 0o600

    store.update({"task": {"description": "again"}}, author="m1", now=T0)
    assert damage.kept.read_bytes() == content  # the write replaced the file, not the copy
    assert store.damage.drain() == []  # and the new record is sound


def test_a_sound_record_is_no_damage(store: HandoffStore) -> None:
    store.update({"task": {"description": "x"}}, author="m1", now=T0)
    store.read()
    assert store.damage.drain() == []
    assert not [p for p in store.state_dir.iterdir() if ".corrupt-" in p.name]


def test_an_unverified_record_is_not_merged_into(store: HandoffStore) -> None:
    # Signing a merge into it would vouch for fields nobody can vouch for.
    store.state_dir.mkdir(parents=True)
    store.path.write_text(
        json.dumps({"sequence": 4, "model": "oops", "task": {"status": "x"},
                    "context": {"next_steps": ["rm -rf /"]}})
    )  # fmt: skip
    record = store.update({"task": {"description": "real"}}, author="m1", now=T0)
    assert record["sequence"] == 5  # the counter still only goes up
    assert record["model"]["current"] == "m1"
    assert record["task"] == {"description": "real", "status": "idle", "project": "/proj"}
    assert record["context"]["next_steps"] == []
    assert check(record, now=T0).ok


def test_lock_wait_times_out_with_storage_error(
    store: HandoffStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.update({}, author="m1", now=T0)
    store.lock_timeout_s = 0.2
    holder = portalocker.Lock(
        str(store.lock_path),
        mode="a",
        timeout=1,
        flags=portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING,
    )
    holder.acquire()
    try:
        with pytest.raises(StorageError):
            store.update({"task": {"description": "blocked"}}, author="m1")
    finally:
        holder.release()
    assert store.update({}, author="m1")["sequence"] == 2


# -- concurrent writers and crashes -------------------------------------------------------

_WRITER = """
import sys
from pathlib import Path
from ateam.agent.context.handoff import HandoffStore

state, k, rounds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
store = HandoffStore(state, model="m1", project="/proj")
print("ready", flush=True)
sys.stdin.readline()  # start together, so the writers really overlap
for i in range(rounds):
    store.update({f"writer_{k}": {"n": i}, "files": {f"w{k}": i}}, author=f"w{k}")
"""


def test_writers_in_separate_processes_lose_no_field(store: HandoffStore) -> None:
    writers, rounds = 4, 25
    store.update({"task": {"description": "shared"}}, author="m1")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(store.state_dir), str(k), str(rounds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(writers)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            assert proc.wait(timeout=30) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()

    record = store.read()
    assert record is not None
    assert record["sequence"] == writers * rounds + 1
    assert record["files"] == {f"w{k}": rounds - 1 for k in range(writers)}
    for k in range(writers):
        assert record[f"writer_{k}"] == {"n": rounds - 1}
    assert record["task"]["description"] == "shared"
    assert verify_checksum(record) and check(record).ok


def test_stores_in_threads_lose_no_field(store: HandoffStore) -> None:
    stores = [
        HandoffStore(store.state_dir, model="m1", project="/proj") for _ in range(2)
    ]  # two stores over one file, as a worker thread and the agent loop might hold
    rounds = 20

    def write(k: int) -> None:
        for i in range(rounds):
            stores[k % 2].update({"files": {f"t{k}": i}}, author="m1")

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    record = store.read()
    assert record is not None
    assert record["sequence"] == 4 * rounds
    assert record["files"] == {f"t{k}": rounds - 1 for k in range(4)}


_LOOPER = """
import sys
from pathlib import Path
from ateam.agent.context.handoff import HandoffStore

store = HandoffStore(Path(sys.argv[1]), model="m1", project="/proj")
big = ["src/" + "x" * 100 + str(i) for i in range(10000)]  # about 1 MB per write
i = 0
while True:
    i += 1
    store.update({"files_touched": big, "task": {"description": f"write {i}"}}, author="m1")
    if i == 1:
        print("writing", flush=True)
"""


def test_kill_9_during_writes_leaves_a_valid_record(store: HandoffStore) -> None:
    rng = random.Random(7)
    previous = store.update({"task": {"description": "before"}}, author="m1")
    for _ in range(10):
        proc = subprocess.Popen(
            [sys.executable, "-c", _LOOPER, str(store.state_dir)], stdout=subprocess.PIPE
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"writing\n"
            time.sleep(rng.uniform(0, 0.05))  # the kill lands at a random point in a write
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL

        raw = store.path.read_bytes()
        record = json.loads(raw)  # the file is always one whole record
        assert store.read() == record
        assert check(record, now=time.time()).ok, check(record, now=time.time())
        assert record["sequence"] > previous["sequence"]
        assert record["task"]["description"].startswith("write ")
        previous = record

    # The killed writers' locks died with them, and their temp files are not the record.
    final = store.update({"task": {"description": "after"}}, author="m1")
    assert final["sequence"] == previous["sequence"] + 1
    assert store.read() == final
    assert [p.name for p in store.state_dir.glob("handoff.json*")] == ["handoff.json"]
