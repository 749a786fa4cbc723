"""How a failed provider call is classified: one table for every adapter.

Each adapter (and the KB's embeddings client) turns an HTTP status and message into the
same typed :class:`~ateam.errors.ProviderError`, so the router decides alike whatever
the provider.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ateam.errors import (
    AuthFailed,
    ContextTooLong,
    Overloaded,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
)

__all__ = ["provider_error_from_status"]

_STATUS_ERRORS: dict[int, type[ProviderError]] = {
    401: AuthFailed,
    403: AuthFailed,
    429: RateLimited,
    503: Overloaded,
    529: Overloaded,
}

# Providers report an oversized prompt as a plain 400 (413 for some proxies); only the
# wording tells it apart. Seen: OpenAI/vLLM/OpenRouter "maximum context length is",
# OpenAI "context_length_exceeded", Anthropic "prompt is too long", llama.cpp
# "exceeds the available context size".
_CONTEXT_TOO_LONG = re.compile(
    r"context[ _](length|size|window)|maximum context|prompt is too long|too many tokens",
    re.IGNORECASE,
)


def provider_error_from_status(
    status: int | None,
    message: str,
    *,
    provider: str,
    model: str,
    retry_after_s: float | None = None,
    detail: Mapping[str, object] | None = None,
) -> ProviderError:
    """The typed error for a failed provider call, so every adapter classifies alike.

    Args:
        status: the HTTP status, or ``None`` when no response arrived (connection error).
        message: the provider's error message; for a 400 or 413 it decides whether the
            request was too long for the context window.
        provider: the provider kind (``openai``, ``anthropic``, ``scripted``, ...).
        model: the model entry id.
        retry_after_s: the server's ``Retry-After``, if it sent one.
        detail: extra detail to carry (e.g. the provider's own error type).
    """
    cls = _STATUS_ERRORS.get(status) if status is not None else ProviderUnavailable
    if cls is None:
        if status is not None and status >= 500:
            cls = ProviderUnavailable
        elif status in (400, 413) and _CONTEXT_TOO_LONG.search(message):
            cls = ContextTooLong
        else:
            cls = ProviderError
    return cls(
        message,
        status=status,
        provider=provider,
        model=model,
        retry_after_s=retry_after_s,
        detail=detail,
    )
