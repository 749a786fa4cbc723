"""Search that understands (issue 26 §5): ``ateam context search`` ranks with the embedder
``models.yaml`` configures.

A real ``ateam`` process against a real Redis and a real OpenAI-compatible embeddings
endpoint (the wire server, serving vectors that put a few paraphrases together as a
real model does): "sign-in control" finds "the login button is now blue". The same
items searched from a checkout of the same project without ``embeddings:`` (the offline
hashing default, which matches words) do not, so the finding is the configured embedder's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers.openai_wire import OpenAIWireServer, by_concept

from .conftest import AgentFactory, run_ateam

pytestmark = pytest.mark.integration

LOGIN = "the login button is now blue"
OTHER = "deploy the migration on friday"


@pytest.fixture
def wire() -> Iterator[OpenAIWireServer]:
    with OpenAIWireServer() as server:
        server.embed = by_concept
        yield server


def project(root: Path, embeddings: str = "") -> Path:
    (root / ".ateam").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: proj\n")
    (root / ".ateam" / "models.yaml").write_text(f"models: []\n{embeddings}")
    return root


def search(query: str, *, cwd: Path, redis_url: str) -> list[dict[str, Any]]:
    done = run_ateam("context", "search", *query.split(), "--json", "--redis", redis_url, cwd=cwd)
    assert done.returncode == 0, done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


def test_context_search_finds_a_paraphrase_with_the_configured_embedder(
    wire: OpenAIWireServer, redis_url: str, tmp_path: Path
) -> None:
    embeddings = (
        f"embeddings:\n  {{provider: openai, base_url: '{wire.base_url}', model: concept-embed}}\n"
    )
    meaning = project(tmp_path / "meaning", embeddings)
    words = project(tmp_path / "words")  # the same project, the offline default
    for title in (OTHER, LOGIN):
        posted = run_ateam("context", "post", *title.split(), "--redis", redis_url, cwd=words)
        assert posted.returncode == 0, posted.stderr

    found = search("sign-in control", cwd=meaning, redis_url=redis_url)
    assert [item["title"] for item in found] == [LOGIN]
    asked = [request.body for request in wire.embedding_requests]
    assert asked and all(body["model"] == "concept-embed" for body in asked)
    assert "sign-in control" in asked[-1]["input"]

    # Offline, only shared words count: the paraphrase is not found, a shared word is.
    assert search("sign-in control", cwd=words, redis_url=redis_url) == []
    assert [i["title"] for i in search("login", cwd=words, redis_url=redis_url)] == [LOGIN]
    before = len(wire.embedding_requests)
    search("button", cwd=words, redis_url=redis_url)
    assert len(wire.embedding_requests) == before  # the offline search asks no endpoint

    broken = project(tmp_path / "broken", "embeddings: {provider: openai}\n")  # no model
    done = run_ateam("context", "search", "x", "--redis", redis_url, cwd=broken)
    assert done.returncode != 0 and done.stderr.startswith("error [config.")
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_search_from_outside_the_project_ranks_as_the_project_configures(
    wire: OpenAIWireServer, start_agent: AgentFactory, redis_url: str, tmp_path: Path
) -> None:
    # `ateam context search --project proj` from elsewhere, as an MCP client's `ateam mcp`
    # started outside the project: the agent's start noted where proj lives.
    embeddings = (
        f"embeddings:\n  {{provider: openai, base_url: '{wire.base_url}', model: concept-embed}}\n"
    )
    meaning = project(tmp_path / "meaning", embeddings)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    posted = run_ateam("context", "post", *LOGIN.split(), "--redis", redis_url, cwd=meaning)
    assert posted.returncode == 0, posted.stderr
    start_agent("proj/zeus", cwd=meaning)

    done = run_ateam(
        "context", "search", "sign-in", "control", "--project", "proj", "--json",
        "--redis", redis_url, cwd=elsewhere,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [item["title"] for item in json.loads(done.stdout)] == [LOGIN]
