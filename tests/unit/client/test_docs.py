"""The example of docs/python-api.md, run as written against a real agent."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from ateam.agent.runtime.process import Agent
from ateam.client import resolve_target
from ateam.config import standalone_agent
from ateam.providers import EchoProvider

DOC = Path(__file__).resolve().parents[3] / "docs" / "python-api.md"


def example() -> str:
    """The first Python block under the ``## Example`` heading."""
    section = DOC.read_text(encoding="utf-8").split("\n## Example\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "docs/python-api.md lost its example"
    return found.group(1)


async def test_the_example_runs(tmp_path: Path) -> None:
    # The embedded server of this test's own ATEAM_HOME, as the example finds it.
    target = resolve_target(None, None)
    agent = Agent(standalone_agent("hello", "zeus", tmp_path), target, EchoProvider())
    await agent.start()
    try:
        script = tmp_path / "example.py"
        script.write_text(example())
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
    finally:
        await agent.stop()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0] == "hello/zeus idle echo"
    assert re.fullmatch(r"queued q-\S+", lines[1])
    assert lines[2] == "echo: hello"
    assert re.fullmatch(r"task q-\S+ ended: ok=True", lines[3])
