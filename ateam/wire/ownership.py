"""Who holds an agent (SPEC §4.3), as the ``owner:{agent}`` hash records it.

The claims themselves (their Lua scripts and the token that proves one) are
:mod:`ateam.bus.ownership`; the record is here, below the bus, because the client hands
it to front ends as it is (``AgentHandle.owner``, the holder a takeover replaced).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["OwnerInfo", "OwnerKind"]


class OwnerKind(StrEnum):
    """How long a claim is meant to last, so others know whether waiting is worth it."""

    CONSOLE = "console"
    """Held while a console stays attached: minutes or hours."""
    CALL = "call"
    """Held around one call (``ateam send``/``stop``, a console's one-off write): ms."""


@dataclass(frozen=True)
class OwnerInfo:
    """The holder of an agent, read from its ``owner:{agent}`` hash."""

    session: str
    since: float
    host: str
    user: str
    kind: OwnerKind = OwnerKind.CONSOLE
    """Claims written before kinds existed were all treated as consoles."""
    external: bool = False
    """Whether the owner lets external runtimes (``ateam mcp`` clients) queue input."""

    @classmethod
    def from_hash(cls, data: dict[bytes, bytes]) -> OwnerInfo | None:
        if b"session" not in data:
            return None
        try:
            kind = OwnerKind(data.get(b"kind", b"console").decode())
        except ValueError:  # a kind from a newer version: assume the long-lived one
            kind = OwnerKind.CONSOLE
        return cls(
            data[b"session"].decode(),
            float(data.get(b"since", b"0")),
            data.get(b"host", b"").decode(),
            data.get(b"user", b"").decode(),
            kind,
            data.get(b"external") == b"1",
        )

    def describe(self) -> str:
        return f"{self.session} ({self.user}@{self.host})"
