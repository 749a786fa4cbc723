"""Merging configuration layers and naming the file and field a validation error is in.

Every mapping key and list item of a merged document remembers the file it came from
and its path inside that file; a validation error's location is mapped back through the
longest recorded prefix (see :mod:`ateam.config.loader` for the merge rules).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ateam.config.problems import choices_at, combined, did_you_mean
from ateam.errors import ConfigError

Loc = tuple[str | int, ...]
"""A path inside a YAML document: mapping keys and list indices."""

Origins = dict[Loc, tuple[Path, Loc]]
"""Merged location → (file, location inside that file)."""

Layer = tuple[Path, dict[str, Any]]
"""One file's parsed content."""

ModelT = TypeVar("ModelT", bound=BaseModel)
_IDENT = re.compile(r"[A-Za-z_][\w-]*")


def merge(layers: Sequence[tuple[Path, Loc, Any]], at: Loc, origins: Origins) -> Any:
    """Merge the values found at ``at`` in several files, nearest first.

    Each layer is (file, location of the value in that file, value). Layers whose value
    is of another kind than the nearest one's are shadowed by it.
    """
    file, where, nearest = layers[0]
    origins[at] = (file, where)
    if isinstance(nearest, dict):
        maps = [(f, w, v) for f, w, v in layers if isinstance(v, dict)]
        keys = dict.fromkeys(key for _, _, value in maps for key in value)
        return {
            key: merge(
                [(f, (*w, key), v[key]) for f, w, v in maps if key in v], (*at, key), origins
            )
            for key in keys
        }
    if isinstance(nearest, list):
        merged: list[Any] = []
        seen: set[tuple[str, Any]] = set()
        for f, w, items in (layer for layer in layers if isinstance(layer[2], list)):
            for index, item in enumerate(items):
                ident = _identity(item)
                if ident is not None and ident in seen:
                    continue
                if ident is not None:
                    seen.add(ident)
                origins[(*at, len(merged))] = (f, (*w, index))
                merged.append(item)
        return merged
    return nearest


def _identity(item: Any) -> tuple[str, Any] | None:
    """What makes two list items the same: their ``id``/``name``, or a plain value."""
    if isinstance(item, dict):
        for key in ("id", "name"):
            value = item.get(key)
            if isinstance(value, str | int):
                return (key, value)
        return None
    if isinstance(item, str | int | float | bool):
        return (type(item).__name__, item)
    return None


def validate(schema: type[ModelT], layers: Sequence[Layer]) -> tuple[ModelT, Origins]:
    origins: Origins = {}
    merged = merge([(file, (), raw) for file, raw in layers], (), origins) if layers else {}
    try:
        return schema.model_validate(merged), origins
    except ValidationError as exc:
        raise _schema_error(schema, exc, origins) from None


def _schema_error(schema: type[BaseModel], exc: ValidationError, origins: Origins) -> ConfigError:
    """Every problem pydantic found, each in its file at its field (once per field: the
    branches of a union fail together)."""
    problems: dict[tuple[Path | None, Loc], ConfigError] = {}
    for error in exc.errors(include_url=False):
        merged = tuple(error["loc"])
        file, loc = locate(origins, merged)
        if (file, loc) in problems:
            continue
        message = _message(error["type"], error["msg"], error.get("input"))
        message += _guess(schema, error["type"], merged, error.get("input"))
        problems[(file, loc)] = ConfigError(
            message, file=path_text(file), field=_dotted(loc) or None
        )
    return combined(list(problems.values()))


def _guess(schema: type[BaseModel], kind: str, loc: Loc, value: Any) -> str:
    """``did you mean`` for a misspelt field name or choice; ``""`` when nothing is close."""
    if kind == "extra_forbidden" and loc:
        return did_you_mean(loc[-1], choices_at(schema, loc[:-1]))
    if kind == "enum":
        return did_you_mean(value, choices_at(schema, loc))
    return ""


def locate(origins: Origins, loc: Loc) -> tuple[Path | None, Loc]:
    """Map a location in a merged document to (file, location in that file)."""
    for cut in range(len(loc), -1, -1):
        hit = origins.get(loc[:cut])
        if hit is not None:
            return hit[0], (*hit[1], *loc[cut:])
    return None, loc


_TYPE_MESSAGES = {
    "model_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
}


def _message(kind: str, msg: str, value: Any) -> str:
    """Pydantic's message, reworded where it would name internal classes."""
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind in _TYPE_MESSAGES:
        return f"{_TYPE_MESSAGES[kind]}, not {kind_of(value)}"
    return one_line(msg.removeprefix("Value error, "))


def _dotted(loc: Loc) -> str:
    """``("fallbacks", 1)`` → ``fallbacks[1]``; keys such as ``os.*`` are quoted."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENT.fullmatch(part):
            text += f".{part}" if text else part
        elif part == "[key]":  # pydantic's marker for "the key itself is invalid"
            text += part
        else:
            text += f"[{json.dumps(part)}]"
    return text


def kind_of(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def one_line(text: str) -> str:
    return " ".join(text.split())


def path_text(path: Path | None) -> str | None:
    return None if path is None else str(path)
