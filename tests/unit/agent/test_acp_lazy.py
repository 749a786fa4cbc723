"""The ACP SDK is imported only by an agent that runs a coding agent.

Importing ``acp`` takes about a second here (its pydantic schema reads every class's
source for docstrings); an echo or API-model agent, and every verb, must not pay it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


def _run(code: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=50,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_agent_without_a_runtime_never_imports_the_acp_sdk(tmp_path: Path) -> None:
    code = """
        import sys
        from pathlib import Path
        import ateam.cli
        from ateam.agent.runtime.build import build_parts, model_factory
        from ateam.agent.runtime.process import Agent
        from ateam.bus.connection import RedisTarget
        from ateam.agent.runtime.main import agent_config_for
        from ateam.config import load_project

        config = agent_config_for(
            load_project(Path.cwd()), "p", "zeus", Path.cwd(), explicit_cwd=False
        )
        provider = model_factory(config)(config.model_entry())
        parts = build_parts(config, RedisTarget("redis://127.0.0.1:1/0", "test"), provider)
        parts.tasks.check_at_start()
        print("acp" in sys.modules)
    """
    assert _run(code, tmp_path) == "False"


def test_an_agent_whose_model_is_a_runtime_imports_it_when_it_needs_it(tmp_path: Path) -> None:
    ateam_dir = tmp_path / ".ateam"
    ateam_dir.mkdir()
    (ateam_dir / "project.yaml").write_text("name: p\n")
    (ateam_dir / "models.yaml").write_text(
        "models:\n  - {id: coder, provider: acp, command: [no-such-coder]}\ndefault: coder\n"
    )
    code = """
        import sys
        from pathlib import Path
        from ateam.agent.runtime.build import build_parts, model_factory
        from ateam.bus.connection import RedisTarget
        from ateam.agent.runtime.main import agent_config_for
        from ateam.config import load_project

        config = agent_config_for(
            load_project(Path.cwd()), "p", "zeus", Path.cwd(), explicit_cwd=False
        )
        provider = model_factory(config)(config.model_entry())
        parts = build_parts(config, RedisTarget("redis://127.0.0.1:1/0", "test"), provider)
        before = "acp" in sys.modules
        parts.tasks.check_at_start()
        print(before, "acp" in sys.modules, parts.status.entry.alert)
    """
    out = _run(code, tmp_path)
    assert out.startswith("True True runtime.missing: no-such-coder not found")
