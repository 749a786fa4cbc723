"""Turning a pydantic validation failure into the one-line ``bad_request`` ateam reports."""

from __future__ import annotations

from pydantic import ValidationError

from ateam.errors import BadRequest

_PLAIN_WORDS = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a map",
    "missing": "is required",
    "too_short": "must not be empty",
    "greater_than_equal": "is too small",
    "less_than_equal": "is too large",
}
"""pydantic's error types → the words ateam uses for them; others keep pydantic's text."""


def bad_request(what: str, error: ValidationError) -> BadRequest:
    """The first problem of ``error`` as ``what: 'field' must be …``, all of them in detail."""
    problems = error.errors(include_url=False, include_input=False)
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "params"
    words = _PLAIN_WORDS.get(first["type"], first["msg"])
    if first["type"] in ("greater_than_equal", "less_than_equal"):
        words = first["msg"].lower()
    message = f"{what}: '{where}' {words}"
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more problem(s))"
    return BadRequest(
        message,
        detail={"errors": [{"loc": list(p["loc"]), "type": p["type"]} for p in problems]},
    )
