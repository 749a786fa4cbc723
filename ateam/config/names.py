"""Project and agent names, checked without the schemas.

They become part of agent ids (``project/name``) and Redis keys, so the bus checks every
name that arrives; it does so with these two functions, which cost a regex, rather than
with :mod:`ateam.config.schema`, which costs pydantic and every model of the YAML files.
"""

from __future__ import annotations

import re

from ateam.errors import BadRequest

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""Project and agent names: they become part of agent ids (``project/name``) and Redis keys."""


def check_name(value: str, what: str) -> str:
    """Return ``value`` if it is a valid project or agent name, else raise ``ValueError``."""
    if not NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"invalid {what} name {value!r}: use letters, digits, '.', '_' or '-' "
            "(starting with a letter or digit)"
        )
    return value


def checked_name(value: object, what: str = "project") -> str:
    """``value`` if it is a valid project or agent name, else ``BadRequest`` (one line).

    For names that arrive over the wire or a command line and become part of Redis keys
    unescaped: :func:`check_name` is what makes that safe.
    """
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a string; got {type(value).__name__}")
    try:
        return check_name(value, what)
    except ValueError as exc:
        raise BadRequest(f"{what}: {exc}") from None
