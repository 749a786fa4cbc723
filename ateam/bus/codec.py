"""msgpack payloads with explicit field names and a version field ``v`` (SPEC §4)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack

from ateam.constants import PROTOCOL_VERSION
from ateam.errors import BadRequest


def pack(payload: Mapping[str, object]) -> bytes:
    """Serialise a mapping, stamping the protocol version unless already present."""
    if "v" not in payload:
        payload = {"v": PROTOCOL_VERSION, **payload}
    data: bytes = msgpack.packb(payload, use_bin_type=True)
    return data


def unpack(data: bytes) -> dict[str, Any]:
    """Parse a payload; anything that is not a msgpack map is a ``bad_request``."""
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise BadRequest(f"malformed msgpack payload: {type(exc).__name__}") from exc
    if not isinstance(value, dict):
        raise BadRequest(f"payload must be a map, got {type(value).__name__}")
    return value
