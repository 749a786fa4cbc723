"""How many public signatures in ``ateam/`` carry ``Any``: ``python -m tests.any_count``.

A signature is a ``def`` a reader of the module may call: its name and every enclosing
class and module name have no leading underscore (dunder methods such as ``__init__``
count). It *carries* ``Any`` when any parameter or the return annotation names ``Any``
(``dict[str, Any]``, ``Any | None`` …). ``--list`` prints each one, by module.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ateam"
TARGET = 0.08
"""Issue 23: under 8 % of public signatures carry ``Any``."""


@dataclass(frozen=True)
class Signature:
    where: str
    name: str
    has_any: bool


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _names_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "Any":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "Any" in sub.value:
            return _names_any(ast.parse(sub.value, mode="eval").body)
    return False


def _carries_any(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    a = func.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
    return _names_any(func.returns) or any(_names_any(p.annotation) for p in params)


def _walk(body: list[ast.stmt], where: str) -> Iterator[Signature]:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _public(node.name):
            yield Signature(where, node.name, _carries_any(node))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from _walk(node.body, f"{where}.{node.name}")


def signatures(package: Path = PACKAGE) -> list[Signature]:
    found: list[Signature] = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if any(part.startswith("_") and part != "__init__" for part in parts):
            continue  # a private module: nothing in it is public
        module = ".".join(p for p in parts if p != "__init__")
        found.extend(_walk(ast.parse(path.read_text(encoding="utf-8")).body, module))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every signature with Any")
    args = parser.parse_args()
    found = signatures()
    with_any = [s for s in found if s.has_any]
    if args.list:
        for s in with_any:
            print(f"{s.where}.{s.name}")
    share = len(with_any) / len(found)
    print(
        f"public signatures carrying Any: {len(with_any)} of {len(found)} = {share:.1%}"
        f" (target < {TARGET:.0%})"
    )
    return 0 if share < TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
