"""Entry points remembered between processes (ateam/_entry_points.py).

The scan of every distribution's metadata is what is saved; what must never happen is a
plugin installed, upgraded or removed and not seen at the next start. Distributions are
made here as pip lays them out: a ``*.dist-info`` directory on ``sys.path``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from ateam import _entry_points
from ateam._entry_points import cache_file, entry_points

GROUP = "ateam.tools"


def install(site: Path, name: str, version: str, entries: dict[str, str]) -> Path:
    dist = site / f"{name}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entries.items())
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\n{lines}")
    return dist


def found() -> list[tuple[str, str, str]]:
    return [(p.entry.name, p.entry.value, p.dist) for p in entry_points(GROUP)]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    return site


@pytest.fixture
def no_scan(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the scans of every distribution's metadata that are still made."""
    scans: list[str] = []
    real = _entry_points.scan_entry_points

    def counted(*, group: str) -> object:
        scans.append(group)
        return real(group=group)

    monkeypatch.setattr(_entry_points, "scan_entry_points", counted)
    return scans


def test_a_later_process_finds_the_plugins_without_reading_any_metadata(
    site: Path, no_scan: list[str]
) -> None:
    install(site, "spy_tools", "1.0", {"spy": "spy_tools:TOOLS"})
    first = found()
    assert ("spy", "spy_tools:TOOLS", "spy_tools") in first
    assert no_scan == [GROUP] and cache_file().exists()
    assert found() == first  # as a later process reads it: from the file
    assert no_scan == [GROUP]
    assert entry_points("ateam.other") == [] and no_scan == [GROUP, "ateam.other"]


def test_an_install_an_upgrade_and_a_removal_are_seen_at_the_next_call(
    site: Path, no_scan: list[str]
) -> None:
    old = install(site, "spy_tools", "1.0", {"spy": "spy_tools:TOOLS"})
    assert ("spy", "spy_tools:TOOLS", "spy_tools") in found()
    extra = install(site, "more_tools", "2.0", {"more": "more_tools:ALL"})
    assert ("more", "more_tools:ALL", "more_tools") in found()
    shutil.rmtree(old)  # an upgrade, as pip makes it: the old metadata out, the new in
    install(site, "spy_tools", "1.1", {"spy2": "spy_tools:NEW"})
    names = {name for name, _, _ in found()}
    assert "spy2" in names and "spy" not in names
    shutil.rmtree(extra)
    assert "more" not in {name for name, _, _ in found()}
    assert len(no_scan) == 4  # each change scanned again (the cache must hide none)


def test_metadata_written_inside_a_distribution_is_seen_at_the_next_call(
    site: Path, no_scan: list[str]
) -> None:
    # pip writes entry_points.txt after the directory that holds it: a scan in between
    # must not hide the entry points for good. An in-place egg_info rewrites the file.
    info = site / "late_tools-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: late_tools\nVersion: 1.0\n")
    assert found() == []
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nlate = late_tools:TOOLS\n")
    assert found() == [("late", "late_tools:TOOLS", "late_tools")]
    egg = site / "egg_tools.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: egg_tools\nVersion: 0.1\n")
    (egg / "entry_points.txt").write_text(f"[{GROUP}]\na = egg_tools:A\n")
    assert ("a", "egg_tools:A", "egg_tools") in found()
    with (egg / "entry_points.txt").open("a") as more:  # in place: the same file, longer
        more.write("b = egg_tools:B\n")
    assert {("a", "egg_tools:A", "egg_tools"), ("b", "egg_tools:B", "egg_tools")} <= set(found())
    assert len(no_scan) == 4


def test_a_finder_the_key_cannot_see_makes_every_call_scan(
    site: Path, no_scan: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Offering:  # a meta path finder that offers distributions of its own
        @staticmethod
        def find_spec(*_args: object) -> None:
            return None

        @staticmethod
        def find_distributions(*_args: object) -> list[object]:
            return []

    install(site, "spy_tools", "1.0", {"spy": "spy_tools:TOOLS"})
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Offering()])
    assert found() == found() and len(no_scan) == 2
    assert not cache_file().exists()


def test_a_damaged_cache_is_scanned_past_and_rewritten(site: Path, no_scan: list[str]) -> None:
    install(site, "spy_tools", "1.0", {"spy": "spy_tools:TOOLS"})
    expected = found()
    path = cache_file()
    key = next(iter(json.loads(path.read_text())))
    for damage in (b"{not json", b"[]", json.dumps({key: [1]}).encode(),
                   json.dumps({key: {GROUP: [["spy", "evil:X"]]}}).encode()):  # fmt: skip
        path.write_bytes(damage)
        assert found() == expected
        assert json.loads(path.read_text())[key][GROUP] == [list(row) for row in expected]
    assert len(no_scan) == 5


def test_a_cache_that_cannot_be_written_costs_a_scan_and_nothing_else(
    site: Path, no_scan: list[str]
) -> None:
    install(site, "spy_tools", "1.0", {"spy": "spy_tools:TOOLS"})
    cache_file().parent.parent.mkdir(parents=True, exist_ok=True)
    cache_file().parent.write_text("a file where the cache directory goes")
    assert ("spy", "spy_tools:TOOLS", "spy_tools") in found()
    assert found() and len(no_scan) == 2
    assert sorted(p.name for p in cache_file().parent.parent.iterdir()) == ["cache"]
