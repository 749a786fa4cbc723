"""Which project a command is in: the nearest ``.ateam/project.yaml`` (issue 10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateam.config.discovery import find_project_root, remember_root, remembered_root


def test_the_nearest_project_yaml_wins_and_the_user_home_never_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home" / ".ateam"
    home.mkdir(parents=True)
    (home / "project.yaml").write_text("namespace: mine\n")  # user-wide defaults only
    monkeypatch.setenv("ATEAM_HOME", str(home))
    work = tmp_path / "home" / "work"
    sub = work / "sub" / "deeper"
    sub.mkdir(parents=True)

    assert find_project_root(sub) is None

    (work / ".ateam").mkdir()
    (work / ".ateam" / "project.yaml").write_text("name: work\n")
    # A nearer .ateam/ without project.yaml (agents, models) does not start a project.
    (work / "sub" / ".ateam" / "agents").mkdir(parents=True)

    assert find_project_root(sub) == work
    assert find_project_root(sub / "missing.txt") == work  # a file: its directory
    monkeypatch.chdir(sub)
    assert find_project_root() == work

    (work / "sub" / ".ateam" / "project.yaml").write_text("name: sub\n")
    assert find_project_root(sub) == work / "sub"


def test_a_project_up_started_is_found_again_by_its_name_until_it_moves(tmp_path: Path) -> None:
    # ATEAM_HOME is the test's own (tests/conftest.py).
    root = tmp_path / "checkout" / "examples" / "hello"
    (root / ".ateam").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: hello\n")
    assert remembered_root("hello") is None

    remember_root("hello", root)

    assert remembered_root("hello") == root
    assert remembered_root("other") is None
    remember_root("../escape", root)  # not a project name: nothing written
    assert remembered_root("../escape") is None
    (root / ".ateam" / "project.yaml").unlink()  # the project is gone from there
    assert remembered_root("hello") is None
