"""MCP ``context_search`` ranks with the embedder ``models.yaml`` configures (issue 26 §5):
the server's project configures a real OpenAI-compatible endpoint (the wire server, whose
vectors put paraphrases together), and a paraphrase is found through the SDK's client.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ateam.mcp import AteamServer
from tests.servers.openai_wire import OpenAIWireServer, by_concept
from tests.unit.mcp._client import call, connect


@pytest.fixture
def wire() -> Iterator[OpenAIWireServer]:
    with OpenAIWireServer() as server:
        server.embed = by_concept
        yield server


async def test_context_search_finds_a_paraphrase_with_the_configured_embedder(
    server: AteamServer, wire: OpenAIWireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proj"
    (root / ".ateam").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: proj\n")
    (root / ".ateam" / "models.yaml").write_text(
        f"embeddings: {{provider: openai, base_url: '{wire.base_url}', model: concept-embed}}\n"
    )
    monkeypatch.chdir(root)  # where `ateam mcp` runs: its project's configuration applies
    async with connect(server) as client:
        login = await call(
            client, "context_post", type="status", title="the login button is now blue"
        )
        await call(client, "context_post", type="status", title="deploy the migration on friday")
        found = await call(client, "context_search", query="sign-in control")
    assert [item["id"] for item in found["items"]] == [login["id"]]
    assert wire.embedding_requests
