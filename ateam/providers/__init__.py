"""Model providers behind one interface; ``echo`` and ``scripted`` work offline."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ateam.config.schema import ModelEntry
from ateam.errors import ConfigError
from ateam.providers.base import Chunk, Headroom, Message, Provider, TextDelta, ToolCall, Usage
from ateam.providers.echo import EchoProvider

if TYPE_CHECKING:
    from ateam.providers.scripted import ScriptedProvider

__all__ = [
    "Chunk",
    "EchoProvider",
    "Headroom",
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
    from ateam.providers.scripted import ScriptedProvider

    return ScriptedProvider(entry.script, entry.id, context_window=entry.context_window)


def _sdk_missing(entry: ModelEntry, package: str) -> ConfigError:
    return ConfigError(
        f"model {entry.id!r} uses provider {entry.provider!s}, which needs the {package} "
        f"package: pip install 'ateam[{package}]'",
        field=f"models[{entry.id}].provider",
    )


def _openai(entry: ModelEntry) -> Provider:
    # Imported on demand: the SDKs are optional extras and slow to import.
    try:
        from ateam.providers import openai as adapter
    except ImportError:
        raise _sdk_missing(entry, "openai") from None
    return adapter.from_entry(entry)


def _anthropic(entry: ModelEntry) -> Provider:
    try:
        from ateam.providers import anthropic as adapter
    except ImportError:
        raise _sdk_missing(entry, "anthropic") from None
    return adapter.from_entry(entry)


_FACTORIES: dict[str, Callable[[ModelEntry], Provider]] = {
    "echo": _echo,
    "scripted": _scripted,
    "openai": _openai,
    "anthropic": _anthropic,
}


def __getattr__(name: str) -> object:
    # The scripted provider (a test double, and its YAML script reader) is imported when
    # asked for: an agent on any other model never loads it (issue 28 §2).
    if name == "ScriptedProvider":
        from ateam.providers.scripted import ScriptedProvider

        return ScriptedProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
