"""Model providers behind one interface; ``echo`` and ``scripted`` work offline."""

from __future__ import annotations

from collections.abc import Callable

from ateam.config.schema import ModelEntry
from ateam.errors import ConfigError
from ateam.providers.base import Chunk, Message, Provider, TextDelta, ToolCall, Usage
from ateam.providers.echo import EchoProvider
from ateam.providers.scripted import ScriptedProvider

__all__ = [
    "Chunk",
    "EchoProvider",
    "Message",
    "Provider",
    "ScriptedProvider",
    "TextDelta",
    "ToolCall",
    "Usage",
    "build_provider",
]


def build_provider(entry: ModelEntry) -> Provider:
    """The provider for a ``models.yaml`` entry (one row per provider kind)."""
    factory = _FACTORIES.get(str(entry.provider))
    if factory is None:
        raise ConfigError(
            f"provider {entry.provider!s} of model {entry.id!r} is not available in this "
            f"version of ateam (available: {', '.join(sorted(_FACTORIES))})",
            field=f"models[{entry.id}].provider",
        )
    return factory(entry)


def _echo(entry: ModelEntry) -> Provider:
    extra = entry.settings.model_extra or {}
    delay = float(extra.get("token_delay_ms", 0) or 0) / 1000
    return EchoProvider(entry.id, context_window=entry.context_window, token_delay_s=delay)


def _scripted(entry: ModelEntry) -> Provider:
    if entry.script is None:  # the schema requires it; this keeps the type honest
        raise ConfigError("a scripted model needs `script: PATH`", field=f"models[{entry.id}]")
    return ScriptedProvider(entry.script, entry.id, context_window=entry.context_window)


_FACTORIES: dict[str, Callable[[ModelEntry], Provider]] = {
    "echo": _echo,
    "scripted": _scripted,
}
