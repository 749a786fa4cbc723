"""Public signatures of ``ateam/`` say what they take and give (issue 23: under 8 % ``Any``)."""

from __future__ import annotations

import ast

from tests.any_count import TARGET, Signature, _walk, signatures


def test_under_the_target_share_of_public_signatures_carry_any() -> None:
    found = signatures()
    with_any = [f"{s.where}.{s.name}" for s in found if s.has_any]
    assert len(found) > 1000  # the whole package was read
    assert len(with_any) / len(found) < TARGET, f"{len(with_any)} of {len(found)}: {with_any}"


def test_the_count_sees_any_wherever_a_signature_names_it() -> None:
    source = (
        "from typing import Any\n"
        "def plain(x: int) -> str: ...\n"
        "def param(x: dict[str, Any]) -> None: ...\n"
        "def result() -> 'list[Any]': ...\n"
        "async def star(*args: Any) -> None: ...\n"
        "def _private(x: Any) -> Any: ...\n"
        "class Public:\n"
        "    def __init__(self, x: Any) -> None: ...\n"
        "    def _hidden(self) -> Any: ...\n"
        "class _Hidden:\n"
        "    def method(self) -> Any: ...\n"
    )
    found = list(_walk(ast.parse(source).body, "m"))
    assert found == [
        Signature("m", "plain", False),
        Signature("m", "param", True),
        Signature("m", "result", True),
        Signature("m", "star", True),
        Signature("m.Public", "__init__", True),
    ]
