"""The ``scripted`` provider: replays a YAML script of model turns (SPEC §7).

It makes the whole agent, tool loop and model switching included, testable and
demonstrable offline and deterministically. The script format::

    turns:                      # consumed in order, one per model call
      - text: "Running the build."
        tool_calls:
          - {name: os.exec, args: {cmd: "echo built"}}
      - text: "The build printed: built."
      - error: {status: 429}    # simulate a provider failure (for switching tests)
    token_delay_ms: 0           # optional pacing of streamed words

A turn streams its ``text`` word by word, then its ``tool_calls`` (with ids ``call_1``,
``call_2``, ... numbered across the whole script), then a :class:`~ateam.providers.Usage`
estimate. An ``error`` turn raises the typed :class:`~ateam.errors.ProviderError` a real
provider would for that status (see :func:`~ateam.providers.status.provider_error_from_status`);
``error: {type: context_length}`` and ``error: {type: connection}`` simulate failures
that have no telling status. Once every turn is used each call answers
``(script exhausted)``.

The script is read at the first call, not at construction, so a missing file is an
error of the first task rather than of agent start-up, like a missing API key.

The position in the script lives in the provider object only: a restarted agent (or a
new :class:`ScriptedProvider` for the same file) starts again at the first turn. That
keeps a script's effect predictable for a test that restarts an agent, and a provider
holds no state on disk that could outlive or disagree with the agent's own history.
Callers that want one script to span a conversation keep one provider instance.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ateam.errors import (
    ConfigError,
    ContextTooLong,
    ProviderError,
    ProviderUnavailable,
)
from ateam.providers.base import (
    Chunk,
    Message,
    TextDelta,
    ToolCall,
    Usage,
    estimate_tokens,
)
from ateam.providers.status import provider_error_from_status

EXHAUSTED = "(script exhausted)"
"""What a scripted model answers once every turn of its script has been used."""

PROVIDER_NAME = "scripted"

_WORDS = re.compile(r"\S+\s*|\s+")
_IDENT = re.compile(r"[A-Za-z_][\w-]*")


# --- the script file's schema ---------------------------------------------------------


class _Strict(BaseModel):
    # A typo in a script (say `tool_call:`) must fail loudly, not silently drop a turn.
    model_config = ConfigDict(extra="forbid", frozen=True)


class ErrorKind(StrEnum):
    """Failures a script can name when an HTTP status alone would not say it."""

    CONTEXT_LENGTH = "context_length"
    """The request exceeds the model's context window."""
    CONNECTION = "connection"
    """No response at all: refused, reset or timed out."""


_KIND_ERRORS: dict[ErrorKind, type[ProviderError]] = {
    ErrorKind.CONTEXT_LENGTH: ContextTooLong,
    ErrorKind.CONNECTION: ProviderUnavailable,
}
_KIND_MESSAGES: dict[ErrorKind, str] = {
    ErrorKind.CONTEXT_LENGTH: "simulated error: the prompt exceeds the model's context length",
    ErrorKind.CONNECTION: "simulated error: connection refused",
}


class ScriptedToolCall(_Strict):
    """One tool call of a turn: ``{name, args}``."""

    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class ScriptedError(_Strict):
    """A simulated provider failure: ``{status: N, message?}`` or ``{type: KIND}``."""

    status: int | None = Field(default=None, ge=400, le=599)
    """HTTP status the simulated provider answers with."""
    type: ErrorKind | None = None
    """A failure kind that wins over what ``status`` would mean."""
    message: str | None = None
    """The provider's error text; for a 400 it decides whether the context was too long."""
    retry_after_s: float | None = Field(default=None, ge=0)
    """The simulated ``Retry-After`` header."""

    @model_validator(mode="after")
    def _status_or_type(self) -> ScriptedError:
        if self.status is None and self.type is None:
            raise ValueError("an error needs `status` or `type`")
        return self


class ScriptedTurn(_Strict):
    """One model call: text and tool calls, or an error."""

    text: str | None = None
    chunks: tuple[str, ...] = ()
    """The reply streamed in exactly these pieces, as a real model streams parts of
    words (``text`` is then their concatenation); else ``text`` goes word by word."""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    error: ScriptedError | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ScriptedTurn:
        if self.chunks and self.text is not None and self.text != "".join(self.chunks):
            raise ValueError("`text` must be the concatenation of `chunks` (or left out)")
        said = self.text is not None or bool(self.chunks)
        if self.error is not None and (said or self.tool_calls):
            raise ValueError("a turn with `error` can have neither `text` nor `tool_calls`")
        if self.error is None and not said and not self.tool_calls:
            raise ValueError("a turn needs `text`, `chunks`, `tool_calls` or `error`")
        return self


class Script(_Strict):
    """A whole script file."""

    turns: tuple[ScriptedTurn, ...]
    token_delay_ms: float = Field(default=0.0, ge=0)
    """Pause before each streamed word, to make streaming visible in demos."""


def load_script(path: Path) -> Script:
    """Read and validate a script file.

    Raises:
        ConfigError: the file is unreadable, not YAML, or fails the schema; the message
            names the file and the field path (e.g. ``turns[2].tool_calls[0].name``).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read script: {reason}", file=str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigError(f"invalid YAML{where}: {problem}", file=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping with `turns:`", file=str(path))
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        raise _schema_error(exc, path) from None


def _schema_error(exc: ValidationError, path: Path) -> ConfigError:
    first = exc.errors(include_url=False)[0]
    kind = first["type"]
    if kind == "extra_forbidden":
        message = "unknown field"
    elif kind == "missing":
        message = "required field is missing"
    else:
        message = " ".join(str(first["msg"]).removeprefix("Value error, ").split())
    if exc.error_count() > 1:
        more = exc.error_count() - 1
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ConfigError(message, file=str(path), field=_dotted(first["loc"]) or None)


def _dotted(loc: tuple[str | int, ...]) -> str:
    """``("turns", 2, "tool_calls", 0, "name")`` → ``turns[2].tool_calls[0].name``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENT.fullmatch(part):
            text += f".{part}" if text else part
        else:  # argument keys such as "os.exec" or "a b" stay readable when quoted
            text += f"[{json.dumps(part)}]"
    return text


# --- the provider ---------------------------------------------------------------------


class ScriptedProvider:
    """A model that replays a script of turns, one turn per :meth:`stream` call.

    Args:
        script: the script file (absolute after config loading).
        model: the model entry id agents route by.
        context_window: the window reported to the context engine, in tokens.
    """

    def __init__(
        self, script: Path, model: str = "scripted", *, context_window: int = 8192
    ) -> None:
        self.model = model
        self.context_window = context_window
        self.script_path = script
        self._script: Script | None = None
        self._next_turn = 0
        self._calls = 0

    @property
    def position(self) -> int:
        """How many turns have been used (in this process only; see the module docs)."""
        return self._next_turn

    def _load(self) -> Script:
        # A failed load is not cached: the user may fix the file and retry the task.
        if self._script is None:
            self._script = load_script(self.script_path)
        return self._script

    def _take_turn(self) -> tuple[ScriptedTurn | None, float]:
        script = self._load()
        delay = script.token_delay_ms / 1000
        if self._next_turn >= len(script.turns):
            return None, delay
        turn = script.turns[self._next_turn]
        self._next_turn += 1
        return turn, delay

    async def stream(
        self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None
    ) -> AsyncIterator[Chunk]:
        """Replay the next turn: words as :class:`TextDelta`, tool calls, then usage.

        ``tools`` is ignored on purpose: a script may call a tool the agent does not
        offer, which is how the refusal of unlisted tools is tested.

        Raises:
            ConfigError: the script file is missing or invalid.
            ProviderError: the turn is an ``error`` turn (the subclass its status means).
        """
        # The turn is taken when the stream starts, so an interrupted call still uses it,
        # as a real call that reached the provider would have.
        turn, delay = self._take_turn()
        if turn is not None and turn.error is not None:
            raise self._error(turn.error)
        chunks = () if turn is None else turn.chunks
        text = EXHAUSTED if turn is None else ("".join(chunks) or turn.text or "")
        pieces = chunks or _WORDS.findall(text)
        for word in pieces:
            # Even without pacing, yield to the loop so interrupts land between words.
            await asyncio.sleep(delay)
            yield TextDelta(word)
        produced = [text]
        for call in () if turn is None else turn.tool_calls:
            self._calls += 1
            yield ToolCall(id=f"call_{self._calls}", name=call.name, args=dict(call.args))
            produced.append(json.dumps({"name": call.name, "args": call.args}, sort_keys=True))
        yield Usage(
            tokens_in=sum(estimate_tokens(m.content) for m in messages),
            tokens_out=sum(estimate_tokens(part) for part in produced),
        )

    def _error(self, spec: ScriptedError) -> ProviderError:
        message = spec.message or _default_message(spec)
        if spec.type is not None:
            return _KIND_ERRORS[spec.type](
                message,
                status=spec.status,
                provider=PROVIDER_NAME,
                model=self.model,
                retry_after_s=spec.retry_after_s,
            )
        return provider_error_from_status(
            spec.status,
            message,
            provider=PROVIDER_NAME,
            model=self.model,
            retry_after_s=spec.retry_after_s,
        )


def _default_message(spec: ScriptedError) -> str:
    if spec.type is not None:
        return _KIND_MESSAGES[spec.type]
    return f"simulated error: HTTP {spec.status}"
