"""Package faces that import a submodule only when one of its names is first used.

A package ``__init__`` that imports every submodule to re-export their names makes each
user of one name pay for all of them: ``ateam ps`` needs the registry's models, not the
KB or the redactor. :func:`exports` builds a module ``__getattr__`` (PEP 562) from a
table of name -> submodule, so ``from ateam.client import Team`` imports
``ateam.client.team`` and what it needs, and nothing else::

    __getattr__, __dir__ = exports(__name__, {"ateam.client.team": ("Team", ...), ...})

The package keeps the same imports under ``if TYPE_CHECKING:`` for type checkers, and
its ``__all__``; a unit test holds the table, the typed imports and ``__all__`` equal.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def exports(
    package: str, table: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` for ``package``: ``table`` maps each
    module to the names the package takes from it."""
    where = {name: module for module, names in table.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        # Kept on the package, so the next lookup is a plain attribute read.
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
