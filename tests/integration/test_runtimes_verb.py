"""``ateam runtimes`` and ``ateam init --runtime`` (issue 24 §1), through the real command.

Run with a bare environment, as a user's fresh shell or a script would: ``HOME`` and
``PATH`` only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ACP_AGENT, ateam_cmd, write_acp_project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def bare_env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": os.environ["PATH"]}


def run(args: list[str], cwd: Path, home: Path) -> tuple[int, str, str]:
    import subprocess

    done = subprocess.run(
        ateam_cmd(*args), cwd=cwd, env=bare_env(home), capture_output=True, text=True, timeout=45
    )
    return done.returncode, done.stdout, done.stderr


def test_runtimes_reports_each_runtime_found_or_missing_with_its_version_and_logins(
    tmp_path: Path,
) -> None:
    script = {
        "agent": {"name": "test-acp", "version": "7.8.9"},
        "auth_methods": [{"id": "login", "name": "Log in", "description": "test-acp login"}],
    }
    project = write_acp_project(
        tmp_path / "r",
        "r",
        script,
        extra_models=[
            {"id": "gone", "provider": "acp", "command": ["no-such-coder-acp"],
             "install": "pip install no-such-coder"},
        ],
    )  # fmt: skip
    code, out, err = run(["runtimes", "--json"], project.root, tmp_path / "home")
    assert code == 0, err
    rows = {row["id"]: row for row in json.loads(out)}
    coder = rows["coder"]
    assert coder["found"] is True and coder["path"] == sys.executable
    assert (coder["name"], coder["version"], coder["protocol_version"]) == ("test-acp", "7.8.9", 1)
    assert [m["id"] for m in coder["auth_methods"]] == ["login"]
    assert coder["configured"] is True and coder["error"] is None
    gone = rows["gone"]
    assert gone["found"] is False and gone["install"] == "pip install no-such-coder"
    assert gone["error"].startswith("runtime.missing")
    # The known runtimes the project does not use are listed with their install line.
    claude = rows["claude-code"]
    assert claude["configured"] is False
    assert "@zed-industries/claude-code-acp" in claude["install"]
    # The plain table says the same in a line each.
    code, out, _ = run(["runtimes"], project.root, tmp_path / "home")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["ID", "FOUND", "VERSION", "AUTH"]
    (coder_line,) = [line for line in lines if line.startswith("coder ")]
    assert "7.8.9" in coder_line and "login" in coder_line
    (gone_line,) = [line for line in lines if line.startswith("gone ")]
    assert "install: pip install no-such-coder" in gone_line
    # The probe left nothing running.
    assert not [line for line in project.sent() if line.get("method") == "session/new"], (
        "a probe opens no session"
    )
    assert str(ACP_AGENT) in " ".join(coder["command"])


def test_init_runtime_writes_a_project_whose_agent_runs_that_runtime(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    code, out, err = run(["init", "proj", "--runtime", "claude-code"], tmp_path, home)
    assert code == 0, err
    assert "ateam runtimes" in out
    models = yaml.safe_load((tmp_path / "proj" / ".ateam" / "models.yaml").read_text())
    assert models["default"] == "claude-code"
    (entry,) = [m for m in models["models"] if m["id"] == "claude-code"]
    assert entry == {
        "id": "claude-code",
        "provider": "acp",
        "command": ["claude-code-acp"],
        "context_window": 200000,
    }
    # Not installed here: `ateam runtimes` says so and how to install it.
    code, out, _ = run(["runtimes", "--json"], tmp_path / "proj", home)
    rows = {row["id"]: row for row in json.loads(out)}
    assert rows["claude-code"]["configured"] is True
    assert rows["claude-code"]["found"] is False
    # An unknown runtime is refused by the parser with the known ones listed.
    code, _, err = run(["init", "other", "--runtime", "copilot"], tmp_path, home)
    assert code != 0 and "claude-code" in err and "codex" in err
    assert not (tmp_path / "other").exists()
