"""Reading a provider's HTTP response headers: rate-limit headroom and ``Retry-After``.

OpenAI-compatible servers and Anthropic name their headers differently but mean the
same things, so each adapter gives its header names and this module does the reading.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

from ateam.providers.base import Headroom


def headroom(headers: Mapping[str, str], pairs: Mapping[str, tuple[str, str]]) -> Headroom | None:
    """The headroom the headers report, or ``None`` when they report none.

    Args:
        headers: the response headers (case-insensitive mapping, or lower-case names).
        pairs: limit name (``requests``, ``tokens``...) → (remaining header, limit header).
    """
    remaining: dict[str, int] = {}
    limits: dict[str, int] = {}
    for name, (left_header, size_header) in pairs.items():
        left = _int(headers.get(left_header))
        size = _int(headers.get(size_header))
        if left is None or size is None or size <= 0:
            continue  # half a pair, or a zero limit, says nothing about what is left
        remaining[name] = left
        limits[name] = size
    if not limits:
        return None
    # The scarcest limit decides: 5 % of requests left is 5 % left, whatever the tokens.
    fraction = min(min(1.0, max(0.0, remaining[n] / limits[n])) for n in limits)
    return Headroom(fraction=fraction, remaining=remaining, limits=limits)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value.strip()))
    except ValueError:
        return None
