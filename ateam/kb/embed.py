"""Embeddings for the knowledge base: pluggable, with an offline default (SPEC §10).

An :class:`Embedder` turns texts into vectors; the store compares them by cosine. Two
kinds ship:

* :class:`HashingEmbedder`, the default, needs no model download and no network. It is
  lexical — feature hashing of words, their ``snake_case``/``camelCase`` parts, word
  bigrams and character trigrams — so it finds documents that share vocabulary with the
  query (identifiers, error messages, terms of art) but knows no synonyms. Its vectors
  depend only on the text: the hash is BLAKE2b, never Python's per-process randomised
  ``hash()``, so a store built by one process is searched correctly by another.
* :class:`OpenAIEmbedder` calls an OpenAI-compatible ``/embeddings`` endpoint (OpenAI,
  or a local server such as Ollama, llama.cpp or vLLM) through the official SDK.

Both are synchronous: the store runs in a worker thread (the ``kb.*`` tools' timeout is
30 s), so a blocking HTTP call is what fits.

A store records the :attr:`Embedder.name` that built it and refuses another: vectors of
two models live in different spaces, and comparing them gives confident nonsense.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ateam.config.schema import EmbeddingsProvider, EmbeddingsSpec
from ateam.errors import KbUnavailable, ProviderError
from ateam.providers.status import provider_error_from_status

if TYPE_CHECKING:
    import openai

__all__ = [
    "DEFAULT_DIM",
    "Embedder",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "configured_embedder",
    "embedder_from_config",
]

DEFAULT_DIM = 2048
"""The offline embedder's vector length (8 KiB a chunk in the store): a chunk has several
hundred distinct features, and fewer dimensions let chance collisions lift unrelated
chunks towards the search threshold."""


class Embedder(Protocol):
    """Turns texts into vectors of one fixed length."""

    @property
    def name(self) -> str:
        """Identifies the vector space (algorithm or model); stores refuse another."""
        ...

    @property
    def dim(self) -> int:
        """The vector length, or 0 while unknown (a remote model not yet called)."""
        ...

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in the same order."""
        ...


# --- the offline default ----------------------------------------------------------------

_WORD = re.compile(r"\w+")
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+|[^\W\d_A-Za-z]+")
_STOP_WORDS = frozenset(
    # English function words, and the keywords and stock names of code, which occur in
    # nearly every chunk and so say nothing about what a chunk is about.
    """a an and any are as at be but by can do does for from has have how i if in into is
    it its of on or so that the their then there these this to was we were what when where
    which who why will with you your
    args async await bool break case class cls const continue def dict elif else err except
    false finally float fn for func function import int kwargs lambda len let list nil none
    not null pass print pub raise return self str string struct true try tuple use var void
    while yield""".split()
)
_SUFFIXES = (
    ("sses", "ss"),
    ("ies", "y"),
    ("ations", ""),
    ("ation", ""),
    ("ings", ""),
    ("ing", ""),
    ("ions", ""),
    ("ion", ""),
    ("ers", ""),
    ("er", ""),
    ("ed", ""),
    ("es", ""),
    ("ly", ""),
    ("ss", "ss"),
    ("s", ""),
    ("e", ""),
)
"""A crude English suffix stripper, first match wins, keeping at least three letters:
enough that "configure", "configured" and "configuration" meet, without a stemmer
dependency. Character trigrams catch much of what it misses."""
_MIN_STEM = 3

# How much each kind of feature counts. Whole words carry the meaning; the parts of an
# identifier let "retry_after" match "retry"; bigrams reward phrases in the right order;
# trigrams are a fuzzy fallback (typos, compounds) and stay light, since texts sharing
# only letter soup are not related.
_WORD_WEIGHT = 1.0
_PART_WEIGHT = 0.6
_BIGRAM_WEIGHT = 0.5
_TRIGRAM_WEIGHT = 0.1
_TRIGRAM_MIN_LEN = 4

_SLOTS_PER_FEATURE = 4
"""Each feature is spread over four signed slots. The collision noise has the same
variance as with one slot, but without its heavy tail (a rare full-strength collision),
which is what decides the best spurious score among thousands of chunks."""
_SLOT_WORDS = struct.Struct(f"<{_SLOTS_PER_FEATURE}Q")
_AMPLITUDE = 1.0 / math.sqrt(_SLOTS_PER_FEATURE)
"""Each slot's share, so that a feature's total weight is the same as with one slot."""
_SHIFT = 0.33
"""The square of a constant component every vector shares (see :class:`HashingEmbedder`)."""


class HashingEmbedder:
    """The offline default: signed feature hashing of lexical features.

    Each feature — a word (lower-cased, suffix-stripped), a part of a ``snake_case`` or
    ``camelCase`` identifier, a bigram of words, a character trigram — is hashed with
    BLAKE2b to four dimensions and signs; its weight is ``kind weight * (1 + ln tf)``.
    Signed hashing keeps collisions unbiased: colliding features cancel as often as they
    add up.

    Calibration. A lexical cosine runs lower than a neural model's. Measured on ateam's
    own sources and docs (~530 chunks), a short query scored a raw 0.16-0.5 against the
    best chunk about its subject, while nonsense queries stayed under 0.11 even as the
    best of all the chunks. So the hashed part is L2-normalised and one last dimension
    holds a constant component ``c`` (``c**2 = 0.33``) before normalising again: the
    cosine of two texts becomes ``(s + 0.33) / 1.33`` for a raw lexical cosine ``s`` — a
    monotone shift, like the common direction neural embedding spaces share — and SPEC
    §10's minimum score of 0.35, chosen with neural models in mind, falls at a raw cosine
    of about 0.135, between the two. A text with no features (empty, or only stop words)
    gets the constant component alone, which scores ``0.33 / 1.33 = 0.25`` against every
    text: below the threshold, and never the zero vector, which has no cosine.

    Args:
        dim: The vector length, the constant component included.
    """

    def __init__(self, dim: int = DEFAULT_DIM) -> None:
        if dim < 16:
            raise ValueError("dim must be at least 16")
        self._dim = dim
        self._slots = functools.lru_cache(maxsize=1 << 16)(self._hash_slots)

    @property
    def name(self) -> str:
        # The version changes whenever the features or weights do, so a store built by an
        # older release is refused instead of silently mis-scored.
        return f"hashing-v1-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        hashed = [0.0] * (self._dim - 1)
        for feature, weight in _features(text).items():
            for slot, sign in self._slots(feature):
                hashed[slot] += sign * weight
        norm = math.hypot(*hashed)
        if not norm:
            # Only the shared component: it matches everything equally, at 0.25.
            return [0.0] * (self._dim - 1) + [1.0]
        scale = 1.0 / (norm * math.sqrt(1.0 + _SHIFT))
        return [value * scale for value in hashed] + [math.sqrt(_SHIFT / (1.0 + _SHIFT))]

    def _hash_slots(self, feature: str) -> tuple[tuple[int, float], ...]:
        digest = hashlib.blake2b(
            feature.encode("utf-8", "surrogatepass"), digest_size=8 * _SLOTS_PER_FEATURE
        ).digest()
        slots = self._dim - 1
        return tuple(
            (value % slots, _AMPLITUDE if value >> 63 else -_AMPLITUDE)
            for value in _SLOT_WORDS.unpack(digest)
        )


def _features(text: str) -> dict[str, float]:
    """Every feature of ``text`` with its weight, ``kind weight * (1 + ln count)`` summed
    over the kinds that yield it (a word and an identifier part can be the same)."""
    words: list[str] = []
    bigrams: list[str] = []
    parts: list[str] = []
    grams: list[str] = []
    previous = ""
    for token in _WORD.findall(text):
        stem, token_parts, token_grams = _analyse(token)
        if not stem:
            continue
        words.append("w:" + stem)
        if previous:  # stop words in between do not break a phrase
            bigrams.append(f"b:{previous} {stem}")
        previous = stem
        parts.extend(token_parts)
        grams.extend(token_grams)
    weights: dict[str, float] = {}
    for features, weight in (
        (words, _WORD_WEIGHT),
        (parts, _PART_WEIGHT),
        (bigrams, _BIGRAM_WEIGHT),
        (grams, _TRIGRAM_WEIGHT),
    ):
        for feature, count in Counter(features).items():
            weights[feature] = weights.get(feature, 0.0) + weight * (1.0 + math.log(count))
    return weights


@functools.lru_cache(maxsize=1 << 16)
def _analyse(token: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """A token's stem ("" for a stop word), its identifier parts' features, its trigrams."""
    word = token.strip("_").lower()
    if not word or word in _STOP_WORDS:
        return "", (), ()
    pieces = [piece.lower() for piece in _PARTS.findall(token)]
    parts = (
        tuple("w:" + _stem(piece) for piece in pieces if piece not in _STOP_WORDS)
        if len(pieces) > 1
        else ()
    )
    grams = tuple(gram for piece in pieces for gram in _trigrams(piece))
    return _stem(word), parts, grams


# Cached: vocabularies are small next to texts, and the same words recur everywhere.
@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= _MIN_STEM:
            return word[: len(word) - len(suffix)] + replacement
    return word


@functools.lru_cache(maxsize=1 << 16)
def _trigrams(word: str) -> tuple[str, ...]:
    if len(word) < _TRIGRAM_MIN_LEN:
        return ()
    padded = f"<{word}>"
    return tuple("t:" + padded[start : start + 3] for start in range(len(padded) - 2))


# --- an OpenAI-compatible endpoint ------------------------------------------------------

_PROVIDER = "openai"
_TIMEOUT_S = 25.0
"""Per request, under the ``kb.*`` tools' 30 s."""


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint, via the ``openai`` SDK.

    The SDK is imported at the first call, so configuring this embedder costs nothing
    until it is used, and a missing SDK or key is reported then.

    Args:
        base_url: The API base (``http://localhost:11434/v1``); ``None`` for OpenAI.
        model: The embedding model (``text-embedding-3-small``).
        api_key_env: The environment variable holding the key; ``None`` sends none
            (local servers).
        dimensions: Ask the model for vectors of this length (models that support it).
        batch_size: Texts per request.
    """

    def __init__(
        self,
        base_url: str | None,
        model: str,
        api_key_env: str | None = None,
        *,
        dimensions: int | None = None,
        batch_size: int = 64,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        self.dimensions = dimensions
        self.batch_size = batch_size
        self._dim = dimensions or 0
        self._client: openai.OpenAI | None = None

    @property
    def name(self) -> str:
        suffix = f"@{self.dimensions}" if self.dimensions else ""
        return f"{_PROVIDER}:{self.model}{suffix}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embed in batches of :attr:`batch_size`.

        Raises:
            KbUnavailable: The ``openai`` package is not installed.
            ProviderError: The endpoint failed (typed by status, as for chat models).
        """
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self._batch(texts[start : start + self.batch_size]))
        if vectors:
            self._dim = len(vectors[0])
        return vectors

    def _batch(self, texts: list[str]) -> list[list[float]]:
        client = self._get_client()
        import openai

        extra: dict[str, Any] = {"dimensions": self.dimensions} if self.dimensions else {}
        try:
            # "float" explicitly: the SDK otherwise asks for base64, which some local
            # servers do not speak.
            reply = client.embeddings.create(
                model=self.model, input=texts, encoding_format="float", **extra
            )
        except openai.APIStatusError as exc:
            message = f"HTTP {exc.status_code}: {exc.message}"
            raise self._failure(exc.status_code, message) from exc
        except openai.APIConnectionError as exc:
            where = self.base_url or "the OpenAI API"
            raise self._failure(None, f"cannot reach {where}: {exc}") from exc
        if len(reply.data) != len(texts):
            raise self._failure(
                None, f"asked for {len(texts)} embeddings, received {len(reply.data)}"
            )
        # The API numbers its answers; nothing promises they arrive in order.
        return [list(item.embedding) for item in sorted(reply.data, key=lambda d: d.index)]

    def _failure(self, status: int | None, message: str) -> ProviderError:
        return provider_error_from_status(status, message, provider=_PROVIDER, model=self.model)

    def _get_client(self) -> openai.OpenAI:
        if self._client is None:
            try:
                import openai
            except ImportError as exc:
                raise KbUnavailable(
                    "the openai embeddings need the openai package: pip install 'ateam[openai]'"
                ) from exc
            self._client = openai.OpenAI(
                api_key=self._api_key(),
                base_url=self.base_url,
                max_retries=0,
                timeout=_TIMEOUT_S,
            )
        return self._client

    def _api_key(self) -> str:
        from ateam.providers.openai import api_key

        return api_key(self.api_key_env, provider=_PROVIDER, model=self.model)


# --- configuration ----------------------------------------------------------------------


def _hashing(spec: EmbeddingsSpec) -> Embedder:
    return HashingEmbedder(spec.dim or DEFAULT_DIM)


def _openai(spec: EmbeddingsSpec) -> Embedder:
    # The schema guarantees the model; the assert only tells the type checker.
    assert spec.model is not None
    return OpenAIEmbedder(spec.base_url, spec.model, spec.api_key_env, dimensions=spec.dimensions)


_PROVIDERS: dict[EmbeddingsProvider, Callable[[EmbeddingsSpec], Embedder]] = {
    EmbeddingsProvider.HASHING: _hashing,
    EmbeddingsProvider.OPENAI: _openai,
}


def embedder_from_config(spec: EmbeddingsSpec | None) -> Embedder:
    """The embedder a ``models.yaml`` ``embeddings`` section asks for.

    Args:
        spec: The validated section (:attr:`ProjectConfig.embeddings`), or ``None`` for
            the offline default.
    """
    if spec is None:
        return HashingEmbedder()
    return _PROVIDERS[spec.provider](spec)


def configured_embedder(start: Path) -> Embedder:
    """The embedder configured for the project (and ``~/.ateam``) that applies to ``start``.

    Discovery is the agent's own (SPEC §3), so started from the agent's project root, or
    its working directory when it has no project, this finds the ``models.yaml`` files
    the agent was configured from.

    Raises:
        ConfigError: The configuration does not load.
    """
    from ateam.config.loader import load_project

    return embedder_from_config(load_project(start).embeddings)
