"""Whether any of many patterns occurs in some bytes, in one pass: the secret check's engine.

A tool's output is checked for the triggers of the redactor's rules as it streams (see
:mod:`ateam.redact`), every byte of it, on the agent's busiest path. Two engines take
the same patterns (bytes; alternation, classes, repeats and ``\\z``; no look-arounds,
no captures), each in one pass over the data whatever it holds:

* **Hyperscan** (the ``hyperscan`` wheel, Linux x86_64): SIMD literal search first,
  automata only where a literal was seen, 12 µs per 64 KiB of text in which every
  trigger's letters are common;
* **RE2** (``google-re2``, every platform): one DFA over the bytes, 85 µs per 64 KiB.

(CPython's own engine took eleven passes, one per trigger, 290 µs.) :func:`scanner`
picks Hyperscan where it loads and RE2 otherwise. A third engine, CPython's own ``re``
over one alternation, is slow per byte but built in about 1 ms, where Hyperscan's
database takes some 40 ms: the redactor checks short texts with it until its full regex
exists, so a process's start (its log lines, an agent's first events) pays for neither.
Case-insensitive patterns fold ASCII letters only, in all three: a pattern spells out the
other bytes that may stand for one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Protocol

__all__ = ["Engine", "Scanner", "scanner"]

log = logging.getLogger(__name__)


class Engine(StrEnum):
    HYPERSCAN = "hyperscan"
    RE2 = "re2"
    CPYTHON = "cpython"


class Scanner(Protocol):
    engine: Engine

    def found(self, data: bytes) -> bool:
        """Whether any pattern occurs in ``data``."""
        ...


class _Hyperscan:
    engine = Engine.HYPERSCAN

    def __init__(self, exact: Sequence[bytes], caseless: Sequence[bytes]) -> None:
        import hyperscan

        self._hs: Any = hyperscan
        patterns = [*exact, *caseless]
        single = hyperscan.HS_FLAG_SINGLEMATCH
        self._db: Any = hyperscan.Database()
        self._db.compile(
            expressions=list(patterns),
            ids=list(range(len(patterns))),
            elements=len(patterns),
            flags=[single] * len(exact) + [single | hyperscan.HS_FLAG_CASELESS] * len(caseless),
        )
        # A scan needs scratch space of its own: one per thread, since a log record is
        # redacted in whichever thread writes it.
        self._local = threading.local()

    def found(self, data: bytes) -> bool:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._hs.Scratch(self._db)
        try:
            self._db.scan(data, match_event_handler=_first, scratch=scratch)
        except self._hs.ScanTerminated:
            return True
        return False


def _first(*_match: Any) -> bool:
    return True  # stop at the first match: whether, not where


class _Re2:
    engine = Engine.RE2

    def __init__(self, exact: Sequence[bytes], caseless: Sequence[bytes]) -> None:
        import re2

        options = re2.Options()
        options.never_capture = True
        # Byte for byte: a pattern's escapes name bytes, as they do for Hyperscan.
        options.encoding = re2.Options.Encoding.LATIN1
        pattern = b"|".join([*exact, b"(?i:" + b"|".join(caseless) + b")"])
        self._regex: Any = re2.compile(pattern, options)

    def found(self, data: bytes) -> bool:
        return self._regex.search(data) is not None


class _CPython:
    engine = Engine.CPYTHON

    def __init__(self, exact: Sequence[bytes], caseless: Sequence[bytes]) -> None:
        import re

        pattern = b"|".join([*exact, b"(?i:" + b"|".join(caseless) + b")"])
        # A bytes pattern folds ASCII letters only, as the others do; CPython spells
        # the end of the data \Z (no pattern here escapes a backslash before a z).
        self._regex = re.compile(pattern.replace(rb"\z", rb"\Z"))

    def found(self, data: bytes) -> bool:
        return self._regex.search(data) is not None


_ENGINES: dict[Engine, type[_Hyperscan] | type[_Re2] | type[_CPython]] = {
    Engine.HYPERSCAN: _Hyperscan,
    Engine.RE2: _Re2,
    Engine.CPYTHON: _CPython,
}


def scanner(
    exact: Sequence[bytes], caseless: Sequence[bytes], engine: Engine | None = None
) -> Scanner:
    """A scanner of ``exact`` patterns and ``caseless`` ones (ASCII letters folded).

    ``engine``: that one (an ``ImportError`` if it cannot load), else the fastest that
    loads here (never CPython's: it is slow per byte).
    """
    if engine is not None:
        return _ENGINES[engine](exact, caseless)
    try:
        return _Hyperscan(exact, caseless)
    except ImportError:
        pass  # no wheel for this platform
    except Exception as exc:  # hyperscan.error: a CPU without the instructions it needs
        log.info("secret check on RE2: Hyperscan cannot run here (%s)", exc)
    return _Re2(exact, caseless)
