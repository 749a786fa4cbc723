"""An agent process carries no front end (issue 28 §2: an agent weighs little).

``ateam agent`` used to build the whole verb table, which imports every front end's
module — the client library, the console's tables and diffs, rich and pygments — into
a process that runs for hours and uses none of them. The process is started as a
supervisor starts it and watched with ``PYTHONPROFILEIMPORTTIME``, which lists every
module the interpreter imports, at start-up and while it serves.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ateam._entry_points import cache_file

from .conftest import AgentFactory, Bus, subprocess_env

pytestmark = pytest.mark.integration

FRONT_ENDS = ("ateam.cli.parser", "ateam.client", "ateam.console", "rich", "pygments")
"""Packages an echo agent must never import: the CLI's verb table and what it pulls in."""


def is_front_end(module: str) -> bool:
    return any(module == top or module.startswith(top + ".") for top in FRONT_ENDS)


def imported(stderr: str) -> set[str]:
    """Every module named in ``-X importtime`` lines."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_an_echo_agent_process_imports_no_front_end(
    start_agent: AgentFactory, tmp_path: Path
) -> None:
    agent = start_agent("light/zeus", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert agent.terminate() == 0
    modules = imported(agent.stderr())
    assert "ateam.agent.runtime.build" in modules  # the listing is the agent's own
    leaked = sorted(m for m in modules if is_front_end(m))
    assert leaked == []
    # Nor the models of event payloads: an agent writes events and never reads one back.
    assert "ateam.wire.event_types" in modules and "ateam.wire.events" not in modules


PLUGIN = """
import os

class Plugin:
    def new_schema_validator(self, schema, schema_type, *args, **kwargs):
        with open(os.environ["PLUGIN_SAW"], "a") as seen:
            seen.write(f"{schema_type.__module__}.{schema_type.__qualname__}\\n")
        return None, None, None

plugin = Plugin()
"""


def python_path(site: Path) -> str:
    """``site`` ahead of the test's own ``PYTHONPATH`` (no empty part: that is the cwd)."""
    return os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)


def test_an_agent_runs_no_pydantic_plugin_and_looks_none_up(
    start_agent: AgentFactory, tmp_path: Path
) -> None:
    # A real plugin, installed as pip installs one: a distribution whose entry point in
    # the `pydantic` group names it. It notes every validator pydantic builds with it.
    site = tmp_path / "site"
    info = site / "spy_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "spy_plugin.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spy-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nspy = spy_plugin:plugin\n")
    saw = tmp_path / "saw.txt"
    env = {"PYTHONPATH": python_path(site),
           "PLUGIN_SAW": str(saw)}  # fmt: skip

    model = "import pydantic\nclass M(pydantic.BaseModel):\n    x: int = 0\nM(x=1)\n"
    subprocess.run([sys.executable, "-c", model], env=subprocess_env(**env), check=True)
    assert saw.read_text() == "__main__.M\n"  # any other program gets the plugin
    saw.unlink()

    agent = start_agent("light/zeus", env=env)  # validates its configuration on the way
    assert agent.terminate() == 0
    assert not saw.exists()


def test_a_tool_plugin_installed_between_two_starts_is_seen_by_the_second(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path
) -> None:
    # The first start scans every distribution and keeps the answer (ateam/_entry_points.py);
    # the install must not be hidden by it. The plugin's module is missing, so loading it
    # fails, which the agent reports as a warning event at its start.
    site = tmp_path / "site"
    site.mkdir()
    env = {"PYTHONPATH": python_path(site)}
    agent = start_agent("light/zeus", env=env)
    assert agent.terminate() == 0
    assert cache_file().exists()  # what the agent kept

    info = site / "late_tools-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: late-tools\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ateam.tools]\nlate = late_tools_missing:TOOLS\n")
    agent = start_agent("light/zeus", env=env)
    warned = [
        body["msg"]
        for _, body in bus.events("light/zeus")
        if body.get("type") == "warn" and body.get("code") == "tool.plugin"
    ]
    assert len(warned) == 1 and "late_tools_missing" in warned[0]
    assert agent.terminate() == 0
