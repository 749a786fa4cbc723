"""One scope's knowledge base: a Chroma collection on disk (SPEC §10).

A :class:`KnowledgeBase` owns ``<scope dir>/chroma/`` (created ``0700``: the store
holds copies of the user's files), with one collection, ``ateam-kb``, in cosine space.
Every chunk is one record: its text, a vector from the configured
:class:`~ateam.kb.embed.Embedder` (always passed explicitly; Chroma's own embedding
functions would download a model), and the metadata

    doc_id, path, mtime, size, hash, scope, source_agent, project, copied_from,
    title, chunk, chunks, lines

A document's id is ``d-`` and the first 12 hex digits of the SHA-256 of its normalised
content (:func:`~ateam.kb.chunking.content_hash`); its chunks are ``<doc_id>:<n>``.
Chunk 0 stands for the document in listings and duplicate checks, so those need no scan
of every chunk. The id is derived from the content, so the same text has the same id
in every scope and a copy keeps it.

The collection's metadata records the embedder's name and vector length; opening the
store with another embedder raises :class:`~ateam.errors.KbUnavailable` instead of
mixing vectors from two spaces.

Everything here blocks (Chroma and the embedder do I/O): callers run it in a worker
thread, as the ``kb.*`` tools do under their 30 s timeout. One instance may be shared by
threads — writes take a lock, so two ingests of the same file in one process store it
once. Chroma's on-disk store is not built for writers in several processes at once; the
``project`` and ``user`` scopes are shared, so concurrent ingests from separate agents
into them are a known limit.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, cast

from ateam.constants import KB_DEFAULT_K, KB_MIN_SCORE
from ateam.errors import BadRequest, KbUnavailable
from ateam.kb._paths import Document, Skip, expand, read_document, resolve_requested
from ateam.kb.chunking import chunk, content_hash, split_document
from ateam.kb.embed import Embedder, HashingEmbedder

if TYPE_CHECKING:
    from chromadb.api.client import Client
    from chromadb.api.models.Collection import Collection

__all__ = [
    "COLLECTION",
    "DEFAULT_K",
    "DEFAULT_MIN_SCORE",
    "Hit",
    "IngestReport",
    "KnowledgeBase",
    "Progress",
]

COLLECTION = "ateam-kb"
DEFAULT_K = KB_DEFAULT_K
"""SPEC §10: search returns the top 8..."""
DEFAULT_MIN_SCORE = KB_MIN_SCORE
"""...that score at least 0.35 (1 - cosine distance)."""
MAX_K = 100

_ADD_BATCH = 256
"""Chunks embedded and added per round trip: large enough to amortise Chroma's per-call
cost, far below its batch limit (~5 000)."""
_EMBEDDER_KEY = "ateam:embedder"
_DIM_KEY = "ateam:dim"

Progress = Callable[[int, int, str], None]
"""``progress(done, total, path)``, called after each file of an ingest call."""


@dataclass
class IngestReport:
    """What an ingest or import did, document by document."""

    ingested: list[dict[str, Any]] = field(default_factory=list)
    """``{doc_id, path, chunks}`` per document stored; ``replaced`` names the doc id of
    the earlier version of the same file, which the new one replaced."""
    skipped: list[dict[str, Any]] = field(default_factory=list)
    """``{path, reason}`` per file left out; a duplicate adds ``duplicate_of`` (the path
    of the document with the same content)."""
    chunks: int = 0
    """Chunks stored in all."""

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Hit:
    """One search result: a chunk and how well it matched."""

    doc_id: str
    chunk_id: str
    path: str
    title: str
    score: float
    """1 - cosine distance, rounded to 4 places; 1 is identical."""
    text: str
    lines: str
    """The chunk's line range in the file, ``first-last``."""

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)


_REDACTED_METADATA = ("title", "path")
"""Metadata of a chunk that is text from the document, masked like its text."""


@dataclass
class _Pending:
    """Chunks waiting to be embedded and added in one batch."""

    redact: Callable[[str], str] = str
    """Masks secrets in a chunk's text before it is embedded and stored."""
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    metadatas: list[dict[str, str | int | float]] = field(default_factory=list)

    def add(self, chunk_id: str, text: str, metadata: dict[str, str | int | float]) -> None:
        self.ids.append(chunk_id)
        self.texts.append(self.redact(text))
        for key in _REDACTED_METADATA:  # a heading or a file name can hold a key too
            value = metadata.get(key)
            if isinstance(value, str):
                metadata[key] = self.redact(value)
        self.metadatas.append(metadata)


# Provenance an imported chunk keeps, with the type Chroma stores it as and its default.
_PROVENANCE: dict[str, tuple[type, str | int | float]] = {
    "path": (str, ""),
    "mtime": (float, 0.0),
    "size": (int, 0),
    "source_agent": (str, ""),
    "project": (str, ""),
    "title": (str, ""),
    "lines": (str, ""),
}


class KnowledgeBase:
    """The store of one scope; opening it creates it if needed.

    Args:
        directory: The scope's directory (:func:`~ateam.kb.scopes.scope_dir`).
        scope: The scope's name, recorded with every chunk.
        project: The project's name, recorded with every chunk.
        embedder: How texts become vectors; the offline :class:`HashingEmbedder` if
            omitted.
        redact: Masks secrets in every chunk stored (a ``.env`` ingested by mistake keeps
            its names, not its values); the document's hash is of the file as read.

    Raises:
        KbUnavailable: chromadb is not installed, or the store was built by another
            embedder.
    """

    def __init__(
        self,
        directory: Path,
        *,
        scope: str,
        project: str,
        embedder: Embedder | None = None,
        redact: Callable[[str], str] = str,
    ) -> None:
        self.directory = directory
        self.redact = redact
        self.scope = scope
        self.project = project
        self.embedder: Embedder = embedder or HashingEmbedder()
        self._lock = threading.Lock()
        self._client, self._collection = _open(directory / "chroma", self.embedder)
        metadata = self._collection.metadata or {}
        self._dim = int(metadata.get(_DIM_KEY) or 0)

    def close(self) -> None:
        """Release the store's files (SQLite connections, index); idempotent."""
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- writing ------------------------------------------------------------------------

    def ingest(
        self,
        paths: Sequence[Path | str],
        *,
        allowed_roots: Sequence[Path],
        source_agent: str = "",
        progress: Progress | None = None,
    ) -> IngestReport:
        """Read, chunk, embed and store files and directories.

        Args:
            paths: Files and directories; relative ones are taken from
                ``allowed_roots[0]`` (the agent's working directory).
            allowed_roots: The sandbox: the agent's cwd and its whitelist.
            source_agent: The agent ingesting, recorded as provenance.
            progress: Called after each file as ``progress(done, total, path)``.

        Returns:
            Which documents were stored and which files were skipped, and why: a file
            whose normalised content is already stored (or met earlier in this call) is
            skipped as a ``duplicate``, never stored twice. A file ingested before whose
            content has changed replaces its earlier version.

        Raises:
            KbDenied: A path leads outside ``allowed_roots`` or is a special file; nothing
                is stored.
            BadRequest: More than 512 files after expanding directories.
        """
        requested = resolve_requested(paths, allowed_roots)
        files, skips = expand(requested, allowed_roots)
        report = IngestReport(skipped=[{"path": s.path, "reason": s.reason} for s in skips])
        with self._lock:
            known = self._known_hashes()
            versions = self._ingested_paths()
            pending = _Pending(self.redact)
            for done, path in enumerate(files, 1):
                self._ingest_file(path, known, source_agent, report, pending)
                if len(pending.ids) >= _ADD_BATCH:
                    self._flush(pending)
                    pending = _Pending(self.redact)
                if progress is not None:
                    progress(done, len(files), str(path))
            self._flush(pending)
            self._drop_old_versions(report, versions)
        return report

    def _drop_old_versions(self, report: IngestReport, versions: dict[str, str]) -> None:
        """Delete the earlier version of every file ingested again with new content.

        Only once the new versions are stored, so a failed call loses nothing; copies
        from other stores are left alone (their paths are another agent's).
        """
        for entry in report.ingested:
            old = versions.get(entry["path"])
            if old is not None and old != entry["doc_id"]:
                self._collection.delete(where={"doc_id": old})
                entry["replaced"] = old

    def _ingest_file(
        self,
        path: Path,
        known: dict[str, str],
        source_agent: str,
        report: IngestReport,
        pending: _Pending,
    ) -> None:
        try:
            document = read_document(path)
        except OSError as exc:
            document = Skip(str(path), exc.strerror or type(exc).__name__)
        if isinstance(document, Skip):
            report.skipped.append({"path": document.path, "reason": document.reason})
            return
        if not document.text.strip():
            report.skipped.append({"path": str(path), "reason": "empty"})
            return
        digest = content_hash(document.text)
        if digest in known:
            report.skipped.append(_duplicate(str(path), known[digest]))
            return
        known[digest] = str(path)
        self._stage(document, digest, source_agent, report, pending)

    def _stage(
        self,
        document: Document,
        digest: str,
        source_agent: str,
        report: IngestReport,
        pending: _Pending,
    ) -> None:
        doc_id = _doc_id(digest)
        chunks = chunk(split_document(document.path, document.text))
        for index, piece in enumerate(chunks):
            pending.add(
                f"{doc_id}:{index}",
                piece.text,
                {
                    "doc_id": doc_id,
                    "path": str(document.path),
                    "mtime": document.mtime,
                    "size": document.size,
                    "hash": digest,
                    "scope": self.scope,
                    "source_agent": source_agent,
                    "project": self.project,
                    "copied_from": "",
                    "title": piece.title,
                    "chunk": index,
                    "chunks": len(chunks),
                    "lines": piece.lines,
                },
            )
        report.ingested.append(
            {"doc_id": doc_id, "path": str(document.path), "chunks": len(chunks)}
        )
        report.chunks += len(chunks)

    def import_documents(
        self, chunks: Sequence[Mapping[str, Any]], *, copied_from: str
    ) -> IngestReport:
        """Store chunks another store exported, re-embedded here, keeping their provenance.

        Args:
            chunks: From :meth:`export` (``{id, text, metadata}`` each).
            copied_from: Where they come from (the sending agent's id), recorded as
                ``copied_from``; the original ``source_agent``, ``path`` and ``hash`` stay.

        Returns:
            The documents stored; one whose content is already here is ``skipped``.

        Raises:
            BadRequest: A chunk is malformed.
        """
        documents = _group_by_document(chunks)
        report = IngestReport()
        with self._lock:
            known = self._known_hashes()
            pending = _Pending(self.redact)
            for digest, pieces in documents.items():
                path = str(pieces[0][1]["metadata"].get("path", ""))
                if digest in known:
                    report.skipped.append(_duplicate(path, known[digest]))
                    continue
                known[digest] = path
                self._stage_copy(digest, pieces, copied_from, pending)
                report.ingested.append(
                    {"doc_id": _doc_id(digest), "path": path, "chunks": len(pieces)}
                )
                report.chunks += len(pieces)
            self._flush(pending)
        return report

    def _stage_copy(
        self,
        digest: str,
        pieces: list[tuple[int, Mapping[str, Any]]],
        copied_from: str,
        pending: _Pending,
    ) -> None:
        doc_id = _doc_id(digest)
        for index, (_, item) in enumerate(pieces):
            original: Mapping[str, Any] = item["metadata"]
            metadata: dict[str, str | int | float] = {
                key: kind(original[key]) if isinstance(original.get(key), kind) else default
                for key, (kind, default) in _PROVENANCE.items()
            }
            metadata.update(
                doc_id=doc_id,
                hash=digest,
                scope=self.scope,
                copied_from=copied_from,
                chunk=index,
                chunks=len(pieces),
            )
            pending.add(f"{doc_id}:{index}", str(item["text"]), metadata)

    def _flush(self, pending: _Pending) -> None:
        if not pending.ids:
            return
        vectors = self._embed(pending.texts)
        # cast: Chroma types these as invariant lists of unions (or numpy arrays), which
        # no plain list[list[float]] satisfies; the values are what it expects.
        self._collection.add(
            ids=pending.ids,
            embeddings=cast(Any, vectors),
            documents=pending.texts,
            metadatas=cast(Any, pending.metadatas),
        )

    # --- reading ------------------------------------------------------------------------

    def search(
        self, query: str, *, k: int = DEFAULT_K, min_score: float = DEFAULT_MIN_SCORE
    ) -> list[Hit]:
        """The chunks most like ``query``, best first, scoring at least ``min_score``.

        Args:
            query: What to look for.
            k: At most this many hits (1 to 100).
            min_score: Hits scoring lower (1 - cosine distance) are dropped.

        Raises:
            BadRequest: ``k`` out of range.
        """
        if not 1 <= k <= MAX_K:
            raise BadRequest(f"k must be between 1 and {MAX_K}", detail={"k": k})
        count = self._collection.count()
        if not query.strip() or count == 0:
            return []
        vector = self._embed([query])[0]
        if not any(vector):  # nothing in the query the embedder knows: no direction
            return []
        result = self._collection.query(
            query_embeddings=cast(Any, [vector]),
            n_results=min(k, count),
            include=["documents", "metadatas", "distances"],
        )
        ids = result["ids"][0]
        texts = (result["documents"] or [[]])[0]
        metas = (result["metadatas"] or [[]])[0]
        distances = (result["distances"] or [[]])[0]
        hits = [
            Hit(
                doc_id=str(meta["doc_id"]),
                chunk_id=chunk_id,
                path=str(meta["path"]),
                title=str(meta.get("title", "")),
                score=round(1.0 - distance, 4),
                text=text,
                lines=str(meta.get("lines", "")),
            )
            for chunk_id, text, meta, distance in zip(ids, texts, metas, distances, strict=True)
        ]
        return [hit for hit in hits if hit.score >= min_score]

    def documents(self) -> list[dict[str, Any]]:
        """One entry per stored document, by path: ``{doc_id, path, chunks, hash, ...}``."""
        entries = [
            {
                "doc_id": meta["doc_id"],
                "path": meta["path"],
                "chunks": meta["chunks"],
                "hash": meta["hash"],
                "source_agent": meta["source_agent"],
                "scope": meta["scope"],
                "copied_from": meta.get("copied_from", ""),
            }
            for meta in self._first_chunks()
        ]
        return sorted(entries, key=lambda entry: (str(entry["path"]), str(entry["doc_id"])))

    def count(self) -> int:
        """How many chunks are stored."""
        return self._collection.count()

    def export(self, doc_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Every chunk of the chosen documents, with text and metadata, for another store.

        Vectors are left out: the receiver embeds with its own embedder.

        Raises:
            BadRequest: No ids (there is no copy-all), or ids not in this store.
        """
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            raise BadRequest("choose documents: there is no copy-all")
        where: Any = {"doc_id": {"$in": wanted}}
        got = self._collection.get(where=where, include=["documents", "metadatas"])
        metas = got["metadatas"] or []
        found = {str(meta["doc_id"]) for meta in metas}
        unknown = [doc_id for doc_id in wanted if doc_id not in found]
        if unknown:
            raise BadRequest(
                f"no such document in the {self.scope} kb: {', '.join(unknown)}",
                detail={"unknown": unknown},
            )
        order = {doc_id: rank for rank, doc_id in enumerate(wanted)}
        chunks = [
            {"id": chunk_id, "text": text, "metadata": dict(meta)}
            for chunk_id, text, meta in zip(got["ids"], got["documents"] or [], metas, strict=True)
        ]
        return sorted(
            chunks,
            key=lambda c: (order[c["metadata"]["doc_id"]], int(c["metadata"]["chunk"])),
        )

    # --- internals ----------------------------------------------------------------------

    def _known_hashes(self) -> dict[str, str]:
        """Content hash → path of every stored document."""
        return {str(meta["hash"]): str(meta["path"]) for meta in self._first_chunks()}

    def _ingested_paths(self) -> dict[str, str]:
        """Path → doc id of every document ingested here (not copied from elsewhere)."""
        return {
            str(meta["path"]): str(meta["doc_id"])
            for meta in self._first_chunks()
            if not meta.get("copied_from")
        }

    def _first_chunks(self) -> list[Mapping[str, Any]]:
        """The metadata of every document's chunk 0, which stands for the document."""
        got = self._collection.get(where={"chunk": 0}, include=["metadatas"])
        return list(got["metadatas"] or [])

    def _embed(self, texts: list[str]) -> list[list[float]]:
        vectors = self.embedder.embed(texts)
        dims = {len(vector) for vector in vectors}
        if len(dims) > 1 or (self._dim and dims != {self._dim}):
            raise KbUnavailable(
                f"the {self.scope} kb holds vectors of length {self._dim}; the embedder "
                f"{self.embedder.name} returned {sorted(dims)}",
                detail={"expected": self._dim, "received": sorted(dims)},
            )
        if not self._dim and dims:
            # A remote model tells its length only when first called; record it now.
            self._dim = dims.pop()
            metadata = dict(self._collection.metadata or {})
            metadata[_DIM_KEY] = self._dim
            self._collection.modify(metadata=metadata)
        return vectors


def _open(path: Path, embedder: Embedder) -> tuple[Client, Collection]:
    try:
        import chromadb
        from chromadb.config import Settings
    except ImportError as exc:
        raise KbUnavailable(
            "the knowledge base needs chromadb, which is not installed: pip install 'ateam[kb]'"
        ) from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)
    # PersistentClient is typed as ClientAPI, which lacks the close() its class has.
    client = cast(
        "Client",
        chromadb.PersistentClient(
            path=os.fspath(path), settings=Settings(anonymized_telemetry=False)
        ),
    )
    mine: dict[str, Any] = {_EMBEDDER_KEY: embedder.name, _DIM_KEY: embedder.dim}
    collection = client.get_or_create_collection(
        COLLECTION,
        configuration={"hnsw": {"space": "cosine"}},
        metadata=mine,
        embedding_function=None,
    )
    # An existing collection keeps the metadata it was created with.
    built_by = (collection.metadata or {}).get(_EMBEDDER_KEY)
    if built_by != embedder.name:
        client.close()
        raise KbUnavailable(
            f"the kb at {path.parent} was built with the embedder {built_by!r}, not "
            f"{embedder.name!r}: configure that embedder again, or ingest into a new scope",
            detail={"built_with": built_by, "configured": embedder.name},
        )
    return client, collection


def _doc_id(digest: str) -> str:
    # 48 bits of the content hash: a collision needs ~16 million documents in one scope.
    return f"d-{digest[:12]}"


def _duplicate(path: str, original: str) -> dict[str, Any]:
    return {"path": path, "reason": "duplicate", "duplicate_of": original}


def _group_by_document(
    chunks: Sequence[Mapping[str, Any]],
) -> dict[str, list[tuple[int, Mapping[str, Any]]]]:
    """Exported chunks by content hash, each document's chunks in order; checks the shape."""
    documents: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for position, item in enumerate(chunks):
        metadata = item.get("metadata") if isinstance(item, Mapping) else None
        if not isinstance(metadata, Mapping):
            metadata = {}
        digest, index = metadata.get("hash"), metadata.get("chunk")
        text = item.get("text") if isinstance(item, Mapping) else None
        if not (isinstance(text, str) and _is_sha256(digest) and isinstance(index, int)):
            raise BadRequest(
                f"chunk {position} is not an exported kb chunk "
                "({text, metadata: {hash, chunk, ...}})",
                detail={"index": position},
            )
        documents.setdefault(cast(str, digest), []).append((index, item))
    for pieces in documents.values():
        pieces.sort(key=lambda piece: piece[0])
    return documents


def _is_sha256(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) == 64
        and all(char in "0123456789abcdef" for char in value)
    )
