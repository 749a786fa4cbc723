"""``ateam kb add|search|ls`` against a real agent, and the agent's own ``kb.ingest`` tool
(SPEC §2, §10), with the embedder ``models.yaml`` configures served by a local
OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from tests.servers.openai_wire import OpenAIWireServer

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    history_turns,
    run_ateam,
    subprocess_env,
    write_scripted_project,
)

pytestmark = pytest.mark.integration

DOCS = {
    "docs/redis.md": "# Connecting to Redis\n\nrediss:// URLs use TLS; AUTH sends a password.\n",
    "docs/install.md": "# Installing\n\npip install 'ateam[kb]' adds chromadb.\n",
    "notes/bread.txt": "Sourdough bread: 500 g flour, 350 g water, 100 g starter.\n",
}
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def write_docs(root: Path) -> None:
    for relative, text in DOCS.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)


def marker_vectors(text: str) -> list[float]:
    """Vectors no offline embedder would give: the bread note and "qzxv" point one way."""
    return [1.0, 0.0] if "Sourdough" in text or text == "qzxv" else [0.0, 1.0]


@pytest.fixture
def wire() -> Iterator[OpenAIWireServer]:
    with OpenAIWireServer() as server:
        server.embed = marker_vectors
        yield server


@pytest.fixture
def project(tmp_path: Path, wire: OpenAIWireServer) -> Path:
    """``kbp/zeus`` on echo, its KBs embedded by the local endpoint."""
    root = tmp_path / "kbp"
    (root / ".ateam" / "agents" / "zeus").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: kbp\n")
    (root / ".ateam" / "models.yaml").write_text(
        textwrap.dedent(f"""\
            embeddings:
              provider: openai
              base_url: {wire.base_url}
              model: embed-small
            """)
    )
    (root / ".ateam" / "agents" / "zeus" / "agent.yaml").write_text("model: echo\n")
    write_docs(root)
    return root


def kb(*args: str, redis_url: str, cwd: Path) -> Any:
    return run_ateam("kb", *args, "--redis", redis_url, cwd=cwd, timeout=60)


def test_kb_add_search_ls_through_the_agent_and_its_configured_embedder(
    start_agent: AgentFactory, wire: OpenAIWireServer, project: Path, redis_url: str
) -> None:
    start_agent("kbp/zeus", cwd=project)
    deep = project / "docs"  # a bare name works from anywhere inside the project

    added = kb("add", "zeus", "docs", str(project / "notes"), redis_url=redis_url, cwd=project)

    assert added.returncode == 0, added.stderr
    lines = added.stdout.splitlines()
    # Not a terminal: plain counts, one line per file, the last one complete.
    counts = [line for line in lines if line.startswith("kb agent: ")]
    assert [c.split()[2] for c in counts] == ["1/3", "2/3", "3/3"], added.stdout
    assert "kb agent of kbp/zeus: 3 document(s) ingested, 3 chunk(s), 0 skipped" in lines
    assert "\x1b" not in added.stdout
    # The agent embedded with the endpoint models.yaml names, not offline.
    sent = [text for r in wire.embedding_requests for text in r.body["input"]]
    assert any(text.startswith("Sourdough bread") for text in sent)

    found = kb("search", "zeus", "qzxv", "--json", redis_url=redis_url, cwd=deep)

    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert [(Path(h["path"]).name, h["score"]) for h in hits] == [("bread.txt", 1.0)]
    assert wire.embedding_requests[-1].body["input"] == ["qzxv"]
    table = kb("search", "zeus", "qzxv", redis_url=redis_url, cwd=deep)
    assert table.returncode == 0, table.stderr
    assert table.stdout.split()[:3] == ["SCORE", "DOC", "PATH"] and "bread.txt" in table.stdout

    listed = kb("ls", "kbp/zeus", "--json", redis_url=redis_url, cwd=project.parent)

    assert listed.returncode == 0, listed.stderr
    docs = json.loads(listed.stdout)
    assert sorted(Path(d["path"]).name for d in docs) == ["bread.txt", "install.md", "redis.md"]
    assert {d["source_agent"] for d in docs} == {"kbp/zeus"}
    empty = kb("ls", "zeus", "--scope", "project", "--json", redis_url=redis_url, cwd=deep)
    assert (empty.returncode, json.loads(empty.stdout)) == (0, [])

    again = kb("add", "zeus", "docs", redis_url=redis_url, cwd=project)
    assert again.returncode == 0, again.stderr
    assert "0 document(s) ingested" in again.stdout and "duplicate" in again.stdout


def test_kb_add_refuses_paths_outside_the_sandbox(
    start_agent: AgentFactory, project: Path, redis_url: str, tmp_path: Path
) -> None:
    start_agent("kbp/zeus", cwd=project)
    outside = tmp_path / "outside.md"
    outside.write_text("# Private\n\nnot the agent's\n")

    refused = kb("add", "zeus", "docs", str(outside), redis_url=redis_url, cwd=project)

    assert refused.returncode != 0
    assert "error [kb.ingest.denied]" in refused.stderr
    listed = kb("ls", "zeus", "--json", redis_url=redis_url, cwd=project)
    assert json.loads(listed.stdout) == []  # nothing of the call was stored


def test_kb_add_draws_a_progress_bar_on_a_terminal(
    start_agent: AgentFactory, project: Path, redis_url: str
) -> None:
    start_agent("kbp/zeus", cwd=project)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "ateam", "kb", "add", "zeus", "docs", "notes", "--redis", redis_url],
        cwd=str(project),
        env=subprocess_env(TERM="xterm-256color"),
        dimensions=(24, 100),
        encoding="utf-8",
        timeout=60,
    )
    child.expect(pexpect.EOF)
    child.close()
    screen = _ESCAPES.sub("", child.before or "")

    assert child.exitstatus == 0, screen
    assert "━" in screen and "3/3" in screen, screen
    assert "kb agent: " not in screen  # the plain lines are for pipes and files
    assert "3 document(s) ingested" in screen


def test_the_agent_ingests_with_its_kb_ingest_tool(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = tmp_path / "t"
    root.mkdir()
    write_docs(root)
    ingest = {"name": "kb.ingest", "args": {"paths": ["docs"]}}
    escape = {"name": "kb.ingest", "args": {"paths": ["/etc/passwd"]}}
    search = {"name": "kb.search", "args": {"query": "rediss TLS password"}}
    write_scripted_project(
        root,
        "t",
        [
            {"text": "Reading the docs in.", "tool_calls": [ingest, escape]},
            {"text": "Looking it up.", "tool_calls": [search]},
            {"text": "kb done"},
        ],
        allow=("kb.*",),
    )
    start_agent("t/zeus", cwd=root)
    console = start_console()

    attach_and_send(console, "t/zeus", "learn the docs")

    console.wait_line("[A:t/zeus] kb done", timeout=30)
    ends = [body for _, body in bus.events("t/zeus") if body.get("type") == "tool.end"]
    assert [(e["ok"], e.get("code")) for e in ends] == [
        (True, None),
        (False, "kb.ingest.denied"),
        (True, None),
    ]
    results = [t["content"] for t in history_turns(root) if t["role"] == "tool"]
    assert "redis.md" in results[0] and "install.md" in results[0]
    assert "root:" not in "".join(results)
    assert "Connecting to Redis" in results[2]
    listed = run_ateam("kb", "ls", "t/zeus", "--json", "--redis", console_url(console))
    assert sorted(Path(d["path"]).name for d in json.loads(listed.stdout)) == [
        "install.md",
        "redis.md",
    ]


def console_url(console: Any) -> str:
    """The ``--redis`` URL the console was started with."""
    args: list[str] = list(console.proc.args)
    return args[args.index("--redis") + 1]
