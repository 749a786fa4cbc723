"""ateam: a team of long-lived AI coding agents steered from a console over Redis."""

from __future__ import annotations

__version__ = "0.1.0"

from ateam.errors import AteamError

__all__ = ["AteamError", "__version__"]
