"""Ranking short texts by meaning with the knowledge base's embedder (SPEC §9, §10).

Team context items are few and short-lived, so they get no vector store: a search
embeds the query and the candidate items on the spot and compares them by cosine, the
same measure and the same embedder the knowledge base uses, so "find what the team said
about the staging database" behaves like ``kb.search``.

Which embedder: the one ``models.yaml`` ``embeddings:`` configures
(:func:`configured_ranker`, what agents, verbs, consoles and ``ateam mcp`` all rank
with), else the offline hashing one, which matches words, not meaning: "sign-in
control" finds "the login button" only with a real embeddings model configured.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from ateam.config.discovery import remembered_root
from ateam.config.loader import project_here
from ateam.constants import KB_MIN_SCORE
from ateam.kb.embed import Embedder, HashingEmbedder, configured_embedder

__all__ = ["Ranker", "configured_ranker", "meaning_ranker", "project_rankers", "rank_texts"]

Ranker = Callable[[str, Sequence[str], int], list[tuple[int, float]]]
"""``(query, texts, limit)`` → ``(index, score)`` best first, as the context store ranks."""

_DEFAULT = HashingEmbedder()


def rank_texts(
    query: str,
    texts: Sequence[str],
    *,
    limit: int,
    embedder: Embedder | None = None,
    min_score: float = KB_MIN_SCORE,
) -> list[tuple[int, float]]:
    """``(index, score)`` of the ``texts`` closest to ``query``, best first.

    Only texts scoring at least ``min_score`` (cosine similarity) are returned, at most
    ``limit``; ties keep the order of ``texts`` (callers pass newest first).
    """
    if not texts or limit <= 0:
        return []
    model = embedder or _DEFAULT
    query_vec, *vectors = model.embed([query, *texts])
    query_norm = math.sqrt(sum(v * v for v in query_vec)) or 1.0
    scored = []
    for index, vec in enumerate(vectors):
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        score = sum(a * b for a, b in zip(query_vec, vec, strict=True)) / (query_norm * norm)
        if score >= min_score:
            scored.append((index, score))
    scored.sort(key=lambda pair: -pair[1])  # stable: equal scores stay newest first
    return scored[:limit]


def meaning_ranker(embedder: Embedder | None = None) -> Ranker:
    """A ranker for :class:`~ateam.bus.context_items.ContextStore` (``(query, texts, limit)``)."""

    def rank(query: str, texts: Sequence[str], limit: int) -> list[tuple[int, float]]:
        return rank_texts(query, texts, limit=limit, embedder=embedder)

    return rank


def configured_ranker(start: Path | None = None) -> Ranker:
    """A ranker with the embedder configured for ``start``'s project (``models.yaml``
    ``embeddings:``, the project's over ``~/.ateam``'s), the offline default without one.

    The one place every context search gets its embedder. The configuration is read at
    the first search (in the search's worker thread, as the store calls rankers), not
    here, so a session that never searches reads nothing; ``start`` defaults to the
    working directory then, the project every verb works in.

    Raises (at the first search):
        ConfigError: the configuration does not load.
    """
    chosen: list[Embedder] = []
    lock = threading.Lock()

    def rank(query: str, texts: Sequence[str], limit: int) -> list[tuple[int, float]]:
        with lock:  # two first searches at once load it once
            if not chosen:
                chosen.append(configured_embedder(_nearest_existing(start or Path.cwd())))
        return rank_texts(query, texts, limit=limit, embedder=chosen[0])

    return rank


def project_rankers(start: Path | None = None) -> Callable[[str], Ranker]:
    """The ranker of each project a front end searches, as that project configures it.

    A verb run with ``--project OTHER``, or an ``ateam mcp`` started outside the project,
    has another project (or none) around its working directory: OTHER's configuration is
    the one at the root ``ateam up`` or a started agent noted for it, else the cwd's.
    """
    rankers: dict[str, Ranker] = {}

    def ranker_for(project: str) -> Ranker:
        if project not in rankers:
            here = start or Path.cwd()
            remembered = remembered_root(project)
            at_home = remembered is None or project_here(here) == project
            rankers[project] = configured_ranker(here if at_home else remembered)
        return rankers[project]

    return ranker_for


def _nearest_existing(path: Path) -> Path:
    """``path``, or its nearest parent that exists: an agent's working directory may not
    exist yet (made at its first write), and discovery from its parent finds the same
    ``.ateam/`` directories above it."""
    return next((p for p in (path, *path.parents) if p.is_dir()), path)
