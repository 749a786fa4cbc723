"""Every problem of a configuration in one report, each with a guess at what was meant.

A user who fixes one typo only to meet the next on the following run learns the schema
one restart at a time. The loader therefore goes on after a problem, with a harmless
stand-in for what failed, and reports everything it found at the end
(:func:`combined`). A misspelt field name, model id or choice gets
the closest known one as ``did you mean …``.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

from ateam.errors import ConfigError

__all__ = ["Problems", "choices_at", "combined", "did_you_mean", "unknown_model"]

T = TypeVar("T")

_CUTOFF = 0.6
"""How alike a known word must be to be offered (difflib's ratio): close enough that a
wrong guess is rarer than a right one."""


def combined(problems: Sequence[ConfigError]) -> ConfigError:
    """One error for every problem of a load: the only one, or all of them listed.

    Its first line counts them, so a reader of one line (the supervisor's record of an
    agent's exit, a verb's warning) still says what is wrong and how much; then each
    problem on a line of its own. A problem met twice (a shared file) is listed once.
    """
    unique: dict[str, ConfigError] = {}
    for error in problems:
        for problem in error.problems:
            unique.setdefault(problem.message, problem)
    found = tuple(unique.values())
    if len(found) == 1:
        return found[0]
    listed = "".join(f"\n  {problem.message}" for problem in found)
    error = ConfigError(f"{len(found)} problems in the configuration:{listed}")
    error.problems = found
    error.detail["problems"] = [
        {"file": p.file, "field": p.field, "message": p.message} for p in found
    ]
    return error


def did_you_mean(word: object, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known word closest to ``word``; ``""`` for none."""
    if not isinstance(word, str):
        return ""
    import difflib  # only once a word is wrong: every agent and verb loads this module

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=_CUTOFF)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_model(model_id: str, models: Mapping[str, object]) -> str:
    """The problem of a model id that ``models.yaml`` does not define."""
    return f"unknown model {model_id!r}{did_you_mean(model_id, models)}; known: {', '.join(models)}"


def choices_at(schema: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """The words that fit at ``loc`` of a document ``schema`` reads: field names of a
    section, or the values of a choice (an enum); ``[]`` where neither is known."""
    kind = _type_at(schema, loc)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return [info.alias or name for name, info in kind.model_fields.items()]
    if isinstance(kind, type) and issubclass(kind, Enum):
        return [str(member.value) for member in kind]
    return []


def _type_at(schema: type[BaseModel], loc: tuple[str | int, ...]) -> Any:
    """The declared type of the value at ``loc``, walking sections, lists and maps."""
    current: Any = schema
    for part in loc:
        current = _bare(current)
        origin = get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            fields = current.model_fields
            name = next(
                (n for n, info in fields.items() if part in (n, info.alias)),
                None,
            )
            if name is None:
                return None
            current = fields[name].annotation
        elif origin in (tuple, list):  # the part is an index
            current = get_args(current)[0]
        elif origin is dict:  # the part is a key
            current = get_args(current)[1]
        else:
            return None
    return _bare(current)


def _bare(kind: Any) -> Any:
    """``X`` of ``X | None`` and of ``Annotated[X, ...]``."""
    while True:
        origin = get_origin(kind)
        if origin is Annotated:
            kind = get_args(kind)[0]
        elif origin in (Union, types.UnionType):
            kind = next(arg for arg in get_args(kind) if arg is not type(None))
        else:
            return kind


class Problems:
    """The problems one load has found so far, in the order found."""

    def __init__(self) -> None:
        self.found: list[ConfigError] = []

    def __len__(self) -> int:
        return len(self.found)

    def add(self, error: ConfigError) -> None:
        self.found.extend(error.problems)

    def attempt(self, load: Callable[[], T], stand_in: T) -> T:
        """``load()``; if it finds problems, they are kept and ``stand_in`` is returned,
        so the load goes on to find the rest."""
        try:
            return load()
        except ConfigError as exc:
            self.add(exc)
            return stand_in

    def raise_found(self) -> None:
        """Raise one :class:`~ateam.errors.ConfigError` for everything found, if anything."""
        if self.found:
            raise combined(self.found)
