"""History and summaries on disk (SPEC §5.3): durability, rotation, tail, torn-line repair."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ateam import _jsonl as jsonl_mod
from ateam._fs import Damage, Problem, append_durably
from ateam.agent.state import history as history_mod
from ateam.agent.state.history import History, SummaryLog
from ateam.errors import StorageError
from ateam.wire.turns import Turn

OpenHistory = Callable[..., History]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "agent" / "state"


@pytest.fixture
def open_history(state_dir: Path) -> Iterator[OpenHistory]:
    """Opens a History on the shared state dir (keyword options passed on); closes all after."""
    opened: list[History] = []

    def factory(**options: Any) -> History:
        history = History(state_dir, **options)
        history.open()
        opened.append(history)
        return history

    yield factory
    for history in opened:
        history.close()


def turn(n: int, content: str = "") -> Turn:
    return Turn.model_validate(
        {"role": "user", "source": "cli", "content": content or f"turn {n}", "n": n}
    )


def numbers(turns: list[dict[str, Any]]) -> list[int]:
    return [t["n"] for t in turns]


def test_append_then_tail_oldest_first(open_history: OpenHistory) -> None:
    history = open_history()
    for n in range(5):
        history.append(turn(n))
    assert numbers(history.tail(3)) == [2, 3, 4]
    assert numbers(history.tail(100)) == [0, 1, 2, 3, 4]
    assert history.tail(0) == []
    assert history.count() == 5
    assert all(isinstance(t["ts"], float) for t in history.tail(5))


def test_existing_ts_is_kept_and_the_caller_turn_untouched(open_history: OpenHistory) -> None:
    history = open_history()
    mine = turn(0)
    history.append(mine)
    history.append(turn(1).with_fields(ts=12.5))
    assert "ts" not in mine.model_fields_set
    assert history.tail(1)[0]["ts"] == 12.5


def test_append_is_on_disk_when_it_returns(open_history: OpenHistory, state_dir: Path) -> None:
    history = open_history()
    history.append(turn(0))
    history.append_many([turn(1), turn(2)])
    other = History(state_dir)  # a second reader while the first is still open
    assert numbers(other.tail(10)) == [0, 1, 2]
    assert open_history().count() == 3


def test_append_many_is_one_write(
    open_history: OpenHistory, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = open_history()
    writes: list[bytes] = []
    real = append_durably

    def counting(fd: int, data: bytes) -> None:
        writes.append(data)
        real(fd, data)

    monkeypatch.setattr(jsonl_mod, "append_durably", counting)
    history.append_many([turn(n) for n in range(4)])
    assert len(writes) == 1 and writes[0].count(b"\n") == 4
    assert history.count() == 4


def test_a_turn_must_be_a_turn(open_history: OpenHistory) -> None:
    history = open_history()
    with pytest.raises(TypeError):
        history.append({"role": "user", "content": "a dict"})  # type: ignore[arg-type]
    assert history.count() == 0


def test_a_failed_write_leaves_no_fragment(
    open_history: OpenHistory, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = open_history()
    history.append(turn(0))

    def disk_full(fd: int, data: bytes) -> None:
        os.write(fd, data[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(jsonl_mod, "append_durably", disk_full)
        with pytest.raises(StorageError, match="No space left"):
            history.append(turn(1))
    history.append(turn(2))
    assert numbers(history.tail(10)) == [0, 2]
    assert history.count() == 2 == len(history.path.read_bytes().splitlines())


def test_rotation_keeps_at_most_keep_files(open_history: OpenHistory, state_dir: Path) -> None:
    history = open_history(rotate_bytes=400, keep=2)
    stale = state_dir / "history.jsonl.7"  # left by an older, larger keep
    stale.write_bytes(b"{}\n")
    for n in range(40):
        history.append(turn(n, "x" * 60))
    names = sorted(p.name for p in state_dir.iterdir())
    assert names == ["history.jsonl", "history.jsonl.1", "history.jsonl.2"]
    for path in state_dir.iterdir():
        assert path.stat().st_size <= 400
        assert path.stat().st_mode & 0o777 == 0o600
    assert history.count() == len(history.path.read_bytes().splitlines())
    assert history.count() < 40


def test_a_turn_larger_than_rotate_bytes_is_still_written(open_history: OpenHistory) -> None:
    history = open_history(rotate_bytes=50, keep=1)
    history.append(turn(0, "y" * 200))
    assert not history.path.with_name("history.jsonl.1").exists()  # no empty rotated file
    history.append(turn(1, "y" * 200))
    assert numbers(history.tail(2)) == [0, 1]
    assert history.count() == 1


def test_tail_reads_across_rotated_files(open_history: OpenHistory, state_dir: Path) -> None:
    history = open_history(rotate_bytes=300, keep=5)
    for n in range(20):
        history.append(turn(n, "z" * 40))
    assert (state_dir / "history.jsonl.1").exists()
    assert history.count() < 12
    assert numbers(history.tail(12)) == list(range(8, 20))


def test_tail_survives_a_gap_in_rotated_files(open_history: OpenHistory, state_dir: Path) -> None:
    history = open_history(rotate_bytes=300, keep=5)
    for n in range(20):
        history.append(turn(n, "z" * 40))
    (state_dir / "history.jsonl.1").unlink()  # as a crash mid-rotation could leave it
    got = numbers(history.tail(100))
    assert got == sorted(got) and got[-1] == 19


@pytest.mark.parametrize("block", [1, 5, 7, 64, 4096])
def test_tail_reads_backwards_in_blocks(
    open_history: OpenHistory, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    history = open_history()
    for n in range(30):
        history.append(turn(n, "w" * (n * 7 % 23 + 1)))
    monkeypatch.setattr(history_mod, "_BLOCK", block)
    for n in (1, 2, 17, 30, 31):
        assert numbers(history.tail(n)) == list(range(max(0, 30 - n), 30))


def test_tail_skips_unreadable_lines(open_history: OpenHistory) -> None:
    history = open_history()
    history.append(turn(0))
    with history.path.open("ab") as handle:
        handle.write(b"garbage\n[1, 2]\n")
    history.append(turn(1))
    assert numbers(history.tail(5)) == [0, 1]


def assert_kept(damage: Damage, original: bytes) -> None:
    assert damage.kept is not None, damage
    assert damage.kept.name.startswith(f"{damage.path.name}.corrupt-")
    assert damage.kept.read_bytes() == original
    assert damage.kept.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("block", [3, 16, 4096])
def test_unreadable_lines_are_reported_once_with_a_copy(
    open_history: OpenHistory, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(history_mod, "_BLOCK", block)
    history = open_history()
    history.append(turn(0))
    with history.path.open("ab") as handle:
        handle.write(b"garbage\n[1, 2]\n")
    history.append(turn(1))
    damaged = history.path.read_bytes()

    assert numbers(history.tail(5)) == [0, 1]
    [damage] = history.damage.drain()
    assert (damage.problem, damage.count) == (Problem.UNREADABLE_LINES, 2)
    assert "history: skipped 2 unreadable line(s) of history.jsonl" in damage.message()
    assert_kept(damage, damaged)

    # Read again (every turn does), and grown: the same damage is no news.
    history.append(turn(2))
    assert numbers(history.tail(5)) == [0, 1, 2]
    assert history.damage.drain() == []
    # A line damaged later is.
    with history.path.open("ab") as handle:
        handle.write(b"{bad\n")
    history.tail(5)
    [later] = history.damage.drain()
    assert later.count == 1


def test_a_short_tail_reports_only_the_lines_it_read(open_history: OpenHistory) -> None:
    history = open_history()
    with history.path.open("ab") as handle:
        handle.write(b"garbage\n")
    for n in range(3):
        history.append(turn(n))
    assert numbers(history.tail(2)) == [1, 2]
    assert history.damage.drain() == []  # the damaged line was not read
    history.tail(10)
    assert [d.count for d in history.damage.drain()] == [1]


def test_torn_last_line_is_repaired(open_history: OpenHistory, state_dir: Path) -> None:
    history = open_history()
    for n in range(3):
        history.append(turn(n))
    history.close()
    torn = b'{"role":"assistant","cont'
    with history.path.open("ab") as handle:
        handle.write(torn)
    damaged = history.path.read_bytes()

    reopened = History(state_dir)
    try:
        assert reopened.open() == len(torn)
        [damage] = reopened.damage.drain()
        assert (damage.problem, damage.dropped_bytes) == (Problem.TORN_TAIL, len(torn))
        assert damage.message().startswith(
            f"history: repaired torn last line of history.jsonl ({len(torn)} bytes dropped)"
        )
        assert_kept(damage, damaged)
        assert reopened.count() == 3
        reopened.append(turn(3))
        assert numbers(reopened.tail(10)) == [0, 1, 2, 3]
    finally:
        reopened.close()
    assert open_history().count() == 4


def test_clear_removes_every_file_and_history_stays_usable(
    open_history: OpenHistory, state_dir: Path
) -> None:
    history = open_history(rotate_bytes=200, keep=3)
    for n in range(20):
        history.append(turn(n, "v" * 30))
    assert (state_dir / "history.jsonl.1").exists()
    history.clear()
    assert not any(p.name.startswith("history.jsonl.") for p in state_dir.iterdir())
    assert history.tail(10) == [] and history.count() == 0
    history.append(turn(99))
    assert numbers(history.tail(10)) == [99]


def test_files_are_created_private(open_history: OpenHistory, state_dir: Path) -> None:
    history = open_history()
    history.append(turn(0))
    summaries = SummaryLog(state_dir)
    summaries.append("s", window=(0, 0), model="m")
    assert history.path.stat().st_mode & 0o777 == 0o600
    assert summaries.path.stat().st_mode & 0o777 == 0o600


# --- summaries ---------------------------------------------------------------------------------


def test_summary_log_keeps_the_newest_200(state_dir: Path) -> None:
    summaries = SummaryLog(state_dir)
    for n in range(205):
        summaries.append(f"summary {n}", window=(n * 10, n * 10 + 9), model="small")
    kept = summaries.all()
    assert len(kept) == 200
    assert kept[0].summary == "summary 5" and kept[-1].summary == "summary 204"
    assert kept[-1].window == (2040, 2049) and kept[-1].model == "small"
    assert isinstance(kept[-1].ts, float)
    assert len(summaries.path.read_bytes().splitlines()) == 200
    assert summaries.path.stat().st_mode & 0o777 == 0o600  # also after the atomic rewrite
    assert [s.summary for s in SummaryLog(state_dir).all()] == [s.summary for s in kept]


def test_summary_log_counts_existing_entries_and_repairs_a_torn_line(state_dir: Path) -> None:
    first = SummaryLog(state_dir, keep=4)
    for n in range(3):
        first.append(f"s{n}", window=(n, n), model="m")
    with first.path.open("ab") as handle:
        handle.write(b'{"summary":"tor')

    damaged = first.path.read_bytes()
    second = SummaryLog(state_dir, keep=4)
    second.append("s3", window=(3, 3), model="m")  # appended after the repair
    [damage] = second.damage.drain()
    assert damage.problem is Problem.TORN_TAIL
    assert_kept(damage, damaged)
    assert [s.summary for s in second.all()] == ["s0", "s1", "s2", "s3"]
    second.append("s4", window=(4, 4), model="m")  # the count included the old entries
    assert [s.summary for s in second.all()] == ["s1", "s2", "s3", "s4"]
    assert all(json.loads(line) for line in second.path.read_bytes().splitlines())


def test_summary_rewrite_keeps_unreadable_lines_aside_first(state_dir: Path) -> None:
    summaries = SummaryLog(state_dir, keep=3)
    for n in range(3):
        summaries.append(f"s{n}", window=(n, n), model="m")
    with summaries.path.open("ab") as handle:
        handle.write(b"not json\n")
    damaged = summaries.path.read_bytes()

    assert [s.summary for s in summaries.all()] == ["s0", "s1", "s2"]
    assert summaries.all() and len(summaries.damage.drain()) == 1  # once, not per read
    summaries.append("s3", window=(3, 3), model="m")  # the rewrite drops the bad line

    assert b"not json" not in summaries.path.read_bytes()
    [kept] = [p for p in state_dir.iterdir() if p.name.startswith("summary.jsonl.corrupt-")]
    assert kept.read_bytes() == damaged


def test_the_same_damage_found_again_is_not_copied_again(tmp_path: Path) -> None:
    from ateam._fs import keep_aside

    damaged = tmp_path / "history.jsonl"
    damaged.write_bytes(b'{"role": "user"}\nnot json\n')
    first = keep_aside(damaged)
    again = keep_aside(damaged)  # the next start finds the same file
    assert again == first and len(list(tmp_path.glob("history.jsonl.corrupt-*"))) == 1

    damaged.write_bytes(b'{"role": "user"}\nother damage\n')
    other = keep_aside(damaged)
    assert other != first and other.read_bytes() == damaged.read_bytes()
    assert keep_aside(damaged, damaged.read_bytes()) == other
