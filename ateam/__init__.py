"""ateam: a team of long-lived AI coding agents steered from a console over Redis."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ateam.errors import AteamError

__all__ = ["AteamError", "__version__"]


def __getattr__(name: str) -> object:
    # Imported when asked for: `ateam --help` needs neither the error catalogue nor the
    # typing_extensions it pulls in, and every `ateam.*` import runs this file first.
    if name == "AteamError":
        from ateam.errors import AteamError

        return AteamError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
