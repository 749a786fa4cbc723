"""The usage ledger, ``state/usage.json`` (issue 10: usage survives a restart)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from ateam._fs import Damage
from ateam.agent.state.usage import Usage, UsageLedger


def test_counts_round_trip_through_the_file(tmp_path: Path) -> None:
    ledger = UsageLedger(tmp_path)
    ledger.save({"gpt": Usage(1200, 300, 4, 0.0021), "echo": Usage(5, 5, 1, 0.0)})

    assert UsageLedger(tmp_path).load() == {
        "gpt": Usage(1200, 300, 4, 0.0021),
        "echo": Usage(5, 5, 1, 0.0),
    }
    assert stat.S_IMODE((tmp_path / "usage.json").stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".usage.json.*"))  # no temp file left behind


def test_a_damaged_file_is_kept_aside_and_reported_and_good_entries_stay(
    tmp_path: Path,
) -> None:
    damaged = json.dumps(
        {"models": {"gpt": {"tokens_in": 10, "tokens_out": 2, "calls": 1, "cost": 0.5},
                    "bad": {"tokens_in": -1, "tokens_out": 2, "calls": 1},
                    "worse": {"tokens_in": True, "tokens_out": 2, "calls": 1}}}
    ).encode()  # fmt: skip
    (tmp_path / "usage.json").write_bytes(damaged)
    ledger = UsageLedger(tmp_path)
    found: list[Damage] = []

    assert ledger.load() == {"gpt": Usage(10, 2, 1, 0.5)}
    ledger.damage.listen(found.append)

    (report,) = found
    assert report.count == 2 and report.kept is not None
    assert report.kept.read_bytes() == damaged
    assert report.kept.name.startswith("usage.json.corrupt-")


def test_a_file_that_is_not_json_reads_as_zero_and_its_copy_is_kept(tmp_path: Path) -> None:
    (tmp_path / "usage.json").write_bytes(b'{"models": {"gpt": {"tok')
    ledger = UsageLedger(tmp_path)

    assert ledger.load() == {}
    (report,) = ledger.damage.drain()
    assert report.kept is not None and report.kept.read_bytes() == b'{"models": {"gpt": {"tok'


def test_a_failed_save_returns_false_instead_of_raising(tmp_path: Path) -> None:
    ledger = UsageLedger(tmp_path)
    (tmp_path / "usage.json").mkdir()  # nothing can replace a directory with a file

    assert ledger.save_quietly({"gpt": Usage(2, 2, 2)}) is False
    assert ledger.save_quietly({"gpt": Usage(2, 2, 2)}) is False  # and again, logged once
    assert (tmp_path / "usage.json").is_dir()


def test_the_compaction_marker_reports_a_full_disk_as_storage_full(tmp_path: Path) -> None:
    import pytest

    from ateam.agent.context import compaction as process
    from ateam.errors import StorageError

    marker = tmp_path / "context" / "compacted_until"
    marker.mkdir(parents=True)  # a directory where the file goes: the write must fail
    with pytest.raises(StorageError) as failed:
        process._write_marker(marker, 12.5)
    assert failed.value.code == "storage.corrupt"  # not a bare OSError escaping the task
