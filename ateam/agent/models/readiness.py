"""Whether a model API can work at all, asked when the agent starts, not at its first task.

A model whose API key variable is unset, or whose provider's SDK is not installed,
fails every call; without this check the agent would show ``idle`` until the first
task failed. Nothing is sent anywhere: a key that is set but wrong is only found by a
call. Coding agents (``provider: acp``) have their own check (their command on
``PATH``, :meth:`~ateam.agent.acp.runner.AcpRunner.check_at_start`).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping

from ateam.config.schema import ModelEntry
from ateam.errors import AteamError, AuthFailed, ConfigError

__all__ = ["DEFAULT_KEY_ENV", "why_unusable"]

DEFAULT_KEY_ENV: Mapping[str, str] = {"anthropic": "ANTHROPIC_API_KEY"}
"""The key variable a provider reads when its entry names none (the Anthropic adapter's
``DEFAULT_API_KEY_ENV``; kept here so the check does not import an SDK, which takes
seconds, and held equal to it by a test). An OpenAI-compatible entry without
``api_key_env`` sends no key: local servers need none."""

_SDK: Mapping[str, str] = {"openai": "openai", "anthropic": "anthropic"}
"""The package each provider's SDK comes in (and the ``ateam[...]`` extra that brings it)."""


def why_unusable(
    entry: ModelEntry, *, environ: Mapping[str, str] | None = None
) -> AteamError | None:
    """The error every call to ``entry`` would fail with; ``None`` if it may work."""
    check = _CHECKS.get(str(entry.provider))
    return None if check is None else check(entry, os.environ if environ is None else environ)


def _api(entry: ModelEntry, environ: Mapping[str, str]) -> AteamError | None:
    package = _SDK[str(entry.provider)]
    if importlib.util.find_spec(package) is None:
        return ConfigError(
            f"model {entry.id!r} uses provider {entry.provider!s}, which needs the {package} "
            f"package: pip install 'ateam[{package}]'"
        )
    variable = entry.api_key_env or DEFAULT_KEY_ENV.get(str(entry.provider))
    if variable is not None and not environ.get(variable, "").strip():
        return AuthFailed.missing_key(variable, provider=str(entry.provider), model=entry.id)
    return None


_CHECKS: Mapping[str, Callable[[ModelEntry, Mapping[str, str]], AteamError | None]] = {
    "openai": _api,
    "anthropic": _api,
}
"""The providers that can be unusable before any call; the offline ones never are."""
