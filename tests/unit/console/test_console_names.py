"""``/attach ze``: a console line names an agent the way the verbs do."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateam.console.names import agent_named
from ateam.errors import AmbiguousName

BUS = ["hello/ares", "hello/hera", "hello/zeus", "shop/zeta", "shop/zeus"]


def in_project(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / name
    (root / ".ateam").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text(f"name: {name}\n")
    monkeypatch.chdir(root)


def test_a_prefix_names_the_agent_of_the_project_here_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_project(tmp_path, "hello", monkeypatch)

    assert agent_named("ze", BUS) == "hello/zeus"  # shop/zeta and shop/zeus are elsewhere
    assert agent_named("a", BUS) == "hello/ares"
    assert agent_named("shop/zet", BUS) == "shop/zeta"
    with pytest.raises(AmbiguousName, match="hello/hera") as many:
        agent_named("he", [*BUS, "hello/hermes"])
    assert "hello/hermes" in str(many.value)
    assert agent_named("nobody", BUS) is None


def test_outside_a_project_a_prefix_must_be_unique_on_the_whole_bus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    assert agent_named("zeta", BUS) == "shop/zeta"
    assert agent_named("ar", BUS) == "hello/ares"
    with pytest.raises(AmbiguousName, match="shop/zeus"):
        agent_named("ze", BUS)
    assert agent_named("nobody", BUS) is None
