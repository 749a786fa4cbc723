"""``configured_ranker``: the one place context searches get their embedder (issue 26 §5).

An agent's ``context.search`` ranks with it from its project root, the verbs, consoles and
``ateam mcp`` from their working directory; each reads ``models.yaml`` ``embeddings:``
at its first search, and the offline default is used without one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ateam.errors import ConfigError
from ateam.kb.similar import configured_ranker
from tests.servers.openai_wire import OpenAIWireServer, by_concept

TEXTS = ["deploy the migration on friday", "the login button is now blue"]


@pytest.fixture
def wire() -> Iterator[OpenAIWireServer]:
    with OpenAIWireServer() as server:
        server.embed = by_concept
        yield server


def project(root: Path, models: str) -> Path:
    (root / ".ateam").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: proj\n")
    (root / ".ateam" / "models.yaml").write_text(models)
    return root


def test_the_configured_endpoint_ranks_and_the_default_matches_words(
    wire: OpenAIWireServer, tmp_path: Path
) -> None:
    models = f"embeddings: {{provider: openai, base_url: '{wire.base_url}', model: m}}\n"
    meaning = configured_ranker(project(tmp_path / "a", models))
    words = configured_ranker(project(tmp_path / "b", "models: []\n"))
    assert wire.embedding_requests == []  # nothing read or asked before the first search

    [(index, _score)] = meaning("sign-in control", TEXTS, 5)
    assert index == 1
    assert words("sign-in control", TEXTS, 5) == []
    assert [i for i, _ in words("login", TEXTS, 5)] == [1]
    asked = len(wire.embedding_requests)
    meaning("blue", TEXTS, 5)
    assert len(wire.embedding_requests) == asked + 1  # the embedder is kept, not re-read


def test_a_configuration_that_does_not_load_fails_the_search(tmp_path: Path) -> None:
    rank = configured_ranker(project(tmp_path / "p", "embeddings: {provider: openai}\n"))
    with pytest.raises(ConfigError):
        rank("anything", TEXTS, 5)
