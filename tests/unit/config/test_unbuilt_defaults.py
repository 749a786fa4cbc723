"""The defaults made without a validator equal the ones a validator would make.

The sections a file leaves out, ``ECHO_MODEL`` and the usage of a memory report are
built with ``model_construct`` so that importing them builds no validator (issue 28
§2). That skips their validators: these tests fail if one of them would now change or
refuse the value (a new derived field, a new check).
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from ateam.config import schema
from ateam.config.schema import ECHO_MODEL, ModelEntry
from ateam.wire.results import MemoryStatsResult, UsageTotals

SECTIONS = [
    (model, name, field.default)
    for model in vars(schema).values()
    if isinstance(model, type) and issubclass(model, BaseModel)
    for name, field in model.model_fields.items()
    if isinstance(field.default, BaseModel)
]


def test_there_are_section_defaults_to_check() -> None:
    assert len(SECTIONS) >= 14


@pytest.mark.parametrize(("model", "name", "default"), SECTIONS)
def test_a_section_default_equals_the_validated_one(
    model: type[BaseModel], name: str, default: BaseModel
) -> None:
    validated = type(default).model_validate({})
    assert default == validated, f"{model.__name__}.{name}"
    assert default.model_fields_set == validated.model_fields_set


def test_the_echo_model_equals_the_validated_one() -> None:
    validated = ModelEntry.model_validate({"id": "echo", "provider": "echo", "model": "echo"})
    assert ECHO_MODEL == validated
    assert ECHO_MODEL.model_fields_set == validated.model_fields_set


def test_an_empty_memory_report_holds_validated_usage() -> None:
    assert MemoryStatsResult().usage == UsageTotals.model_validate({})
