"""The redactor's fast paths (issue 14): the trigger check, bytes left undecoded, the memo.

Each fast path must answer exactly as the full pass would: the trigger check may say
"maybe" to clean text, never "no" to a secret.
"""

from __future__ import annotations

import os
import platform
import random
import sys

import pytest

from ateam import redact
from ateam._scan import Engine, scanner
from ateam.config.schema import RedactPattern
from ateam.redact import (
    _BUILTIN_RE,
    _MEMO_SIZE,
    MASK,
    Redactor,
    _may_hold_builtin,
    may_hold_secret,
)

from .test_redact import NEAR_MISSES, OPENAI, SAMPLES

pytestmark = pytest.mark.usefixtures("trigger_engine")  # each check engine in turn

FILLER = "[ 42%] Building CXX object src/net/client_pool.cpp.o\n" * 12
"""Build-log lines, over 512 characters: long enough for the trigger check to run."""
ODD_LETTERS = {"s": "\u017f", "i": "\u0131", "I": "\u0130", "k": "\u212a", "K": "\u212a"}
"""Letters a case-insensitive regex takes for ASCII ones that lower() leaves alone."""


def slow_redact_bytes(redactor: Redactor, data: bytes) -> bytes:
    """What ``redact_bytes`` did before it had a fast path: decode, redact, encode."""
    return redactor.redact(data.decode("utf-8", "surrogateescape")).encode(
        "utf-8", "surrogateescape"
    )


def mutated(text: str, rng: random.Random) -> str:
    """``text`` with letters swapped in case and a few odd look-alike letters."""
    out = []
    for char in text:
        roll = rng.random()
        if roll < 0.15 and char.isalpha():
            char = char.swapcase()
        elif roll < 0.22 and char in ODD_LETTERS:
            char = ODD_LETTERS[char]
        out.append(char)
    return "".join(out)


@pytest.mark.parametrize("seed", range(4))
def test_the_trigger_check_says_yes_wherever_a_builtin_matches(seed: int) -> None:
    rng = random.Random(seed)
    matched = 0
    for _ in range(60):
        for _, sample, _ in SAMPLES:
            text = rng.choice(["", "q", "x" * 5, "\udcff"]) + mutated(sample, rng) + " " * 600
            if _BUILTIN_RE.search(text) is None:
                continue  # the mutation broke the secret's shape
            matched += 1
            assert _may_hold_builtin(text), repr(text[:80])
            assert may_hold_secret(text.encode("utf-8", "surrogateescape")), repr(text[:80])
    assert matched > 1000  # the mutations leave most secrets recognisable


@pytest.mark.parametrize(
    "text",
    [
        "\u017fecret_key = 'django-insecure-x1'",
        "PA\u017f\u017fWORD=hunter2 ./run",
        "AP\u0130_KEY=7Fh2kLq9 ok",
        "ap\u0131-key: 7Fh2kLq9\n",
        "Author\u0131zation: Basic dXNlcjpwYXNz",
    ],
)
def test_odd_letters_cannot_slip_a_secret_past_the_check(text: str) -> None:
    redactor = Redactor()
    assert _BUILTIN_RE.search(text) is not None  # the full regex takes them for secrets
    long_text = FILLER + text
    assert MASK in redactor.redact(long_text)
    assert MASK.encode() in redactor.redact_bytes(long_text.encode())


def test_clean_bytes_come_back_as_they_are_without_being_decoded() -> None:
    redactor = Redactor()
    clean = FILLER.encode()
    assert redactor.redact_bytes(clean) is clean
    binary = bytes(range(0x80, 0x100)) * 40  # no ASCII at all: no trigger can be in it
    assert redactor.redact_bytes(binary) is binary


@pytest.mark.parametrize("seed", range(3))
def test_bytes_redact_exactly_as_decoded_text_does(seed: int) -> None:
    rng = random.Random(seed)
    redactor = Redactor()
    pieces = [s.encode() for _, s, _ in SAMPLES] + [n.encode() for n in NEAR_MISSES]
    for _ in range(40):
        data = b"".join(
            rng.choice([os.urandom(rng.randint(0, 300)), rng.choice(pieces), FILLER.encode()])
            for _ in range(rng.randint(1, 8))
        )
        assert redactor.redact_bytes(data) == slow_redact_bytes(redactor, data)


def test_literal_values_are_masked_in_bytes_that_hold_no_trigger() -> None:
    plain, undecodable = "plain-value-1234", "p\udcffss-value-5678"  # as os.environ has it
    redactor = Redactor(literals=[plain, undecodable])
    data = FILLER.encode() + b"using plain-value-1234 and p\xffss-value-5678\n"
    assert redactor.redact_bytes(data) == FILLER.encode() + b"using **** and ****\n"
    # A value no decoded bytes can hold turns the fast path off, and breaks nothing.
    odd = Redactor(literals=["\ud800-not-encodable"])
    assert odd.redact_bytes(FILLER.encode()) == FILLER.encode()


def test_extra_patterns_apply_to_bytes_that_hold_no_builtin_trigger() -> None:
    redactor = Redactor([RedactPattern(name="corp", regex=r"CORP-[0-9]{6}")])
    data = FILLER.encode() + b"ticket CORP-123456\n"
    assert redactor.redact_bytes(data) == FILLER.encode() + b"ticket ****\n"


def test_short_clean_texts_are_remembered_and_secrets_never() -> None:
    redactor = Redactor()
    assert redactor.redact("call_abc123") == "call_abc123"
    assert "call_abc123" in redactor._clean
    assert redactor.redact("call_abc123") == "call_abc123"  # from the memo
    secret = f"key {OPENAI}"
    assert redactor.redact(secret) == "key ****"
    assert redactor.redact(secret) == "key ****"
    assert secret not in redactor._clean
    for n in range(_MEMO_SIZE + 10):
        redactor.redact(f"id-{n}")
    assert len(redactor._clean) <= _MEMO_SIZE


def test_payload_keys_still_mask_their_values_whole() -> None:
    redactor = Redactor()
    payload = {"api_key": "plain", "call_id": "c1", "text": FILLER + f"k={OPENAI}"}
    assert redactor.redact_obj(payload) == {
        "api_key": MASK,
        "call_id": "c1",
        "text": FILLER + "k=****",
    }


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"password: ", True),
        (b"curl -H 'Authorization: Bearer ", True),
        (b"export OPENAI_API_KEY=sk-", True),
        (b"-----BEGIN RSA PRIVATE KEY-----\n", True),
        (FILLER.encode(), False),
        (bytes(range(0x80, 0x100)), False),
    ],
)
def test_may_hold_secret_names_the_pieces_a_framer_must_keep(data: bytes, expected: bool) -> None:
    assert may_hold_secret(data) is expected


def test_the_check_runs_on_hyperscan_where_its_wheel_installs() -> None:
    # pyproject.toml installs Hyperscan on Linux x86_64; RE2 is the engine elsewhere.
    built = scanner(redact._TRIGGERS_EXACT, redact._TRIGGERS_FOLDED)
    wheel = sys.platform.startswith("linux") and platform.machine() == "x86_64"
    assert built.engine is (Engine.HYPERSCAN if wheel else Engine.RE2)
    assert built.found(b"export OPENAI_API_KEY=sk-") and not built.found(FILLER.encode())


def test_without_hyperscan_the_check_runs_on_re2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hyperscan", None)  # as on a platform with no wheel
    built = scanner(redact._TRIGGERS_EXACT, redact._TRIGGERS_FOLDED)
    assert built.engine is Engine.RE2
    assert built.found(b"export OPENAI_API_KEY=sk-") and not built.found(FILLER.encode())


def test_group_names_read_off_the_text_are_the_compiled_ones() -> None:
    # _combined() reads each built-in's group names from its regex's text instead of
    # compiling it alone: the two must agree, in order, for every built-in and lead.
    import re

    from ateam.redact import _BUILTINS, _GROUP_NAME

    for builtin in _BUILTINS:
        for copy, _ in enumerate(builtin.lead):
            rest = builtin.rest.replace("(?P<", f"(?P<_b0_{copy}_")
            assert _GROUP_NAME.findall(rest) == list(re.compile(rest).groupindex), builtin.name
