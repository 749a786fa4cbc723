"""Ranking short texts by meaning with the knowledge base's embedder (SPEC §9, §10).

Team context items are few and short-lived, so they get no vector store: a search
embeds the query and the candidate items on the spot and compares them by cosine, the
same measure and the same offline embedder the knowledge base uses, so "find what the
team said about the staging database" behaves like ``kb.search``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ateam.kb.embed import Embedder, HashingEmbedder
from ateam.kb.store import DEFAULT_MIN_SCORE

__all__ = ["meaning_ranker", "rank_texts"]

_DEFAULT = HashingEmbedder()


def rank_texts(
    query: str,
    texts: Sequence[str],
    *,
    limit: int,
    embedder: Embedder | None = None,
    min_score: float = DEFAULT_MIN_SCORE,
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


def meaning_ranker(
    embedder: Embedder | None = None,
) -> Callable[[str, Sequence[str], int], list[tuple[int, float]]]:
    """A ranker for :class:`~ateam.bus.context_items.ContextStore` (``(query, texts, limit)``)."""

    def rank(query: str, texts: Sequence[str], limit: int) -> list[tuple[int, float]]:
        return rank_texts(query, texts, limit=limit, embedder=embedder)

    return rank
