"""What a ``pip install`` gets: the wheel built by the project's own backend (flit_core)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from ateam.config.scaffold import example_files

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_carries_the_commented_template_that_init_example_writes(
    tmp_path: Path,
) -> None:
    from flit_core import buildapi

    here = Path.cwd()
    os.chdir(REPO)  # the backend builds the project in the working directory
    try:
        name = buildapi.build_wheel(str(tmp_path))
    finally:
        os.chdir(here)

    with zipfile.ZipFile(tmp_path / name) as wheel:
        inside = {
            entry.removeprefix("ateam/config/example/"): wheel.read(entry).decode()
            for entry in wheel.namelist()
            if entry.startswith("ateam/config/example/")
        }
    assert inside == example_files()
    assert {"project.yaml", "models.yaml", "tools.yaml", "agents/zeus/agent.yaml"} <= set(inside)


def test_the_wheel_carries_the_shell_completion_scripts(tmp_path: Path) -> None:
    # `ateam completion SHELL` prints a file of the package: a wheel without it prints none.
    from flit_core import buildapi

    from ateam.cli.completion import SHELLS, script_path

    here = Path.cwd()
    os.chdir(REPO)
    try:
        name = buildapi.build_wheel(str(tmp_path))
    finally:
        os.chdir(here)

    with zipfile.ZipFile(tmp_path / name) as wheel:
        for shell in SHELLS:
            inside = wheel.read(f"ateam/cli/completions/ateam.{shell}").decode()
            assert inside == script_path(shell).read_text(encoding="utf-8")
