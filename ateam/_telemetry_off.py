"""redis-py's OpenTelemetry metrics left out of a process ateam runs.

redis-py 8 imports ``opentelemetry.sdk.metrics`` and ``opentelemetry.metrics`` with its
client whenever they are installed, to offer metrics a program may turn on. The SDK
comes with Chroma (the ``kb`` extra), the API with the ``anthropic`` and ``mcp`` SDKs;
with both, the imports cost every ``ateam`` process some 45-55 ms of its start
(``python -X importtime``: more than all of redis-py's own modules), an agent's start
to serving included. ateam never turns those metrics on.

So a process started as ``ateam`` (not a program that imports ``ateam.client``: its
redis-py is its own) runs :func:`install` first: a finder that answers "not installed"
to those imports when those redis-py modules make them, which then run as they do
without OpenTelemetry. Anything else importing it later (Chroma) gets it.

Pydantic's plugins are left out the same way, by an agent (:func:`pydantic_plugins_off`):
pydantic looks them up, at its first validator, by reading the entry points of every
installed distribution (6 ms of an agent's start, 160 distributions here), and a plugin
would see every payload an agent validates: prompts, tool output, its configuration.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["install", "pydantic_plugins_off"]

_SKIPPED = {
    "redis.observability.providers": {
        "opentelemetry",
        "opentelemetry.sdk",
        "opentelemetry.sdk.metrics",
    },
    "redis.observability.metrics": {"opentelemetry", "opentelemetry.metrics"},
}
"""The redis-py modules whose optional imports are answered "not installed", and the
modules each imports for that (parents first)."""
_NAMES = frozenset().union(*_SKIPPED.values())
_DEPTH = 12
"""Frames between a finder and the module running the import statement (importlib's
own: ``_find_spec``, ``_find_and_load_unlocked``, ``_find_and_load``...)."""


class _SkipRedisTelemetry:
    """A meta path finder: ``opentelemetry`` is missing, for redis-py's metrics only."""

    @staticmethod
    def find_spec(
        name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name not in _NAMES:
            return None
        frame = sys._getframe(1)
        for _ in range(_DEPTH):
            if name in _SKIPPED.get(frame.f_globals.get("__name__", ""), ()):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            if frame.f_back is None:
                break
            frame = frame.f_back
        return None  # someone else's import: found as usual by the finders after this


def install() -> None:
    """Put the finder first, once (before redis-py is imported, or it is too late)."""
    if not any(isinstance(finder, _SkipRedisTelemetry) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SkipRedisTelemetry())


def pydantic_plugins_off() -> None:
    """Run no pydantic plugin in this process, and skip the entry-point scan that finds them.

    Pydantic offers only an environment variable for this, which every child process
    (a tool's command, a hook, an MCP server) would inherit; its loader's cache, set
    empty before the first validator is built, keeps it to this process. Call it once
    pydantic is imported anyway: ``--help`` imports no pydantic.
    """
    try:
        from pydantic.plugin import _loader
    except ImportError:  # moved in a later pydantic: plugins are looked up as usual
        return
    if hasattr(_loader, "_plugins"):  # None until looked up; emptied if they were
        _loader._plugins = {}
