"""A model API that cannot work at all is found at start (``agent/models/readiness.py``)."""

from __future__ import annotations

from ateam.agent.models.readiness import DEFAULT_KEY_ENV, why_unusable
from ateam.config import ECHO_MODEL, ModelEntry, Provider


def entry(provider: Provider, **fields: str) -> ModelEntry:
    return ModelEntry(id="m", provider=provider, model="m", **fields)


def test_an_unset_key_variable_is_the_error_every_call_would_fail_with() -> None:
    model = entry(Provider.OPENAI, api_key_env="MY_KEY")

    missing = why_unusable(model, environ={})

    assert missing is not None and missing.code == "provider.auth"
    assert missing.message == "environment variable MY_KEY (api_key_env of model 'm') is not set"
    assert why_unusable(model, environ={"MY_KEY": "  "}) is not None
    assert why_unusable(model, environ={"MY_KEY": "sk-1"}) is None


def test_a_model_that_needs_no_key_and_the_offline_ones_are_fine() -> None:
    assert (
        why_unusable(entry(Provider.OPENAI, base_url="http://localhost:11434/v1"), environ={})
        is None
    )
    assert why_unusable(ECHO_MODEL, environ={}) is None


def test_anthropic_reads_its_default_variable_when_the_entry_names_none() -> None:
    missing = why_unusable(entry(Provider.ANTHROPIC), environ={})
    assert missing is not None and "ANTHROPIC_API_KEY" in missing.message
    assert why_unusable(entry(Provider.ANTHROPIC), environ={"ANTHROPIC_API_KEY": "k"}) is None


def test_the_default_variable_is_the_adapters_own() -> None:
    from ateam.providers.anthropic import DEFAULT_API_KEY_ENV

    assert DEFAULT_KEY_ENV["anthropic"] == DEFAULT_API_KEY_ENV
