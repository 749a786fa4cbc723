"""The knowledge base (SPEC §10): per-scope Chroma stores of chunked, embedded files.

* :mod:`~ateam.kb.scopes` — where the ``agent``, ``project`` and ``user`` stores live;
* :mod:`~ateam.kb.chunking` — normalising and hashing, splitting by heading or
  definition, chunking with overlap;
* :mod:`~ateam.kb.embed` — the offline hashing embedder and OpenAI-compatible endpoints;
* :mod:`~ateam.kb.store` — :class:`KnowledgeBase`: ingest, search, listing, and copying
  chosen documents between stores.

Importing this package does not import chromadb; opening a :class:`KnowledgeBase` does,
and raises :class:`~ateam.errors.KbUnavailable` if the ``kb`` extra is not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ateam._lazy import exports

if TYPE_CHECKING:
    from ateam.kb._paths import MAX_FILE_BYTES, MAX_PATHS
    from ateam.kb.chunking import Chunk, Section, chunk, content_hash, normalise, split_document
    from ateam.kb.embed import (
        Embedder,
        HashingEmbedder,
        OpenAIEmbedder,
        configured_embedder,
        embedder_from_config,
    )
    from ateam.kb.scopes import DEFAULT_SCOPE, SCOPES, scope_dir
    from ateam.kb.store import DEFAULT_K, DEFAULT_MIN_SCORE, Hit, IngestReport, KnowledgeBase

__all__ = [
    "DEFAULT_K",
    "DEFAULT_MIN_SCORE",
    "DEFAULT_SCOPE",
    "MAX_FILE_BYTES",
    "MAX_PATHS",
    "SCOPES",
    "Chunk",
    "Embedder",
    "HashingEmbedder",
    "Hit",
    "IngestReport",
    "KnowledgeBase",
    "OpenAIEmbedder",
    "Section",
    "chunk",
    "configured_embedder",
    "content_hash",
    "embedder_from_config",
    "normalise",
    "scope_dir",
    "split_document",
]

# Loaded at first use (ateam._lazy): an agent that never calls a kb method pays for none
# of the store's modules (issue 28 §2).
_LAZY = {
    "ateam.kb._paths": ("MAX_FILE_BYTES", "MAX_PATHS"),
    "ateam.kb.chunking": (
        "Chunk",
        "Section",
        "chunk",
        "content_hash",
        "normalise",
        "split_document",
    ),
    "ateam.kb.embed": (
        "Embedder",
        "HashingEmbedder",
        "OpenAIEmbedder",
        "configured_embedder",
        "embedder_from_config",
    ),
    "ateam.kb.scopes": ("DEFAULT_SCOPE", "SCOPES", "scope_dir"),
    "ateam.kb.store": ("DEFAULT_K", "DEFAULT_MIN_SCORE", "Hit", "IngestReport", "KnowledgeBase"),
}

__getattr__, __dir__ = exports(__name__, _LAZY)
