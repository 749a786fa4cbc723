"""Secret redaction for events, logs and history (SPEC §11).

One module, over the usual size on purpose: the built-in patterns, the triggers every
match of them holds and the fast paths built on those triggers must agree rule by rule,
and are read and changed together.

A :class:`Redactor` replaces secrets with ``****`` using built-in patterns for common
secret formats (API keys and tokens, private keys, credentials in URLs, headers and
``KEY=value`` assignments; see :data:`BUILTIN_PATTERNS`) plus the extra patterns of
``redact.yaml``::

    redactor = from_config(load_project())
    redactor.redact("OPENAI_API_KEY=sk-proj-...")       # 'OPENAI_API_KEY=****'
    redactor.redact("redis://user:pw@host:6379/0")      # 'redis://user:****@host:6379/0'

Where a secret has a readable prefix (``Bearer ``, ``password=``, a URL's user name, a
PEM block's armour lines), only the secret part is replaced.

Cost:
    The built-in patterns are compiled once per process into **one** regex, so
    redacting is a single left-to-right pass, linear in the length of the text. Its
    branches each start with a rarer literal of their secret (``J`` of ``eyJ``, ``k`` of
    ``sk-``), so CPython's engine skips with a C loop to where a secret could be: about
    70-95 MB/s over source code, logs and listings, about 1 MB/s in the worst case
    (text packed with ``token=``). Texts of 512 characters or more are first checked
    for the triggers every built-in match holds (:func:`may_hold_secret`), all of them
    in one pass (:mod:`ateam._scan`: Hyperscan, about 5 GB/s, or RE2, about 0.75 GB/s);
    most tool output has none and skips the regex, and :meth:`Redactor.redact_bytes`
    then returns the bytes without decoding them. Until a process first meets a text
    that may hold a secret, short texts get that check too, on CPython's engine: the
    full regex (8-12 ms to compile) is not built on an agent's way to serving, whose
    texts are short and clean. ``redact.yaml`` patterns add a pass.

Where to apply it:
    Redaction works on whole texts; apply it to *coalesced* ``tool.output`` and
    ``token`` frames (SPEC §4.5), never to raw reads: the framer
    (:class:`~ateam.bus.coalesce.Coalescer`) keeps a word together for up to a second,
    and an unfinished line naming a secret or holding the start of one and an
    unterminated PEM block for up to 10 s (then masks them), so a secret split across
    reads is redacted whole. Redact bytes *before* base64-encoding
    binary output; run :meth:`Redactor.redact_obj` over event payloads and history
    turns before they are written; attach :meth:`Redactor.logging_filter` to the log
    handlers. History holds each tool result as one text.

False positives are preferred to leaks, but the ``name=value`` rules leave values that
look like code alone (``token = self.token``, ``api_key=api_key,``, ``password: str``,
``None``/``null``, plain numbers as in ``token_count: 12``), so that the source code an
agent reads is not mangled.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ateam._scan import Engine, Scanner, scanner

if TYPE_CHECKING:
    from ateam.config.loader import ProjectConfig
    from ateam.config.schema import RedactPattern

__all__ = [
    "BUILTIN_PATTERNS",
    "MASK",
    "SECRET_ADVICE",
    "RedactLogFilter",
    "Redactor",
    "Scrubbed",
    "from_config",
    "may_hold_secret",
]

MASK = "****"
"""What a secret is replaced with."""

SECRET_ADVICE = (
    "to give an agent a secret, name an environment variable in its agent.yaml "
    "(tools: {env_passthrough: [NAME]}) and refer to $NAME"
)
"""What a sender is told when text it sent held secrets (issue 10: secrets at the door)."""

_LITERAL_MIN = 8
"""Shorter environment values are not masked by value: ``1`` or ``yes`` would mangle
every text they occur in, and are no secret anyway."""

_MEMO_MAX_CHARS = 128
_MEMO_SIZE = 4096
"""A redactor remembers up to this many short texts it found clean (ids, names)."""

_VALUE_GROUP = "value"
"""Built-in patterns name the part to replace ``value``, ``value2``, ...; without such a
group the whole match is replaced."""


def _starts_token(width: int) -> str:
    """Assert that the ``width`` characters just matched do not continue a word.

    The character before them must not be a letter or digit, so ``task-sk-...`` and
    ``KEY_sk-...`` can start a key and ``desk-...`` cannot.
    """
    return rf"(?<![A-Za-z0-9].{{{width}}})"


# A secret-ish name contains token|secret|password|passwd|api_key|api-key|apikey, and
# the keyword is not followed by a letter: ``GITHUB_TOKEN``, ``token_secret``,
# ``X-Api-Key`` and ``password2`` are secret names, ``max_tokens``, ``tokenizer`` and
# ``secretary`` are not.
_SECRET_KEY = re.compile(
    r"[A-Za-z0-9_.-]*?(?i:token|secret|passw(?:or)?d|api[_-]?key)(?![A-Za-z])[A-Za-z0-9_.-]*"
)
"""Dict keys whose string values :meth:`Redactor.redact_obj` masks whole."""


@functools.lru_cache(maxsize=1024)
def _secret_key(key: str) -> bool:
    return _SECRET_KEY.fullmatch(key) is not None


# Characters of an unquoted value, and which of them may start one.
_BARE = r"""[^\s"'`,;&(){}\[\]<>]"""
_BARE_FIRST = r"""[^\s"'`,;&(){}\[\]<>$%=*]"""
# Unquoted values that are code or placeholders rather than secrets: a snake_case
# identifier without digits, a dotted name, a number, or a literal.
_NOT_A_SECRET = (
    r"(?!(?:[a-z_]++|[A-Za-z_][A-Za-z0-9_]*+(?:\.[A-Za-z_][A-Za-z0-9_]*+)++|[0-9]++(?:\.[0-9]++)?"
    r"|None|True|False|null|nil|true|false|undefined)" + f"(?!{_BARE}))"
)
# What follows a secret-ish keyword: the rest of the name, then '=' or ':' and a value.
# A quoted value is taken unless it is a placeholder ("$TOKEN", "{{ x }}", "<key>"); an
# unquoted one unless it looks like code (above), and after ':' only at the end of a
# line (YAML), so that ``token: str = ...`` and ``f(api_key: str)`` are left alone.
# Names and values are bounded and possessive (none of their characters could end them,
# so backtracking into them never helps), so that text packed with keywords
# ("token=token=...") stays linear to scan; a longer value is left to other patterns.
_ASSIGNED = (
    r"[A-Za-z0-9_.-]{0,64}+[\"']?\]?(?:[ \t]*+[:=][ \t]*+"
    r"(?:\"(?![$%{<])(?P<value>[^\"\r\n]{1,512}+)\"|'(?![$%{<])(?P<value2>[^'\r\n]{1,512}+)')"
    rf"|[ \t]*+=[ \t]*+{_NOT_A_SECRET}(?P<value3>{_BARE_FIRST}{_BARE}{{0,511}}+)(?=[\s\"',;&]|\Z)"
    rf"|[ \t]*+:[ \t]*+{_NOT_A_SECRET}(?P<value4>{_BARE_FIRST}{_BARE}{{0,511}}+)"
    r"(?=[ \t]*(?:#|\r?\n|\Z)))"
)


@dataclass(frozen=True)
class _Builtin:
    """A built-in pattern, written from one of its rarer characters (see :func:`_combined`).

    A match starts at a ``lead`` character; ``rest`` may look behind at it and at what
    precedes it, and ``back`` characters before the lead belong to the secret too (the
    ``s`` of ``sk-`` when the lead is its ``k``).
    """

    name: str
    lead: str
    """The characters a match starts with."""
    rest: str
    """The regex that follows the lead character."""
    back: int = 0
    """How many characters before the lead are part of the match."""

    @property
    def pattern(self) -> RedactPattern:
        """The pattern as one standalone regex."""
        # Imported here: the configuration's schema is pydantic and YAML, which a process
        # that only redacts (every verb) need not load.
        from ateam.config.schema import RedactPattern

        lead = "[" + "".join(re.escape(char) for char in self.lead) + "]"
        return RedactPattern(name=self.name, regex="." * self.back + lead + self.rest)


_BUILTINS: tuple[_Builtin, ...] = (
    # PEM private key blocks (PKCS#1/#8, EC, OpenSSH, encrypted, PGP); the armour lines
    # stay. An unterminated block (a truncated stream) is redacted to the end of the text.
    _Builtin(
        "pem_private_key",
        "B",
        r"(?<=-----B)EGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----\s*(?P<value>\S[\s\S]*?)\s*"
        r"(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    ),
    # Anthropic keys: sk-ant-api03-..., sk-ant-admin01-...
    _Builtin("anthropic_key", "k", r"(?<=sk)" + _starts_token(2) + r"-ant-[A-Za-z0-9_-]{20,}", 1),
    # OpenAI keys (sk-<48>, sk-proj-..., sk-svcacct-..., sk-admin-...) and the sk-...
    # keys of OpenAI-compatible services (OpenRouter, DeepSeek): at least 32 characters
    # with a digit, so ``sk-learn-pipeline-refactoring-notes`` is not one.
    _Builtin(
        "openai_key",
        "k",
        r"(?<=sk)" + _starts_token(2) + r"-(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{32,}",
        1,
    ),
    # Stripe secret (sk_) and restricted (rk_) keys, live and test.
    _Builtin(
        "stripe_key", "k", r"(?<=[sr]k)" + _starts_token(2) + r"_(?:live|test)_[0-9A-Za-z]{16,}", 1
    ),
    # GitHub tokens: classic personal (ghp_), OAuth (gho_), app server/user (ghs_/ghu_),
    # refresh (ghr_), fine-grained personal (github_pat_).
    _Builtin(
        "github_token",
        "g",
        _starts_token(1) + r"(?:h[opsur]_[A-Za-z0-9]{36,}|ithub_pat_[A-Za-z0-9_]{22,})",
    ),
    # AWS access key ids: long-term (AKIA) and temporary (ASIA), 20 characters.
    _Builtin("aws_access_key_id", "A", r"(?<![A-Za-z0-9].)[KS]IA[A-Z0-9]{16}(?![A-Za-z0-9])"),
    # Google API keys: AIza followed by 35 characters.
    _Builtin("google_api_key", "A", _starts_token(1) + r"Iza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
    # AWS secret access keys after their name: aws_secret_access_key = ... in
    # ~/.aws/credentials, AWS_SECRET_ACCESS_KEY=... in the environment, and
    # "SecretAccessKey": "..." in the CLI's JSON output.
    _Builtin(
        "aws_secret_access_key",
        "cC",
        r"(?i:(?<=sec)ret_?access_?key)[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?P<value>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
    ),
    # Slack tokens: bot (xoxb-), user (xoxp-), app-level (xoxa-), refresh (xoxr-).
    _Builtin("slack_token", "x", _starts_token(1) + r"ox[abpr]-[A-Za-z0-9-]{10,}"),
    # JSON Web Tokens: base64url header and payload (both JSON objects, hence "eyJ"),
    # then a signature, empty for alg "none".
    _Builtin(
        "jwt",
        "J",
        r"(?<=eyJ)" + _starts_token(3) + r"[A-Za-z0-9_-]{7,}"
        r"\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*",
        2,
    ),
    # Authorization headers (HTTP, curl -H, dict reprs): the credential after the
    # scheme (Bearer, Basic, Token, ...) or the whole value when there is no scheme.
    _Builtin(
        "authorization_header",
        "zZ",
        r"(?i:(?<=authoriz))" + _starts_token(8) + r"(?i:ation)[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?:(?i:bearer|basic|token|bot|digest|apikey)[ \t]+)?"
        r"(?!(?i:bearer|basic|token|bot|digest|apikey)(?![^\s\"',;]))(?P<value>[^\s\"',;]+)",
    ),
    # A bearer token anywhere else ("Bearer 4f9c..."), at least 16 characters with a
    # digit, so prose such as "Bearer authentication" is left alone.
    _Builtin(
        "bearer_token",
        "B",
        _starts_token(1) + r"earer[ \t]+"
        r"(?=[A-Za-z0-9._~+/-]*[0-9])(?P<value>[A-Za-z0-9._~+/-]{16,}=*)",
    ),
    # The password of a URL's userinfo: scheme://user:PASSWORD@host (the user may be
    # empty). A password containing a raw '@' is taken up to the last '@'.
    _Builtin("url_password", ":", r"//[^\s/?#@:\"'<>]*:(?P<value>[^\s/?#\"'<>]+)@"),
    # Assignments to a secret-ish name (see _ASSIGNED): KEY=value (env files, shell,
    # CLI flags, URL queries), "api_key": "value" (JSON, dict reprs), password: value
    # (YAML) and name = 'value' (code, INI). Only the value is replaced.
    _Builtin("token_assignment", "kK", r"(?i:(?<=tok)en)(?![A-Za-z])" + _ASSIGNED),
    _Builtin(
        "api_key_assignment",
        "kK",
        r"(?i:(?:(?<=api_k)|(?<=api-k)|(?<=apik))ey)(?![A-Za-z])" + _ASSIGNED,
    ),
    _Builtin("secret_assignment", "cC", r"(?i:(?<=sec)ret)(?![A-Za-z])" + _ASSIGNED),
    _Builtin("password_assignment", "wW", r"(?i:(?<=passw)(?:or)?d)(?![A-Za-z])" + _ASSIGNED),
)


@functools.cache
def _builtin_patterns() -> tuple[RedactPattern, ...]:
    return tuple(builtin.pattern for builtin in _BUILTINS)


if TYPE_CHECKING:
    BUILTIN_PATTERNS: tuple[RedactPattern, ...]
    """The built-in patterns, each as a standalone regex (made at first use)."""

_TRIGGER_REACH = 64
"""More bytes than any trigger of :func:`may_hold_secret` spans, its look-arounds included."""
_PREFILTER_FROM = 512
"""Shorter texts go straight to the regex: the check would cost more than it saves."""


# Stand-ins for ASCII letters that a case-insensitive regex may take and ASCII folding
# does not (UTF-8): U+017F for s, U+0130 and U+0131 for i, U+212A for k.
_K = rb"(?:k|\xe2\x84\xaa)"
_S = rb"(?:s|\xc5\xbf)"
_I = rb"(?:i|\xc4[\xb0\xb1])"

_TRIGGERS_EXACT: tuple[bytes, ...] = (
    rb"-----BEGIN",  # pem_private_key
    rb"://",  # url_password
    rb"Bearer",  # bearer_token (case matters in that rule)
    # The tails below ask for what every match has after its trigger (or the end, where
    # the rest may be on its way): without them, random bytes trip the check in one
    # 64 KiB read in ten, and each costs a full pass of the redactor.
    rb"eyJ(?:[A-Za-z0-9_-]{7}|[A-Za-z0-9_-]*\z)",  # jwt
    rb"x(?:o?\z|ox(?:[abpr]-|[abpr]?\z))",  # slack_token
    rb"A(?:[KS]IA|Iza)",  # AWS key ids, Google API keys
    rb"g(?:h[opsur]_|ithub_pat_)",  # GitHub tokens
)
"""Triggers whose case matters; with :data:`_TRIGGERS_FOLDED`, every built-in match
holds one of them (the tests check it rule by rule)."""

_TRIGGERS_FOLDED: tuple[bytes, ...] = (
    rb"to" + _K + rb"en",  # token_assignment
    # sk- (OpenAI, Anthropic), sk_ and rk_ (Stripe; their case matters in their rules:
    # a superset here): 16 and more key characters after the dash.
    rb"(?:" + _S + rb"|r)" + _K + rb"[-_](?:[a-z0-9_-]{16}|[a-z0-9_-]*\z)",
    rb"ap" + _I + rb"[-_]?" + _K + rb"ey",  # api_key_assignment
    rb"ecret",  # secret_assignment, aws_secret_access_key
    rb"author",  # authorization_header ("authoriz")
    rb"pa" + _S + _S + rb"w",  # password_assignment
)
"""Triggers in any case (ASCII letters folded; the other stand-ins spelled out)."""


@functools.cache
def _triggers() -> Scanner:
    """The trigger scanner, built at the first check (no cost to a process that never
    checks): Hyperscan where it loads, else RE2, one pass either way (:mod:`ateam._scan`)."""
    return scanner(_TRIGGERS_EXACT, _TRIGGERS_FOLDED)


@functools.cache
def _start_triggers() -> Scanner:
    """The trigger check of short texts while the full regex is not built yet.

    The full regex costs 8-12 ms to compile and Hyperscan's database some 40 ms; CPython's
    engine builds this check in about 1 ms. A process's first texts (an agent's log lines
    and first events, on its way to serving) are short and clean, and need neither: the
    full regex is compiled at the first text that may hold a secret.
    """
    return scanner(_TRIGGERS_EXACT, _TRIGGERS_FOLDED, Engine.CPYTHON)


def _may_hold_builtin(text: str) -> bool:
    """Whether ``text`` may hold a built-in secret (``False``: it holds none)."""
    return may_hold_secret(text.encode("utf-8", "surrogatepass"))


def may_hold_secret(data: bytes) -> bool:
    """Whether (UTF-8) ``data`` holds a trigger of a built-in rule (``token``, ``sk-``, …).

    ``False`` means no built-in secret is in it, nor begins in it with only its name or
    prefix so far; a streaming framer keeps a piece that says ``True`` with what follows.
    """
    # Invalid UTF-8 matches no letter of a trigger, as the decoded text's surrogates
    # match none in the full regex.
    return _triggers().found(data)


_GROUP_NAME = re.compile(r"(?<!\\)\(\?P<([A-Za-z_][A-Za-z0-9_]*)>")
"""A named group's opening in a built-in's regex (none of them escapes one)."""


@dataclass(frozen=True)
class _Group:
    """What the combined regex's top-level group of one built-in stands for."""

    back: int
    values: tuple[str, ...]


_built: tuple[re.Pattern[str], dict[str, _Group]] | None = None
""":func:`_combined`'s answer once it is compiled (``None`` before: see :func:`_start_triggers`)."""


def _combined() -> tuple[re.Pattern[str], dict[str, _Group]]:
    """The built-ins as one regex, compiled at the first call; see :func:`_compile_combined`."""
    global _built
    if _built is None:
        _built = _compile_combined()  # twice at worst, in two threads: the same answer
    return _built


def _compile_combined() -> tuple[re.Pattern[str], dict[str, _Group]]:
    """The built-ins as one regex, and what each of its top-level groups stands for.

    The regex is ``k(?:<built-ins led by k>)|A(?:...)|...``: an alternation whose
    branches all start with a literal character is one that CPython's engine scans for
    with a C loop over that character set, jumping straight to the branch of the
    character found. A built-in with several leads appears under each.
    """
    by_lead: dict[str, list[str]] = {}
    groups: dict[str, _Group] = {}
    for index, builtin in enumerate(_BUILTINS):
        for copy, char in enumerate(builtin.lead):
            name = f"_b{index}_{copy}"
            rest = builtin.rest.replace("(?P<", f"(?P<{name}_")
            by_lead.setdefault(char, []).append(f"(?P<{name}>{rest})")
            # The group names read off the pattern's text, in order: compiling each
            # built-in alone just to list them cost half of this function's time.
            values = _GROUP_NAME.findall(rest)
            groups[name] = _Group(
                builtin.back, tuple(v for v in values if v.startswith(f"{name}_{_VALUE_GROUP}"))
            )
    branches = (f"{re.escape(char)}(?:{'|'.join(alts)})" for char, alts in by_lead.items())
    return re.compile("|".join(branches)), groups


# Built at first use, not at import (about 20 ms): most verbs redact nothing.
_LAZY: dict[str, Callable[[], object]] = {
    "BUILTIN_PATTERNS": _builtin_patterns,
    "_BUILTIN_RE": lambda: _combined()[0],
    "_GROUPS": lambda: _combined()[1],
}


def __getattr__(name: str) -> object:
    made = _LAZY.get(name)
    if made is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return made()


# Numbered and named back-references, and named groups: they would break or clash once
# the pattern sits inside the combined alternation. A false alarm only costs a pass.
_UNSHAREABLE = re.compile(r"\\[1-9]|\\g<|\(\?P[<=]")
_GLOBAL_FLAGS = re.compile(r"\A\(\?([aiLmsux]+)\)")


def _scoped(regex: str) -> str:
    """Turn leading global flags (``(?i)key-...``) into a scoped group that can be nested."""
    flags = _GLOBAL_FLAGS.match(regex)
    if flags is None:
        return f"(?:{regex})"
    # A verbose pattern may end in a comment, which would swallow the closing paren.
    end = "\n)" if "x" in flags.group(1) else ")"
    return f"(?{flags.group(1)}:{regex[flags.end() :]}{end}"


def _mask_nonempty(match: re.Match[str]) -> str:
    return MASK if match.group() else ""


@dataclass(frozen=True)
class Scrubbed:
    """A text as it may enter ateam, and how many secrets were taken out of it."""

    text: str
    replaced: int

    def notice(self) -> str | None:
        """The one line a sender is told when secrets were replaced; ``None`` if none were."""
        if not self.replaced:
            return None
        what = "secret" if self.replaced == 1 else "secrets"
        return f"{self.replaced} {what} replaced by {MASK}; {SECRET_ADVICE}"


class Redactor:
    """Replaces secrets in text, bytes, nested payloads and log records with ``****``.

    The built-in patterns come first, in one pass; where several could match at a
    position the one listed first in :data:`BUILTIN_PATTERNS` wins. The extra patterns
    then run over the result as a second pass, in one alternation; an extra pattern
    replaces its whole match. Extras that use back-references or named groups cannot
    share that alternation and get a pass each.

    Instances are thread-safe and, but for a bounded memo of short texts found clean
    (ids and names recur in every event; no secret is kept), immutable; build one per
    process and share it.

    Args:
        extra: patterns from ``redact.yaml`` (``ProjectConfig.redact_patterns``).
        literals: exact secret values to mask wherever they occur, such as the values of
            the environment variables an agent passes through to its tools: nothing in
            their shape says they are secrets, so their value is what gets matched.
            Values shorter than 8 characters are ignored.
    """

    def __init__(
        self, extra: Iterable[RedactPattern] = (), *, literals: Iterable[str] = ()
    ) -> None:
        self.extra: tuple[RedactPattern, ...] = tuple(extra)
        """The extra patterns, in order."""
        values = sorted({v for v in literals if len(v) >= _LITERAL_MIN}, key=len, reverse=True)
        # Longest first, so a value that contains another is masked whole.
        self._literal_re = re.compile("|".join(map(re.escape, values))) if values else None
        self._literals = tuple(values)
        self._bytes_fast = not self.extra  # nothing cheap can be said of free regexes
        try:
            self._literal_bytes = tuple(v.encode("utf-8", "surrogateescape") for v in values)
        except UnicodeEncodeError:  # a lone surrogate no decoded bytes can hold
            self._literal_bytes, self._bytes_fast = (), False
        shared: list[str] = []
        separate: list[RedactPattern] = []
        for pattern in self.extra:
            if _UNSHAREABLE.search(pattern.regex):
                separate.append(pattern)
            else:
                shared.append(_scoped(pattern.regex))
        self._extra_re: re.Pattern[str] | None = None
        if shared:
            try:
                self._extra_re = re.compile("|".join(shared))
            except re.error:
                # An extra that compiles alone but not inside the alternation still
                # works, at the price of its own pass.
                separate = list(self.extra)
        self._separate = tuple(pattern.compile() for pattern in separate)
        self._clean: set[str] = set()
        """Short texts redaction left unchanged: looked up before the regexes run."""

    @classmethod
    def from_config(cls, project: ProjectConfig) -> Redactor:
        """The redactor of a project: the built-ins plus its ``redact.yaml`` patterns."""
        return cls(project.redact_patterns)

    def redact(self, text: str) -> str:
        """Return ``text`` with every secret replaced by ``****``.

        Redaction is idempotent: redacting redacted text changes nothing.
        """
        short = len(text) <= _MEMO_MAX_CHARS
        if short and text in self._clean:
            return text
        redacted, replaced = self._redact(text)
        if short and not replaced:
            if len(self._clean) >= _MEMO_SIZE:
                self._clean.clear()
            self._clean.add(text)
        return redacted

    def scrub(self, text: str) -> Scrubbed:
        """Redact text that enters ateam from outside, counting what was replaced.

        Used at the door (console input, ``ateam send``, the ``input`` RPC, plan writes,
        context items, offload tasks), so that the sender can be told.
        """
        text, replaced = self._redact(text)
        return Scrubbed(text, replaced)

    def with_literals(self, literals: Iterable[str]) -> Redactor:
        """A redactor with the same patterns that also masks the exact ``literals``."""
        return Redactor(self.extra, literals=literals)

    def _redact(self, text: str) -> tuple[str, int]:
        replaced = 0
        if self._literal_re is not None and any(value in text for value in self._literals):
            text, replaced = self._literal_re.subn(MASK, text)
        text, count = self._redact_builtins(text)
        replaced += count
        if self._extra_re is not None:
            text, count = self._extra_re.subn(_mask_nonempty, text)
            replaced += count
        for pattern in self._separate:
            text, count = pattern.subn(_mask_nonempty, text)
            replaced += count
        return text, replaced

    def redact_bytes(self, data: bytes) -> bytes:
        """Return ``data`` with every secret replaced by ``b"****"``.

        Works on any bytes: valid UTF-8 is matched as text, and invalid sequences or
        binary pass through unchanged (they are carried as lone surrogates, which no
        pattern matches, and restored byte for byte).

        Bytes that hold no trigger of a built-in and none of the literals (see
        :func:`may_hold_secret`) come back as they are, without being decoded: the common
        case of tool output, checked at several hundred MB/s.
        """
        if len(data) >= _PREFILTER_FROM and not self.may_change(data):
            return data
        text = data.decode("utf-8", "surrogateescape")
        return self.redact(text).encode("utf-8", "surrogateescape")

    def may_change(self, data: bytes) -> bool:
        """Whether redacting text or bytes that hold (UTF-8) ``data`` may change them.

        ``False`` when ``data`` holds no trigger of a built-in (:func:`may_hold_secret`)
        and no literal, and there are no extra patterns. A stream can be checked as it
        arrives, a piece at a time, each piece together with the :attr:`reach` bytes
        before it: a stretch of it whose pieces all said ``False`` holds no secret, and
        redacting it would return it as it is.
        """
        return (
            not self._bytes_fast
            or any(value in data for value in self._literal_bytes)
            or may_hold_secret(data)
        )

    @property
    def reach(self) -> int:
        """Bytes a piece checked with :meth:`may_change` needs from before it: every
        trigger and literal is shorter, so each lies whole in the check of some piece."""
        return max((_TRIGGER_REACH, *(len(value) for value in self._literal_bytes)))

    def redact_obj(self, value: Any) -> Any:
        """Return a copy of a JSON-like value with the secrets in its strings redacted.

        Dicts, lists and tuples are walked recursively; strings are redacted with
        :meth:`redact` and bytes with :meth:`redact_bytes`; other values are returned
        as they are. Keys are left alone, but a non-empty string under a secret-ish key
        (``"api_key"``, ``"password"``, ``"GITHUB_TOKEN"``; not ``"max_tokens"``) is
        masked whole, since nothing in the value itself says it is a secret.
        """
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {key: self._redact_item(key, item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.redact_obj(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self.redact_obj(item) for item in value)
        if isinstance(value, bytes | bytearray):
            return self.redact_bytes(bytes(value))
        return value

    def logging_filter(self) -> logging.Filter:
        """A filter that redacts log records; add it to every handler that writes logs.

        Attach it to handlers rather than loggers: a logger's filters do not see the
        records that propagate to it from child loggers, a handler's do.
        """
        return RedactLogFilter(self)

    def _redact_item(self, key: Any, item: Any) -> Any:
        if isinstance(item, str):
            if item and isinstance(key, str) and _secret_key(key):
                return MASK
            return self.redact(item)
        return self.redact_obj(item)

    def _redact_builtins(self, text: str) -> tuple[str, int]:
        """``text`` with the built-in patterns' secrets masked, and how many were."""
        if len(text) >= _PREFILTER_FROM:
            if not _may_hold_builtin(text):
                return text, 0
        elif _built is None and not _start_triggers().found(text.encode("utf-8", "surrogatepass")):
            return text, 0  # (every built-in match holds a trigger)
        # re.sub cannot replace text before a match's start (the 's' of 'sk-'), hence
        # this loop; it costs nothing more where nothing matches, the common case.
        pieces: list[str] = []
        done = 0
        combined, groups = _combined()
        for match in combined.finditer(text):
            group = groups[match.lastgroup or ""]
            start = max(done, match.start() - group.back)
            pieces.append(text[done:start])
            pieces.append(self._masked(text, start, match, group.values))
            done = match.end()
        if not pieces:
            return text, 0
        count = len(pieces) // 2
        pieces.append(text[done:])
        return "".join(pieces), count

    def _masked(self, text: str, start: int, match: re.Match[str], values: Iterable[str]) -> str:
        for name in values:
            value_start, value_end = match.span(name)
            if value_start < value_end:
                # The kept parts are redacted too, so that a secret inside them (an AWS
                # key id as a URL's user name) cannot hide behind another pattern. They
                # are shorter than the match, so the recursion ends.
                head = self.redact(text[start:value_start])
                tail = self.redact(text[value_end : match.end()])
                return f"{head}{MASK}{tail}"
        return MASK


class RedactLogFilter(logging.Filter):
    """A :class:`logging.Filter` that redacts a record's message, traceback and stack.

    The message is formatted with its arguments first (so ``log.info("key=%s", key)``
    is redacted as one text), then stored back with no arguments. Records whose
    arguments do not fit the message are left for logging to report.
    """

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor
        """The redactor applied to each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; always lets it through."""
        try:
            message = record.getMessage()
        except Exception:  # a filter that raises would break the logging call itself
            return True
        record.msg = self.redactor.redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            # Formatters reuse a cached exc_text, so filling it here redacts tracebacks.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.redact(record.stack_info)
        return True


def from_config(project: ProjectConfig) -> Redactor:
    """The redactor of a project: the built-ins plus its ``redact.yaml`` patterns."""
    return Redactor.from_config(project)
