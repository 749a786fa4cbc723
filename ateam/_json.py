"""The shape of JSON values, for code that passes them on without a model of their own.

What crosses the wire or lands in a file has a typed model where its fields are known;
these aliases are for the open-ended parts (an error's ``detail``, a tool's arguments,
an event's payload) and say what :data:`~typing.Any` did not: the value came from, or
will go to, ``json``/msgpack, so it is one of these and nothing else.

Defined with :class:`~typing_extensions.TypeAliasType` rather than a plain recursive
alias because pydantic can only build a validator for the named form.
"""

from __future__ import annotations

from typing_extensions import TypeAliasType

__all__ = ["JsonObject", "JsonValue"]

JsonValue = TypeAliasType(
    "JsonValue",
    "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None",
)
"""Any value JSON can carry: a scalar, a list of values or an object of values."""

JsonObject = TypeAliasType("JsonObject", "dict[str, JsonValue]")
"""A JSON object. Parameters that only read one take ``Mapping[str, JsonValue]`` or
``Mapping[str, object]`` instead, which a caller's narrower ``dict`` also fits."""
