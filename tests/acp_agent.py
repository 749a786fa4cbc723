"""A scriptable Agent Client Protocol agent that ateam's tests start as a real subprocess.

One file on purpose: an ateam agent process starts it by path from another working
directory, so it imports nothing of ateam or of the tests, only the ACP SDK (``acp``),
PyYAML, pydantic (the SDK's own dependency) and the standard library.

    python acp_agent.py SCRIPT.yaml [--state FILE] [--log FILE]

The script (YAML, validated by ``Script``) says what ``initialize`` answers and what
each ``session/prompt`` does, step by step. ``--state`` keeps what must outlive the
process (the next script prompt, the sessions made, a completed ``authenticate``), so a
restarted agent continues the script and accepts ``session/load`` of an earlier session.
``--log`` appends one JSON line per message the client sent (requests, notifications,
replies to the agent's own requests: exactly as they came over the wire) and per
decision the agent took (``{"event": ...}``), flushed line by line. A bad script or
state file is one line on stderr and exit status 2.

A script, in short (``Script`` and the step models below are the reference)::

    agent: {name: test-acp, version: "1.2.3"}
    modes: {current: ask, available: [ask, auto]}
    prompts:                      # one per session/prompt, in order, across sessions
      - stop_reason: end_turn
        steps:
          - text: "Hello there"   # word by word
          - tool: {id: t1, title: "Run ls", kind: execute, terminal: {command: "ls -la"}}
          - permission: {title: "Edit a.txt", kind: edit}
            then: [{tool: {id: t2, title: Write, write: {path: a.txt, content: "new\\n"}}}]
            otherwise: [{text: "Not then."}]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import string
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Annotated, Any, ClassVar, Literal, TypeAlias, cast

import acp
import yaml
from acp import (
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    SetSessionModeResponse,
)
from acp.connection import StreamDirection, StreamEvent
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    AuthenticateResponse,
    AuthMethodAgent,
    ContentToolCallContent,
    Cost,
    Implementation,
    PermissionOption,
    SessionMode,
    SessionModeState,
    TextContentBlock,
    ToolCallLocation,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError
from pydantic import model_validator as _model_validator

ToolKind: TypeAlias = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
OptionKind: TypeAlias = Literal["allow_once", "allow_always", "reject_once", "reject_always"]
StopReason: TypeAlias = Literal[
    "end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"
]

EXIT_BAD_SCRIPT = 2
EXIT_AT_INITIALIZE = 3
GARBAGE_LINE = "this is not json"
# ASCII letters and digits only: one character is one byte and needs no JSON escape, so a
# `big: N` message is N bytes of text and a test can check it by length and pattern.
FILLER = string.ascii_letters + string.digits


# --- the script ---------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AgentInfo(_Model):
    name: str = "test-acp"
    version: str = "0.0.0"
    title: str | None = None


class AuthMethodSpec(_Model):
    id: str
    name: str
    description: str | None = None


class ModesSpec(_Model):
    current: str
    available: list[str] = Field(min_length=1)

    @_model_validator(mode="after")
    def _current_is_available(self) -> ModesSpec:
        if self.current not in self.available:
            raise ValueError(f"current mode {self.current!r} is not in available")
        return self


class InitializeBehaviour(StrEnum):
    OK = "ok"
    HANG = "hang"  # never answer initialize
    GARBAGE = "garbage"  # a non-JSON line on stdout, then the answer
    EXIT = "exit"  # exit with status 3 as soon as initialize arrives, unanswered


class UsageTotal(_Model):
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    total_tokens: int | None = Field(default=None, ge=0)  # default: input + output
    thought_tokens: int | None = Field(default=None, ge=0)
    cached_read_tokens: int | None = Field(default=None, ge=0)
    cached_write_tokens: int | None = Field(default=None, ge=0)

    def to_acp(self) -> Usage:
        total = self.total_tokens
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.input_tokens + self.output_tokens if total is None else total,
            thought_tokens=self.thought_tokens,
            cached_read_tokens=self.cached_read_tokens,
            cached_write_tokens=self.cached_write_tokens,
        )


class _Step(_Model):
    KEY: ClassVar[str]  # the one key that names the step in YAML


class TextStep(_Step):
    KEY: ClassVar[str] = "text"
    text: str


class ThoughtStep(_Step):
    KEY: ClassVar[str] = "thought"
    thought: str


class PlanItem(_Model):
    content: str
    status: Literal["pending", "in_progress", "completed"] = "pending"
    priority: Literal["high", "medium", "low"] = "medium"


class PlanStep(_Step):
    KEY: ClassVar[str] = "plan"
    plan: list[PlanItem]


class EchoPromptStep(_Step):
    KEY: ClassVar[str] = "echo_prompt"
    echo_prompt: Literal[True]


class TerminalSpec(_Model):
    command: str  # the whole shell string, unless args are given
    args: list[str] | None = None
    timeout_s: float | None = Field(default=None, gt=0)  # then terminal/kill, and failed
    output_byte_limit: int | None = Field(default=None, ge=0)


class WriteSpec(_Model):
    path: str
    content: str


class ReadSpec(_Model):
    path: str
    line: int | None = Field(default=None, ge=1)
    limit: int | None = Field(default=None, ge=1)


class ReportedSpec(_Model):
    command: str
    output: str = ""
    exit_code: int = 0


class ToolSpec(_Model):
    id: str
    title: str
    kind: ToolKind = "other"
    terminal: TerminalSpec | None = None
    write: WriteSpec | None = None
    read: ReadSpec | None = None
    reported: ReportedSpec | None = None

    @_model_validator(mode="after")
    def _one_action(self) -> ToolSpec:
        actions = [self.terminal, self.write, self.read, self.reported]
        if sum(a is not None for a in actions) != 1:
            raise ValueError("a tool has exactly one of: terminal, write, read, reported")
        return self


class ToolStep(_Step):
    KEY: ClassVar[str] = "tool"
    tool: ToolSpec


class OptionSpec(_Model):
    id: str
    name: str
    kind: OptionKind

    @_model_validator(mode="before")
    @classmethod
    def _from_kind(cls, value: Any) -> Any:
        # `allow_once` alone is an option whose id is its kind, named after it.
        if isinstance(value, str):
            return {"id": value, "name": value.replace("_", " ").capitalize(), "kind": value}
        return value


class PermissionSpec(_Model):
    id: str | None = None  # the tool call id; default perm-<n>
    title: str
    kind: ToolKind = "other"
    options: list[OptionSpec] = Field(
        default_factory=lambda: [
            OptionSpec.model_validate(k) for k in ("allow_once", "reject_once")
        ],
        min_length=1,
    )


class PermissionStep(_Step):
    KEY: ClassVar[str] = "permission"
    permission: PermissionSpec
    then: list[Step] = []
    otherwise: list[Step] = []


class CostSpec(_Model):
    amount: float
    currency: str


class UsageSpec(_Model):
    used: int = Field(ge=0)
    size: int = Field(ge=0)
    cost: CostSpec | None = None


class UsageStep(_Step):
    KEY: ClassVar[str] = "usage"
    usage: UsageSpec


class SleepStep(_Step):
    KEY: ClassVar[str] = "sleep"
    sleep: float = Field(ge=0)


class CrashStep(_Step):
    KEY: ClassVar[str] = "crash"
    crash: int = Field(ge=0, le=255)


class HangStep(_Step):
    KEY: ClassVar[str] = "hang"
    hang: Literal[True]


class GarbageStep(_Step):
    KEY: ClassVar[str] = "garbage"
    garbage: str


class RawStep(_Step):
    KEY: ClassVar[str] = "raw"
    raw: Any


class BigStep(_Step):
    KEY: ClassVar[str] = "big"
    big: int = Field(ge=0)


class FloodSpec(_Model):
    id: str = "flood"
    bytes: int = Field(ge=0)
    chunk: int = Field(default=65536, gt=0)


class FloodStep(_Step):
    KEY: ClassVar[str] = "flood"
    flood: FloodSpec


class ErrorSpec(_Model):
    code: int
    message: str
    data: Any = None


class ErrorStep(_Step):
    KEY: ClassVar[str] = "error"
    error: ErrorSpec


_STEP_TYPES: tuple[type[_Step], ...] = (
    TextStep,
    ThoughtStep,
    PlanStep,
    EchoPromptStep,
    ToolStep,
    PermissionStep,
    UsageStep,
    SleepStep,
    CrashStep,
    HangStep,
    GarbageStep,
    RawStep,
    BigStep,
    FloodStep,
    ErrorStep,
)
_STEP_KEYS = tuple(t.KEY for t in _STEP_TYPES)


def _step_kind(value: Any) -> str | None:
    # A step is named by the one key it has, so the error for a bad step names its kind.
    if isinstance(value, dict):
        keys = [k for k in _STEP_KEYS if k in value]
        return keys[0] if len(keys) == 1 else None
    return getattr(type(value), "KEY", None)


Step = Annotated[
    Annotated[TextStep, Tag("text")]
    | Annotated[ThoughtStep, Tag("thought")]
    | Annotated[PlanStep, Tag("plan")]
    | Annotated[EchoPromptStep, Tag("echo_prompt")]
    | Annotated[ToolStep, Tag("tool")]
    | Annotated[PermissionStep, Tag("permission")]
    | Annotated[UsageStep, Tag("usage")]
    | Annotated[SleepStep, Tag("sleep")]
    | Annotated[CrashStep, Tag("crash")]
    | Annotated[HangStep, Tag("hang")]
    | Annotated[GarbageStep, Tag("garbage")]
    | Annotated[RawStep, Tag("raw")]
    | Annotated[BigStep, Tag("big")]
    | Annotated[FloodStep, Tag("flood")]
    | Annotated[ErrorStep, Tag("error")],
    Discriminator(
        _step_kind,
        custom_error_type="step_kind",
        custom_error_message=f"a step is a mapping with exactly one of: {', '.join(_STEP_KEYS)}",
    ),
]
PermissionStep.model_rebuild()


class _SayStep(_Step):
    """The agent's own one-chunk answer (an echo, "(script exhausted)"); not for scripts."""

    KEY: ClassVar[str] = "say"
    say: str


class PromptScript(_Model):
    stop_reason: StopReason = "end_turn"
    ignore_cancel: bool = False  # session/cancel is logged, then ignored
    steps: list[Step] = []
    usage_total: UsageTotal | None = None  # overrides the script's


class Script(_Model):
    agent: AgentInfo = AgentInfo()
    protocol_version: int = Field(default=acp.PROTOCOL_VERSION, ge=0, le=65535)
    auth_methods: list[AuthMethodSpec] = []
    auth_required: bool = False
    load_session: bool = True
    modes: ModesSpec | None = None
    initialize: InitializeBehaviour = InitializeBehaviour.OK
    # Neither stdin's end nor SIGTERM stops the process, only SIGKILL: a client's last resort.
    ignore_shutdown: bool = False
    prompts: list[PromptScript] | None = None  # None: every prompt is echoed
    usage_total: UsageTotal | None = None


class ScriptError(Exception):
    """The script or state file cannot be used; the message is one line."""


def _one_line(exc: ValidationError) -> str:
    def where(loc: tuple[int | str, ...]) -> str:
        # A step's tag comes before its own key in pydantic's path ("sleep.sleep"): once.
        parts = [p for i, p in enumerate(loc) if i == 0 or p != loc[i - 1]]
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")

    def what(message: str) -> str:
        return message.removeprefix("Value error, ")

    return "; ".join(f"{where(e['loc']) or '(top)'}: {what(e['msg'])}" for e in exc.errors())


def load_script(path: Path) -> Script:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScriptError(f"cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ScriptError("not YAML: " + " ".join(str(exc).split())) from None
    try:
        return Script.model_validate({} if data is None else data)
    except ValidationError as exc:
        raise ScriptError(_one_line(exc)) from None


# --- what outlives the process ------------------------------------------------------------


class SavedSession(BaseModel):
    cwd: str
    mode: str | None = None


class SavedState(BaseModel):
    next_prompt: int = 0
    next_session: int = 1
    authenticated: bool = False
    sessions: dict[str, SavedSession] = {}


class StateFile:
    """The state, written whole (temp file and rename) after each change when a path is set."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.state = SavedState()
        if path is not None and path.exists():
            try:
                self.state = SavedState.model_validate_json(path.read_bytes())
            except (OSError, ValidationError) as exc:
                raise ScriptError(f"state file {path}: {' '.join(str(exc).split())}") from None

    def reload(self) -> None:
        """Read it again: two processes of one script (an agent's own runtime and one it
        started for a task) share the script's position."""
        if self.path is not None and self.path.exists():
            with contextlib.suppress(OSError, ValidationError):
                self.state = SavedState.model_validate_json(self.path.read_bytes())

    def save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(self.state.model_dump_json(), encoding="utf-8")
        os.replace(tmp, self.path)


# --- the log --------------------------------------------------------------------------------


def prompt_text(blocks: Any) -> str:
    """The text blocks of a prompt (wire form), joined by newlines."""
    if not isinstance(blocks, list):
        return ""
    texts = [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(str(t) for t in texts)


class Log:
    """Appends JSON lines; a no-op without a path."""

    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = None if path is None else path.open("a", encoding="utf-8")
        self._asked: dict[Any, str] = {}  # id of a request the agent sent -> its method

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def write(self, entry: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
            self._file.flush()  # a test reads it while the process runs, or after a crash

    def event(self, kind: str, **fields: Any) -> None:
        self.write({"event": kind, **fields})

    def observe(self, event: StreamEvent) -> None:
        """A connection observer: every message the client sent, as it came."""
        message = event.message
        if event.direction is StreamDirection.OUTGOING:
            if "method" in message and "id" in message:
                self._asked[message["id"]] = message["method"]
            return
        if "method" in message:
            entry: dict[str, Any] = {"method": message["method"], "params": message.get("params")}
            if "id" in message:
                entry["id"] = message["id"]
            if message["method"] == "session/prompt":
                entry["text"] = prompt_text((message.get("params") or {}).get("prompt"))
        else:
            entry = {"reply_to": self._asked.pop(message.get("id"), None), "id": message.get("id")}
            entry.update({k: message[k] for k in ("result", "error") if k in message})
        self.write(entry)


# --- the agent --------------------------------------------------------------------------------


class RawOut:
    """Writes lines past the SDK, on the same stdout stream, so order is kept."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def line(self, text: str) -> None:
        self._writer.write(text.encode("utf-8") + b"\n")
        await self._writer.drain()

    async def flush(self) -> None:
        # drain() waits only until the buffer is under its high-water mark; with the mark
        # at 0 it waits until everything sent so far has reached the pipe.
        self._writer.transport.set_write_buffer_limits(high=0)
        await self._writer.drain()


@dataclass
class Turn:
    """One session/prompt being played."""

    session_id: str
    cwd: str
    text: str
    ignore_cancel: bool
    task: asyncio.Task[None] | None = None
    cancel_requested: bool = False
    awaiting_permission: bool = False  # then cancel waits for the client's "cancelled" reply

    def absolute(self, path: str) -> str:
        return str(Path(self.cwd, path))


@dataclass
class LiveSession:
    cwd: str
    turn: Turn | None = None


async def _forever() -> None:
    await asyncio.get_running_loop().create_future()


def _chunks_of(text: str) -> list[str]:
    # Words with their trailing whitespace: joined again they are the text, byte for byte.
    return re.findall(r"\S+\s*|\s+", text) or [text]


def _filler(size: int) -> str:
    return (FILLER * (size // len(FILLER) + 1))[:size]


def _text(text: str) -> ContentToolCallContent:
    return acp.tool_content(acp.text_block(text))


def _error_text(exc: RequestError) -> str:
    return str(exc) if exc.data is None else f"{exc}: {json.dumps(exc.data)}"


StepRunner: TypeAlias = Callable[[Turn, Any], Awaitable[None]]


class ScriptedAgent:
    """The ACP ``Agent`` the SDK calls; each handler plays its part of the script."""

    def __init__(self, script: Script, state: StateFile, log: Log, out: RawOut) -> None:
        self._script = script
        self._state = state
        self._log = log
        self._out = out
        self._client: Client | None = None
        self._live: dict[str, LiveSession] = {}
        self._permissions = 0
        self._steps: dict[type[_Step], StepRunner] = {
            _SayStep: self._step_say,
            TextStep: self._step_text,
            ThoughtStep: self._step_thought,
            PlanStep: self._step_plan,
            EchoPromptStep: self._step_echo_prompt,
            ToolStep: self._step_tool,
            PermissionStep: self._step_permission,
            UsageStep: self._step_usage,
            SleepStep: self._step_sleep,
            CrashStep: self._step_crash,
            HangStep: self._step_hang,
            GarbageStep: self._step_garbage,
            RawStep: self._step_raw,
            BigStep: self._step_big,
            FloodStep: self._step_flood,
            ErrorStep: self._step_error,
        }

    def on_connect(self, conn: Client) -> None:
        self._client = conn

    @property
    def client(self) -> Client:
        assert self._client is not None, "the SDK calls on_connect first"
        return self._client

    # --- the protocol's requests and notifications ---

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        behaviour = self._script.initialize
        if behaviour is InitializeBehaviour.EXIT:
            os._exit(EXIT_AT_INITIALIZE)
        if behaviour is InitializeBehaviour.HANG:
            await _forever()
        if behaviour is InitializeBehaviour.GARBAGE:
            await self._out.line(GARBAGE_LINE)
        info = self._script.agent
        return InitializeResponse(
            protocol_version=self._script.protocol_version,
            agent_capabilities=AgentCapabilities(load_session=self._script.load_session),
            auth_methods=[
                AuthMethodAgent(id=m.id, name=m.name, description=m.description)
                for m in self._script.auth_methods
            ],
            agent_info=Implementation(name=info.name, version=info.version, title=info.title),
        )

    async def authenticate(self, method_id: str, **_: Any) -> AuthenticateResponse:
        known = [m.id for m in self._script.auth_methods]
        if known and method_id not in known:
            raise RequestError.invalid_params({"methodId": method_id, "known": known})
        self._state.state.authenticated = True
        self._state.save()
        return AuthenticateResponse()

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        self._check_authenticated()
        state = self._state.state
        session_id = f"sess-{state.next_session}"
        state.next_session += 1
        mode = self._script.modes.current if self._script.modes else None
        state.sessions[session_id] = SavedSession(cwd=cwd, mode=mode)
        self._state.save()
        self._live[session_id] = LiveSession(cwd=cwd)
        return NewSessionResponse(session_id=session_id, modes=self._modes(mode))

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        if not self._script.load_session:
            raise RequestError.method_not_found("session/load")
        self._check_authenticated()
        saved = self._state.state.sessions.get(session_id)
        if saved is None:
            raise RequestError.invalid_params(
                {"sessionId": session_id, "reason": "unknown session"}
            )
        saved.cwd = cwd
        self._state.save()
        self._live[session_id] = LiveSession(cwd=cwd)
        return LoadSessionResponse(modes=self._modes(saved.mode))

    async def set_session_mode(
        self, session_id: str, mode_id: str, **_: Any
    ) -> SetSessionModeResponse:
        self._session(session_id)
        modes = self._script.modes
        if modes is None or mode_id not in modes.available:
            raise RequestError.invalid_params({"modeId": mode_id, "reason": "unknown mode"})
        self._state.state.sessions[session_id].mode = mode_id
        self._state.save()
        self._log.event("mode", sessionId=session_id, modeId=mode_id)
        return SetSessionModeResponse()

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        live = self._session(session_id)
        if live.turn is not None:
            raise RequestError.invalid_request({"reason": "a prompt is already running"})
        text = "\n".join(b.text for b in prompt if isinstance(b, TextContentBlock))
        script = self._next_prompt(text)
        turn = Turn(session_id, live.cwd, text, script.ignore_cancel)
        turn.task = asyncio.create_task(self._run_steps(turn, script.steps))
        live.turn = turn
        try:
            await turn.task
            stop_reason: StopReason = script.stop_reason
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the connection is closing: not the client's session/cancel
            stop_reason = "cancelled"
        finally:
            live.turn = None
        # The process's own cwd: a test sees where the client started the agent.
        self._log.event(
            "prompt_end",
            sessionId=session_id,
            stopReason=stop_reason,
            cwd=os.getcwd(),
            pid=os.getpid(),
        )
        usage = script.usage_total or self._script.usage_total
        return PromptResponse(stop_reason=stop_reason, usage=usage.to_acp() if usage else None)

    async def cancel(self, session_id: str, **_: Any) -> None:
        live = self._live.get(session_id)
        turn = live.turn if live else None
        if turn is None or turn.task is None:
            self._log.event("cancel", sessionId=session_id, action="idle")
            return
        if turn.ignore_cancel:
            self._log.event("cancel", sessionId=session_id, action="ignored")
            return
        self._log.event("cancel", sessionId=session_id, action="cancelled")
        if turn.cancel_requested:
            return  # a second cancel must not interrupt the clean-up of the first
        turn.cancel_requested = True
        # The protocol has the client answer a pending permission request "cancelled";
        # the permission step ends the turn when that reply comes.
        if not turn.awaiting_permission:
            turn.task.cancel()

    # --- helpers of the handlers ---

    def _check_authenticated(self) -> None:
        if self._script.auth_required and not self._state.state.authenticated:
            raise RequestError.auth_required()

    def _modes(self, current: str | None) -> SessionModeState | None:
        modes = self._script.modes
        if modes is None:
            return None
        return SessionModeState(
            current_mode_id=current or modes.current,
            available_modes=[SessionMode(id=m, name=m) for m in modes.available],
        )

    def _session(self, session_id: str) -> LiveSession:
        # Only a session made or loaded by this process: a client must load after a restart.
        live = self._live.get(session_id)
        if live is None:
            raise RequestError.invalid_params(
                {"sessionId": session_id, "reason": "unknown session"}
            )
        return live

    def _next_prompt(self, text: str) -> PromptScript:
        prompts = self._script.prompts
        # model_construct: a _SayStep is no step a script may name, so it skips validation.
        if prompts is None:
            return PromptScript.model_construct(steps=[_SayStep(say=f"echo: {text}")])
        self._state.reload()
        state = self._state.state
        if state.next_prompt >= len(prompts):
            return PromptScript.model_construct(steps=[_SayStep(say="(script exhausted)")])
        # Counted when it starts, so a process that crashes in it resumes at the next one.
        state.next_prompt += 1
        self._state.save()
        return prompts[state.next_prompt - 1]

    async def _update(self, turn: Turn, update: Any) -> None:
        await self.client.session_update(session_id=turn.session_id, update=update)

    async def _run_steps(self, turn: Turn, steps: list[Any]) -> None:
        for step in steps:
            await self._steps[type(step)](turn, step)

    # --- the steps ---

    async def _step_text(self, turn: Turn, step: TextStep) -> None:
        for chunk in _chunks_of(step.text):
            await self._update(turn, acp.update_agent_message_text(chunk))

    async def _step_say(self, turn: Turn, step: _SayStep) -> None:
        await self._update(turn, acp.update_agent_message_text(step.say))

    async def _step_thought(self, turn: Turn, step: ThoughtStep) -> None:
        await self._update(turn, acp.update_agent_thought_text(step.thought))

    async def _step_plan(self, turn: Turn, step: PlanStep) -> None:
        entries = [
            acp.plan_entry(e.content, priority=e.priority, status=e.status) for e in step.plan
        ]
        await self._update(turn, acp.update_plan(entries))

    async def _step_echo_prompt(self, turn: Turn, step: EchoPromptStep) -> None:
        await self._update(turn, acp.update_agent_message_text(turn.text))

    async def _step_tool(self, turn: Turn, step: ToolStep) -> None:
        tool = step.tool
        if tool.terminal is not None:
            await self._tool_terminal(turn, tool, tool.terminal)
        elif tool.write is not None:
            await self._tool_write(turn, tool, tool.write)
        elif tool.read is not None:
            await self._tool_read(turn, tool, tool.read)
        elif tool.reported is not None:
            await self._tool_reported(turn, tool, tool.reported)

    async def _step_permission(self, turn: Turn, step: PermissionStep) -> None:
        spec = step.permission
        self._permissions += 1
        tool_call_id = spec.id or f"perm-{self._permissions}"
        kinds = {o.id: o.kind for o in spec.options}
        turn.awaiting_permission = True
        try:
            reply = await self.client.request_permission(
                session_id=turn.session_id,
                tool_call=ToolCallUpdate(
                    tool_call_id=tool_call_id, title=spec.title, kind=spec.kind, status="pending"
                ),
                options=[
                    PermissionOption(option_id=o.id, name=o.name, kind=o.kind) for o in spec.options
                ],
            )
        finally:
            turn.awaiting_permission = False
        outcome = reply.outcome
        chosen = outcome.option_id if isinstance(outcome, AllowedOutcome) else "cancelled"
        allowed = kinds.get(chosen, "reject_once").startswith("allow")
        self._log.event("permission", toolCallId=tool_call_id, outcome=chosen, allowed=allowed)
        if turn.cancel_requested:
            raise asyncio.CancelledError  # the turn ends "cancelled", as for any other step
        await self._run_steps(turn, step.then if allowed else step.otherwise)

    async def _step_usage(self, turn: Turn, step: UsageStep) -> None:
        u = step.usage
        cost = Cost(amount=u.cost.amount, currency=u.cost.currency) if u.cost else None
        await self._update(
            turn, UsageUpdate(session_update="usage_update", used=u.used, size=u.size, cost=cost)
        )

    async def _step_sleep(self, turn: Turn, step: SleepStep) -> None:
        await asyncio.sleep(step.sleep)

    async def _step_crash(self, turn: Turn, step: CrashStep) -> None:
        await self._out.flush()  # what was sent before the crash reaches the client
        os._exit(step.crash)

    async def _step_hang(self, turn: Turn, step: HangStep) -> None:
        await _forever()

    async def _step_garbage(self, turn: Turn, step: GarbageStep) -> None:
        await self._out.line(step.garbage)

    async def _step_raw(self, turn: Turn, step: RawStep) -> None:
        await self._out.line(json.dumps(step.raw, separators=(",", ":")))

    async def _step_big(self, turn: Turn, step: BigStep) -> None:
        await self._update(turn, acp.update_agent_message_text(_filler(step.big)))

    async def _step_flood(self, turn: Turn, step: FloodStep) -> None:
        spec = step.flood
        await self._update(
            turn, acp.start_tool_call(spec.id, "flood", kind="execute", status="in_progress")
        )
        # Each update carries the next piece only (not the text so far), so the wire
        # carries `bytes` in all. ACP's tool_call_update content replaces what the call
        # showed; every piece starts with its own number, so each is new content a
        # client shows (a repeat of the same text would rightly show nothing new).
        text = _filler(min(spec.chunk, spec.bytes))
        for number, offset in enumerate(range(0, spec.bytes, spec.chunk)):
            size = min(spec.chunk, spec.bytes - offset)
            piece = (f"{number:08d}" + text)[:size]
            await self._update(turn, acp.update_tool_call(spec.id, content=[_text(piece)]))
        await self._update(turn, acp.update_tool_call(spec.id, status="completed"))

    async def _step_error(self, turn: Turn, step: ErrorStep) -> None:
        raise RequestError(step.error.code, step.error.message, step.error.data)

    # --- the tools ---

    async def _tool_terminal(self, turn: Turn, tool: ToolSpec, spec: TerminalSpec) -> None:
        client, sid = self.client, turn.session_id
        await self._update(
            turn,
            acp.start_tool_call(
                tool.id,
                tool.title,
                kind=tool.kind,
                status="pending",
                raw_input={"command": spec.command, "args": spec.args},
            ),
        )
        try:
            created = await client.create_terminal(
                session_id=sid,
                command=spec.command,
                args=spec.args,
                cwd=turn.cwd,
                output_byte_limit=spec.output_byte_limit,
            )
        except RequestError as exc:
            await self._fail(turn, tool.id, exc)
            return
        terminal_id = created.terminal_id
        ref = acp.tool_terminal_ref(terminal_id)
        try:
            await self._update(
                turn, acp.update_tool_call(tool.id, status="in_progress", content=[ref])
            )
            timed_out = False
            try:
                await asyncio.wait_for(
                    client.wait_for_terminal_exit(session_id=sid, terminal_id=terminal_id),
                    spec.timeout_s,
                )
            except TimeoutError:
                timed_out = True
                await client.kill_terminal(session_id=sid, terminal_id=terminal_id)
            output = await client.terminal_output(session_id=sid, terminal_id=terminal_id)
            await client.release_terminal(session_id=sid, terminal_id=terminal_id)
        except RequestError as exc:
            with contextlib.suppress(RequestError):
                await client.release_terminal(session_id=sid, terminal_id=terminal_id)
            await self._fail(turn, tool.id, exc)
            return
        except asyncio.CancelledError:
            await self._abandon_terminal(turn, tool.id, terminal_id)
            raise
        status = output.exit_status
        exit_code = status.exit_code if status else None
        ok = not timed_out and exit_code == 0
        await self._update(
            turn,
            acp.update_tool_call(
                tool.id,
                status="completed" if ok else "failed",
                content=[ref, _text(output.output)],
                raw_output={
                    "exit_code": exit_code,
                    "signal": status.signal if status else None,
                    "timed_out": timed_out,
                    "truncated": output.truncated,
                },
            ),
        )

    async def _abandon_terminal(self, turn: Turn, tool_id: str, terminal_id: str) -> None:
        # Cancelled: stop the command, give the terminal back, and say so before answering.
        for request in (self.client.kill_terminal, self.client.release_terminal):
            with contextlib.suppress(RequestError, ConnectionError):
                await request(session_id=turn.session_id, terminal_id=terminal_id)
        await self._update(
            turn, acp.update_tool_call(tool_id, status="failed", content=[_text("cancelled")])
        )

    async def _tool_write(self, turn: Turn, tool: ToolSpec, spec: WriteSpec) -> None:
        path = turn.absolute(spec.path)
        await self._update(
            turn,
            acp.start_tool_call(
                tool.id,
                tool.title,
                kind=tool.kind,
                status="pending",
                locations=[ToolCallLocation(path=path)],
                raw_input={"path": path, "content": spec.content},
            ),
        )
        try:
            old: str | None = (
                await self.client.read_text_file(session_id=turn.session_id, path=path)
            ).content
        except RequestError:
            old = None  # a new file, as far as the client says
        try:
            await self.client.write_text_file(
                session_id=turn.session_id, path=path, content=spec.content
            )
        except RequestError as exc:
            await self._fail(turn, tool.id, exc)
            return
        diff = acp.tool_diff_content(path, spec.content, old)
        await self._update(turn, acp.update_tool_call(tool.id, status="completed", content=[diff]))

    async def _tool_read(self, turn: Turn, tool: ToolSpec, spec: ReadSpec) -> None:
        path = turn.absolute(spec.path)
        await self._update(
            turn,
            acp.start_tool_call(
                tool.id,
                tool.title,
                kind=tool.kind,
                status="pending",
                locations=[ToolCallLocation(path=path)],
                raw_input={"path": path},
            ),
        )
        try:
            read = await self.client.read_text_file(
                session_id=turn.session_id, path=path, line=spec.line, limit=spec.limit
            )
        except RequestError as exc:
            await self._fail(turn, tool.id, exc)
            return
        await self._update(
            turn, acp.update_tool_call(tool.id, status="completed", content=[_text(read.content)])
        )

    async def _tool_reported(self, turn: Turn, tool: ToolSpec, spec: ReportedSpec) -> None:
        await self._update(
            turn,
            acp.start_tool_call(
                tool.id,
                tool.title,
                kind=tool.kind,
                status="in_progress",
                raw_input={"command": spec.command},
            ),
        )
        await self._update(
            turn,
            acp.update_tool_call(
                tool.id,
                status="completed" if spec.exit_code == 0 else "failed",
                content=[_text(spec.output)],
                raw_output={"output": spec.output, "exit_code": spec.exit_code},
            ),
        )

    async def _fail(self, turn: Turn, tool_id: str, exc: RequestError) -> None:
        await self._update(
            turn,
            acp.update_tool_call(
                tool_id,
                status="failed",
                content=[_text(_error_text(exc))],
                raw_output={"error": exc.to_error_obj()},
            ),
        )


# --- the program ------------------------------------------------------------------------------


async def serve(script: Script, state: StateFile, log: Log) -> None:
    """Speak ACP on stdin/stdout until stdin ends (or, with ignore_shutdown, forever)."""
    # The SDK's own default for run_agent: a line (one message) may be up to 50 MB.
    reader, writer = await acp.stdio_streams(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    agent = ScriptedAgent(script, state, log, RawOut(writer))
    observers = [log.observe] if log.enabled else []
    # The SDK finds handlers by name and answers method_not_found for those not defined
    # here (session/list, fork, ...), so the agent need not be the whole Agent protocol.
    await acp.run_agent(cast(acp.Agent, agent), writer, reader, observers=observers)
    if script.ignore_shutdown:
        await _forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A scriptable ACP agent for tests.")
    parser.add_argument("script", type=Path, help="the YAML script")
    parser.add_argument("--state", type=Path, help="JSON file kept across restarts")
    parser.add_argument("--log", type=Path, help="JSON lines: what the client sent")
    args = parser.parse_args(argv)
    try:
        script = load_script(args.script)
        state = StateFile(args.state)
    except ScriptError as exc:
        print(f"acp_agent: {args.script}: {exc}", file=sys.stderr)
        return EXIT_BAD_SCRIPT
    if script.ignore_shutdown:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log = Log(args.log)
    asyncio.run(serve(script, state, log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
