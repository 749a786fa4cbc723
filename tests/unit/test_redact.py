"""Secret redaction (SPEC §11): built-in patterns, redact.yaml, payloads, bytes, logs.

The sample secrets are assembled at run time so that the file itself holds nothing a
secret scanner would flag; they have the shape, length and alphabet of real ones.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import logging
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ateam.config import load_project
from ateam.config.schema import RedactPattern
from ateam.redact import (
    BUILTIN_PATTERNS,
    MASK,
    RedactLogFilter,
    Redactor,
    _may_hold_builtin,
    from_config,
)

pytestmark = pytest.mark.usefixtures("trigger_engine")  # each check engine in turn

REPO = Path(__file__).resolve().parents[2]


def b64url(data: dict[str, object]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


OPENAI = "sk-proj-" + "Ab3dEf6hIj9k_Lm-" * 10
OPENAI_LEGACY = "sk-" + "T3BlbkFJ" + "q8Rz2Lw5Xv7Np4Ks" * 2 + "a1B2c3D4e5F6g7H8"
ANTHROPIC = "sk-ant-api03-" + "Xy7_Qw2-Er5t" * 8 + "AA"
GITHUB_CLASSIC = "ghp_" + "a1B2c3D4e5F6" * 3
GITHUB_FINE = "github_pat_11" + "ABCDEFG0123456789" + "_" + "aZ09" * 15
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_TEMP_ID = "ASIA" + "Y34FZKBOKMUTVV7A"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
SLACK = "xoxb-" + "123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx"
GOOGLE = "AIza" + "SyB-3kX_9qLm2Np7Rt4Vw6Yz8Ac1De5Fg0H"
STRIPE_LIVE = "sk_live_" + "51H8xYzAbCdEfGhIjKlMnOpQr"
STRIPE_RESTRICTED = "rk_live_" + "51H8xYzAbCdEfGhIjKlMnOpQr"
JWT = (
    b64url({"alg": "HS256", "typ": "JWT"})
    + "."
    + b64url({"sub": "1234567890", "name": "Ada", "iat": 1516239022})
    + "."
    + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM_BODY = "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2+K1\nvXr4f0tq8Rk1Zx9Q5hL2mN7pJ3s==\n"
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + PEM_BODY + "-----END RSA PRIVATE KEY-----"
ARMOUR = "-----BEGIN RSA PRIVATE KEY-----\n****\n-----END RSA PRIVATE KEY-----"

# (built-in pattern, text, expected): every built-in appears at least once.
SAMPLES: list[tuple[str, str, str]] = [
    ("openai_key", f"OPENAI key: {OPENAI} (project)", "OPENAI key: **** (project)"),
    ("openai_key", f"export KEY={OPENAI_LEGACY}\n", "export KEY=****\n"),
    ("openai_key", f"task-{OPENAI_LEGACY}", "task-****"),
    ("anthropic_key", f'{{"key": "{ANTHROPIC}"}}', '{"key": "****"}'),
    (
        "github_token",
        f"git push https://{GITHUB_CLASSIC}@github.com/o/r",
        "git push https://****@github.com/o/r",
    ),
    ("github_token", f"GH={GITHUB_FINE};", "GH=****;"),
    ("aws_access_key_id", f"id {AWS_KEY_ID} and {AWS_TEMP_ID}.", "id **** and ****."),
    (
        "aws_secret_access_key",
        f"[default]\naws_secret_access_key = {AWS_SECRET}\n",
        "[default]\naws_secret_access_key = ****\n",
    ),
    (
        "aws_secret_access_key",
        f'{{"AccessKeyId": "{AWS_TEMP_ID}", "SecretAccessKey": "{AWS_SECRET}"}}',
        '{"AccessKeyId": "****", "SecretAccessKey": "****"}',
    ),
    ("slack_token", f"SLACK_BOT={SLACK} ok", "SLACK_BOT=**** ok"),
    ("google_api_key", f"maps?key={GOOGLE}&v=3", "maps?key=****&v=3"),
    ("stripe_key", f"{STRIPE_LIVE} {STRIPE_RESTRICTED}", "**** ****"),
    ("jwt", f"cookie session={JWT}; Path=/", "cookie session=****; Path=/"),
    ("pem_private_key", f"key:\n{PEM}\nnext line", f"key:\n{ARMOUR}\nnext line"),
    (
        "authorization_header",
        "curl -H 'Authorization: Bearer abc123.def-456' https://api.example.com",
        "curl -H 'Authorization: Bearer ****' https://api.example.com",
    ),
    ("authorization_header", "authorization: Basic dXNlcjpwYXNz", "authorization: Basic ****"),
    ("authorization_header", "{'Authorization': 'tok-9f8e7d'}", "{'Authorization': '****'}"),
    (
        "bearer_token",
        "sending Bearer 4f9c2b7e1d8a6f3c0b5e9d2a now",
        "sending Bearer **** now",
    ),
    ("url_password", "redis://user:pw@host:6379/0", "redis://user:****@host:6379/0"),
    (
        "url_password",
        "REDIS_URL=rediss://:s3cr3t@cache:6380",
        "REDIS_URL=rediss://:****@cache:6380",
    ),
    ("url_password", "postgres://app:p@ss@db/app", "postgres://app:****@db/app"),
    ("token_assignment", "GITHUB_TOKEN=ghx7Yq2Lm9 make", "GITHUB_TOKEN=**** make"),
    (
        "token_assignment",
        "https://h/cb?access_token=ab12cd&state=x",
        "https://h/cb?access_token=****&state=x",
    ),
    ("api_key_assignment", '{"api_key": "value-1", "n": 1}', '{"api_key": "****", "n": 1}'),
    ("api_key_assignment", "X-Api-Key: 7Fh2kLq9", "X-Api-Key: ****"),
    ("api_key_assignment", "--apikey=Zq81x ", "--apikey=**** "),
    ("secret_assignment", "SECRET_KEY = 'django-insecure-x1'", "SECRET_KEY = '****'"),
    ("secret_assignment", "client_secret: Gh7Kp2  # prod\n", "client_secret: ****  # prod\n"),
    ("password_assignment", "DB_PASSWORD=hunter2 ./run", "DB_PASSWORD=**** ./run"),
    ("password_assignment", "password: correct-horse\nuser: bob", "password: ****\nuser: bob"),
    ("password_assignment", "os.environ['PASSWD'] = \"x9\"", "os.environ['PASSWD'] = \"****\""),
    # A block cut off by truncation is redacted to the end of the text, so it comes last.
    (
        "pem_private_key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9u\nAAAA",
        "-----BEGIN OPENSSH PRIVATE KEY-----\n****",
    ),
]

# Text that looks a little like a secret and must come through untouched.
NEAR_MISSES = [
    "Let me sketch the design; the skeleton is in sk/.",
    "sk-abc is too short to be a key",
    "pip install sk-learn-pipeline-refactoring-notes-v",
    "desk-" + "a1" * 20,
    "request 550e8400-e29b-41d4-a716-446655440000 done",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b (HEAD -> main)",
    "see https://example.com:8080/path?q=a@b and http://[::1]:8080/",
    "ssh://git@github.com:22/org/repo.git git@github.com:org/repo.git",
    "mailto:someone@example.com",
    "ghp_short and github_pat_tiny",
    "AKIA1234 AKIAIOSFODNN7EXAMPLEX",
    "xoxb-short",
    "eyJhbGciOi alone",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTAN\n-----END CERTIFICATE-----",
    "Bearer authentication is required; pass a Bearer token",
    "max_tokens=4096 tokens_in=12 tokenizer=bpe",
    '"input_tokens": 123, "token_count": 7',
    "token_count: 12",
    "self.token = token\ntoken = self.token\n",
    "client = Client(api_key=api_key, timeout=5)",
    "def connect(password: str) -> None:",
    "password = getpass.getpass()",
    "secret=Fernet(key)",
    "secret = os.environ['SECRET']",
    "PWD=/home/user password=None api_key=null",
    'token="$GITHUB_TOKEN" secret="{{ secrets.X }}"',
    "secretary: Alice",
    "if token == expected:",
    "Authorization: Bearer ****",
]


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


def test_every_builtin_has_a_sample() -> None:
    assert {name for name, _, _ in SAMPLES} == {p.name for p in BUILTIN_PATTERNS}


@pytest.mark.parametrize(("name", "text", "expected"), SAMPLES)
def test_builtin_redacts_sample(redactor: Redactor, name: str, text: str, expected: str) -> None:
    assert redactor.redact(text) == expected


@pytest.mark.parametrize(("name", "text", "expected"), SAMPLES)
def test_builtin_pattern_stands_alone(name: str, text: str, expected: str) -> None:
    """The published regex of each built-in finds its sample on its own."""
    (pattern,) = [p for p in BUILTIN_PATTERNS if p.name == name]
    assert pattern.compile().search(text)


@pytest.mark.parametrize(("name", "text", "expected"), SAMPLES)
def test_builtin_sample_is_found_inside_long_text(
    redactor: Redactor, name: str, text: str, expected: str
) -> None:
    """Long texts go through a substring pre-check first: it must not skip any built-in."""
    filler = "[ 42%] Building CXX object src/net/client_pool.cpp.o\n" * 40
    assert redactor.redact(filler + text) == filler + expected
    # And the pre-check alone says yes to each match with the context its lookbehind needs.
    (pattern,) = [p for p in BUILTIN_PATTERNS if p.name == name]
    for match in pattern.compile().finditer(text):
        seen = text[max(0, match.start() - 12) : match.end()]
        assert _may_hold_builtin(seen + " " * 600), (name, seen)


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_left_alone(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == text


@pytest.mark.parametrize("text", [s[1] for s in SAMPLES] + NEAR_MISSES)
def test_redaction_is_idempotent(redactor: Redactor, text: str) -> None:
    once = redactor.redact(text)
    assert redactor.redact(once) == once


def test_many_secrets_in_one_text(redactor: Redactor) -> None:
    text = "\n".join(sample for _, sample, _ in SAMPLES)
    expected = "\n".join(result for _, _, result in SAMPLES)

    assert redactor.redact(text) == expected
    for secret in (OPENAI, ANTHROPIC, GITHUB_FINE, AWS_SECRET, SLACK, GOOGLE, JWT, PEM_BODY):
        assert secret not in redactor.redact(text)


def test_secret_inside_a_kept_part_is_redacted(redactor: Redactor) -> None:
    """A URL's user name is kept, unless it is itself a secret."""
    assert redactor.redact(f"https://{AWS_KEY_ID}:pw@s3.local/b") == "https://****:****@s3.local/b"


# --- redact.yaml ----------------------------------------------------------------------


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".ateam").mkdir(parents=True)
    (root / ".ateam" / "redact.yaml").write_text(
        textwrap.dedent(
            r"""
            patterns:
              - name: corp-id
                regex: 'corp-[0-9a-f]{12}'
              - name: internal
                regex: '(?i)internal_[a-z]{6}\b'
              - name: ticket
                regex: '(?P<t>TKT)-[0-9]{5}'
              - name: quoted-hush
                regex: '([''"])hush-[a-z]+\1'
            """
        ),
        encoding="utf-8",
    )
    return root


def test_extra_patterns_from_redact_yaml(project_dir: Path) -> None:
    project = load_project(project_dir)
    text = (
        "id corp-0123456789ab, INTERNAL_abcdef and internal_ABCDEF; "
        '"hush-deep" \'hush-x" TKT-12345 '
        f"{OPENAI}"
    )
    expected = "id ****, **** and ****; **** 'hush-x\" **** ****"

    assert [p.name for p in project.redact_patterns] == [
        "corp-id",
        "internal",
        "ticket",
        "quoted-hush",
    ]
    assert Redactor.from_config(project).redact(text) == expected
    assert from_config(project).redact(text) == expected
    # Without them only the built-in pattern applies.
    assert Redactor().redact(text) == text.replace(OPENAI, MASK)


def test_extra_pattern_matching_empty_text_inserts_nothing() -> None:
    redactor = Redactor([RedactPattern(name="xs", regex="x*")])

    assert redactor.redact("abc xx d") == "abc **** d"


def test_example_redact_yaml_is_used(tmp_path: Path) -> None:
    """The shipped example's patterns reach the redactor, beside the built-ins."""
    root = tmp_path / "example"
    (root / ".ateam").mkdir(parents=True)
    example = REPO / ".ateam.example" / "redact.yaml"
    (root / ".ateam" / "redact.yaml").write_bytes(example.read_bytes())

    project = load_project(root)
    redactor = from_config(project)

    assert project.redact_patterns
    assert redactor.extra == project.redact_patterns
    assert redactor.redact(f"k={OPENAI} itk_{'aB3' * 10}xy") == "k=**** ****"


# --- payloads and bytes ---------------------------------------------------------------


def test_redact_obj_walks_nested_payloads(redactor: Redactor) -> None:
    payload = {
        "type": "tool.output",
        "task_id": "t-1",
        "data": f"export OPENAI_API_KEY={OPENAI}\n",
        "usage": {"input_tokens": 12, "max_tokens": 4096, "cost": 0.5, "cached": None},
        "turns": [
            {"role": "tool", "content": ["ok", f"Authorization: Bearer {JWT}"]},
            ("tuple", "redis://:pw@h/0", True),
        ],
        "env": {"GITHUB_TOKEN": "plainword", "PATH": "/usr/bin", "password": ""},
        "raw": f"key {ANTHROPIC}".encode() + b"\xff",
        OPENAI: "keys are left alone",
    }
    before = copy.deepcopy(payload)

    result = redactor.redact_obj(payload)

    assert result == {
        "type": "tool.output",
        "task_id": "t-1",
        "data": "export OPENAI_API_KEY=****\n",
        "usage": {"input_tokens": 12, "max_tokens": 4096, "cost": 0.5, "cached": None},
        "turns": [
            {"role": "tool", "content": ["ok", "Authorization: Bearer ****"]},
            ("tuple", "redis://:****@h/0", True),
        ],
        "env": {"GITHUB_TOKEN": "****", "PATH": "/usr/bin", "password": ""},
        "raw": b"key ****\xff",
        OPENAI: "keys are left alone",
    }
    assert payload == before, "the input must not be modified"


def test_redact_bytes_survives_invalid_utf8(redactor: Redactor) -> None:
    data = b"\xff\xfe\x00bin \x80" + OPENAI.encode() + b" \xc3( caf\xc3\xa9 " + SLACK.encode()
    data += b"\ntail \xe2\x82"

    assert (
        redactor.redact_bytes(data)
        == b"\xff\xfe\x00bin \x80**** \xc3( caf\xc3\xa9 ****\ntail \xe2\x82"
    )


def test_redact_bytes_round_trips_binary(redactor: Redactor) -> None:
    data = bytes(range(256)) * 8 + "naïve ☃".encode()

    assert redactor.redact_bytes(data) == data


# --- logging --------------------------------------------------------------------------


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    handler.addFilter(Redactor().logging_filter())
    log = logging.getLogger(f"ateam.test_redact.{uuid.uuid4().hex}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.addHandler(handler)
    try:
        yield log, stream
    finally:
        log.removeHandler(handler)
        handler.close()


def test_logging_filter_redacts_messages_and_args(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    log, stream = captured

    log.info("connecting to %s", "redis://agent:pw@bus:6379/0")
    log.info("key %(key)s for %(who)s", {"key": OPENAI, "who": "bob"})
    log.getChild("provider").warning("retrying with api_key=%s", "Zq81xYy2")
    log.debug("literal " + GITHUB_CLASSIC)

    lines = stream.getvalue().splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == [
        "connecting to redis://agent:****@bus:6379/0",
        "key **** for bob",
        "retrying with api_key=****",
        "literal ****",
    ]


def test_logging_filter_redacts_tracebacks(captured: tuple[logging.Logger, io.StringIO]) -> None:
    log, stream = captured

    try:
        raise RuntimeError(f"provider refused {ANTHROPIC}")
    except RuntimeError:
        log.exception("call failed")

    out = stream.getvalue()
    assert "RuntimeError: provider refused ****" in out
    assert ANTHROPIC not in out


def test_logging_filter_leaves_bad_records_to_logging() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%d items", ("many",), None)

    assert RedactLogFilter(Redactor()).filter(record) is True
    assert record.args == ("many",)
    assert isinstance(Redactor().logging_filter(), logging.Filter)


# --- cost -----------------------------------------------------------------------------


def test_redaction_is_idempotent_on_source_code(redactor: Redactor) -> None:
    """Redacting already-redacted text changes nothing more.

    Speed is measured by ``benchmarks/bench_redact.py``, not asserted here.
    """
    source = "".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "ateam").rglob("*.py")))
    assert redactor.redact(redactor.redact(source)) == redactor.redact(source)


@pytest.mark.parametrize(
    "text",
    [
        "token=" * 10_000 + "(",
        "api_key-" * 8_000,
        'password="' * 6_000,
        "://a:" + "b" * 60_000,
        "Bearer " * 8_000,
        "sk-" + "a1" * 30_000 + "!",
        "k" * 60_000,
    ],
    ids=["assign", "name", "quote", "url", "bearer", "long-key", "leads"],
)
def test_pathological_text_completes(redactor: Redactor, text: str) -> None:
    # Catastrophic backtracking would hang here until the per-test timeout fails it.
    out = redactor.redact(text)
    assert isinstance(out, str) and len(out) <= len(text) + 4 * 1000


def test_scrub_counts_every_secret_it_replaces() -> None:
    text = "sk-proj-" + "Ab1" * 14 + " and AKIA" + "Z7Q2W9E4R1T6Y3U8" + " and password=Hunter22x"
    scrubbed = Redactor().scrub(text)
    assert scrubbed.replaced == 3
    assert scrubbed.text == "**** and **** and password=****"
    assert scrubbed.notice() is not None and scrubbed.notice().startswith("3 secrets replaced")
    assert Redactor().scrub("nothing here").notice() is None


def test_literals_mask_exact_values_and_ignore_short_ones() -> None:
    redactor = Redactor().with_literals(["plain-value-123456", "plain-value-123456-longer", "yes"])
    assert redactor.redact("a plain-value-123456-longer b") == "a **** b"
    assert redactor.redact("got plain-value-123456.") == "got ****."
    assert redactor.redact("yes it is") == "yes it is"
