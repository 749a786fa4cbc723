"""The redactor on a process's way to serving (issue 28 §2): no full regex until needed.

Until a process first meets a text that may hold a secret, short texts are checked for
the built-ins' triggers on CPython's engine (:func:`ateam.redact._start_triggers`), and
the full regex (8-12 ms to compile) is not built. Whatever the path, a text must come
out exactly as the full pass makes it.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys

import pytest

from ateam import redact
from ateam.redact import Redactor

from .test_redact import NEAR_MISSES, SAMPLES
from .test_redact_fast import mutated


def test_short_texts_come_out_alike_before_and_after_the_full_regex_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(7)
    texts = [mutated(sample, rng) for _, sample, _ in SAMPLES for _ in range(3)]
    texts += [*NEAR_MISSES, "idle", "agent demo/ada serving (fence 1, pid 4242)"]
    texts = [text for text in texts if len(text) < 512]
    assert len(texts) > 100
    redact._combined()  # the full pass's answers, with the regex built
    expected = [Redactor().redact(text) for text in texts]
    assert sum(a != b for a, b in zip(texts, expected, strict=True)) > 50  # secrets among them
    for text, wanted in zip(texts, expected, strict=True):
        monkeypatch.setattr(redact, "_built", None)  # as in a process that has not needed it
        assert Redactor().redact(text) == wanted, repr(text[:80])


def test_an_agent_start_compiles_no_full_regex_until_a_text_may_hold_a_secret() -> None:
    # What an agent redacts on its way to serving: its first log lines and events.
    program = """
import logging
from ateam import redact
from ateam.redact import Redactor
redactor = Redactor()
line = "agent %s serving (fence %d, pid %d)"
record = logging.LogRecord("a", 20, "f", 1, line, ("p/a", 1, 42), None)
redactor.logging_filter().filter(record)
redactor.redact_obj({"kind": "status", "state": "idle", "agent": "p/a", "model": "echo"})
print(redact._built is None, end=" ")
print(redactor.redact("PASSWORD=hunter2-long ok"), redact._built is None)
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["True", "PASSWORD=****", "ok", "False"]


def test_the_triggers_read_alike_on_cpython_whose_end_of_data_is_spelled_differently() -> None:
    # CPython spells the end of the data \Z where Hyperscan and RE2 write \z: the engine
    # rewrites the latter, which would be wrong after an escaped backslash.
    for pattern in (*redact._TRIGGERS_EXACT, *redact._TRIGGERS_FOLDED):
        assert re.search(rb"\\\\z", pattern) is None, pattern
