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
