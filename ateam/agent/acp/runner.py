"""The ACP task runner: one queued input = one ``session/prompt`` to the agent's runtime.

A :class:`~ateam.agent.loop.task.TaskRunner` beside the native one: the worker hands it
items exactly as it hands them to :class:`~ateam.agent.native.runner.NativeRunner`, so
the queue, its acknowledgements and replays, the stall watch, ownership and the board
work unchanged for a runtime. For each item: ``task.start``; the user turn recorded; the
runtime started and its session opened if need be; the prompt sent — with the agent's
role, working context and handoff in front when the session is new, and the team's
context items for this task in front always; its updates streamed and recorded (see
:mod:`ateam.agent.acp.stream`); ``task.end``.

A board task that runs in a worktree of its own (``worktree: task``: ``cwd_for`` names
it) gets a runtime of its own for the task: started in the worktree, its session new
(never the agent's stored one, which stays as it was), its files and terminals confined
to the worktree, and stopped once the task is over (:meth:`AcpRunner.end_task_sessions`;
a task_done gate's refusal goes on in the same session). Other inputs use the agent's
long-lived session in its configured cwd.

Stopping: an interrupt sends ``session/cancel`` and SIGINT to the commands ateam runs for
the runtime; a runtime that has not ended the prompt 5 s later, or ``cancel --hard``,
has its whole process group killed, and is started again at the next task.

Failures: a runtime that crashes mid-prompt is started again and the prompt sent once
more (the item is not lost; its attempt is counted); rate limits, overloads and the
other ``runtime.*`` errors go through the model router, which retries, switches to the
next fallback — another runtime or a native model, the handoff in its first prompt — or
fails the task with the one-line error. A switch to a native model hands the task to the
native runner (:class:`~ateam.agent.loop.task.HandOver`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import acp
from acp import schema

from ateam._fs import atomic_write
from ateam.agent.acp.catalog import find_command, install_hint, runtime_env
from ateam.agent.acp.editor import EditorClient
from ateam.agent.acp.session import McpServer, RuntimeSession
from ateam.agent.acp.stream import PromptStream
from ateam.agent.context.window import HISTORY_CANDIDATES, ContextSources, ContextWindow
from ateam.agent.loop.control import TaskControl
from ateam.agent.loop.task import HandOver, TaskOutcome, end_task
from ateam.agent.models.router import Action, ModelRouter, Reason
from ateam.agent.state.history import History
from ateam.agent.state.plan import PLAN_FILE
from ateam.agent.state.queue_item import QueueItem, TaskIds
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.config import AgentConfig
from ateam.config.schema import Approval, ModelEntry
from ateam.errors import (
    Code,
    LockLost,
    ProviderError,
    RuntimeAuth,
    RuntimeCrashed,
    RuntimeMissing,
    RuntimeStopped,
    StorageFull,
)
from ateam.providers.base import estimate_tokens
from ateam.redact import Redactor
from ateam.tools.approvals import Approvals
from ateam.tools.exec_values import ExecLimits, OutputRoom
from ateam.tools.fs import Sandbox
from ateam.tools.registry import ToolPolicy
from ateam.wire.turns import Turn

__all__ = ["SESSION_FILE", "AcpRunner", "RunnerHooks"]

log = logging.getLogger(__name__)

SESSION_FILE = "acp_sessions.json"
"""In the agent's ``state/``: runtime id → the ACP session id to load after a restart."""

CANCEL_GRACE_S = 5.0
"""How long a runtime has to end a cancelled prompt before its group is killed."""

CRASH_RETRIES = 2
"""Times one prompt is sent again after its runtime died under it."""


class RunnerHooks(Protocol):
    """What the runner asks of the agent around it (the native runner's hooks satisfy it)."""

    def fence(self) -> int: ...
    def scrub_turn(self, turn: Turn) -> Turn: ...
    def scrub_text(self, text: str) -> str: ...
    @property
    def redactor(self) -> Redactor: ...
    @property
    def output_room(self) -> OutputRoom | None: ...
    def on_turn(self, item: QueueItem, turn: Turn) -> None: ...
    async def switch_model(
        self, from_model: str, to_model: str, reason: Reason | None, ids: TaskIds
    ) -> None: ...


@dataclass
class _Progress:
    text: str = ""
    error: str | None = None
    code: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    prompts: int = 0


class AcpRunner:
    """Runs items on the agent's current runtime (one :class:`RuntimeSession` per runtime).

    Args:
        config: The agent.
        events: Where events go.
        history: Where turns are recorded.
        window: The context marks (the task in hand, a handoff due, the last size).
        sources: The agent's role, working context and handoff blocks.
        team_block: The team's context items for this task ("" for none).
        hooks: Fence, redaction, turn bookkeeping and model switches.
        router: Which model or runtime is current; retries and switches.
        sandbox: The agent's file sandbox.
        exec_limits: The agent's command limits and environment policy.
        policy: The agent's tool policy (what a permission request follows).
        approvals: Where requests wait for the owner.
        mcp_servers: What every session gets (ateam's MCP server, as this agent).
        on_mode: Told of the runtime's mode (for ``ps``).
        on_alert: Told when the runtime cannot work at all (missing, no login) and when
            it works again (``None``), for the alert ``ps`` shows.
        cwd_for: Where an item works when that is not the configured cwd (a board
            task's worktree), else ``None``.
    """

    def __init__(
        self,
        *,
        config: AgentConfig,
        events: EventPublisher,
        history: History,
        window: ContextWindow,
        sources: ContextSources,
        team_block: Callable[[], str],
        hooks: RunnerHooks,
        router: ModelRouter,
        sandbox: Sandbox,
        exec_limits: ExecLimits,
        policy: ToolPolicy | None,
        approvals: Approvals | None,
        mcp_servers: list[McpServer] | None = None,
        on_mode: Callable[[str | None], None] = lambda _: None,
        on_alert: Callable[[str | None], None] = lambda _: None,
        cwd_for: Callable[[QueueItem], Path | None] = lambda _: None,
    ) -> None:
        self._config = config
        self._events = events
        self._history = history
        self.window = window
        self._sources = sources
        self._team_block = team_block
        self._hooks = hooks
        self.router = router
        self._sandbox = sandbox
        self._limits = exec_limits
        self._policy = policy
        self._approvals = approvals
        self._mcp = mcp_servers or []
        self._on_mode = on_mode
        self._on_alert = on_alert
        self._cwd_for = cwd_for
        self.sessions: dict[str, RuntimeSession] = {}
        self.task_sessions: dict[tuple[str, Path], RuntimeSession] = {}
        """(runtime id, worktree cwd) → the session of the board task running there."""
        self._costs: dict[str, float] = {}
        self._ids: TaskIds = {}
        self._session_file = config.state_dir / SESSION_FILE

    # sessions ---------------------------------------------------------------------------

    def session_for(self, entry: ModelEntry) -> RuntimeSession:
        """The agent's connection to ``entry``'s runtime (made, not started, on first use)."""
        found = self.sessions.get(entry.id)
        if found is None:
            found = self._session(entry, self._config.cwd, self._sandbox, self._config.state_dir)
            self.sessions[entry.id] = found
        return found

    def task_session_for(self, entry: ModelEntry, cwd: Path) -> RuntimeSession:
        """The connection to ``entry``'s runtime for the task working in ``cwd`` (its
        worktree): the runtime runs there, and its files and terminals stay there."""
        found = self.task_sessions.get((entry.id, cwd))
        if found is None:
            # No state dir: the record there is the long-lived runtime's process group
            # (the next start kills what is left of it), which this one must not replace.
            found = self._session(entry, cwd, Sandbox(cwd, self._sandbox.whitelist), None)
            self.task_sessions[entry.id, cwd] = found
        return found

    def _session(
        self, entry: ModelEntry, cwd: Path, sandbox: Sandbox, state_dir: Path | None
    ) -> RuntimeSession:
        client = EditorClient(
            entry.id,
            events=self._events,
            sandbox=sandbox,
            exec_limits=self._limits,
            policy=self._policy,
            approvals=self._approvals,
            approval_timeout_s=self._config.spec.tools.approval_timeout_s,
            output_room=self._hooks.output_room,
        )
        return RuntimeSession(
            entry,
            client,
            env=runtime_env(entry, self._limits),
            cwd=cwd,
            state_dir=state_dir,
            mcp_servers=self._mcp,
            scrub=self._hooks.scrub_text,
            on_garbage=self._garbage,
            mode=self._mode_for_policy,
        )

    def _all_sessions(self) -> list[RuntimeSession]:
        return [*self.sessions.values(), *self.task_sessions.values()]

    def _mode_for_policy(self, modes: schema.SessionModeState) -> str | None:
        """The runtime mode that keeps ``ask`` in ateam a question to the owner."""
        approval = (
            self._policy.approval_for("os.exec") if self._policy is not None else Approval.ASK
        )
        return _pick_mode([m.id for m in modes.available_modes], approval)

    def _garbage(self, message: str) -> None:
        self._events.emit(EventType.WARN, msg=message, code="runtime.protocol", **self._ids)

    def _stored_sessions(self) -> dict[str, str]:
        try:
            data = json.loads(self._session_file.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _store_session(self, runtime: str, session_id: str | None) -> None:
        stored = self._stored_sessions()
        if session_id is None:
            stored.pop(runtime, None)
        else:
            stored[runtime] = session_id
        try:
            atomic_write(self._session_file, json.dumps(stored).encode())
        except OSError as exc:
            log.warning("the runtime's session id was not kept: %s", exc)

    def check_at_start(self) -> None:
        """Say at once, not at the first task, that the current runtime is not installed."""
        if not self.router.is_runtime():
            return
        entry = self._config.models[self.router.current]
        if find_command(entry, runtime_env(entry, self._limits)) is None:
            program = entry.command[0] if entry.command else "?"
            self._on_alert(f"runtime.missing: {program} not found; install: {install_hint(entry)}")

    async def close(self) -> None:
        """Stop every runtime this agent started (the agent stops)."""
        for session in self._all_sessions():
            await session.stop()
        self.task_sessions.clear()

    async def end_task_sessions(self) -> None:
        """The task is over: stop the runtimes started for it in its worktree (the agent
        runs one task at a time, so these are all of them)."""
        ending, self.task_sessions = list(self.task_sessions.values()), {}
        for session in ending:
            await session.stop()

    # the task ---------------------------------------------------------------------------

    async def run(self, item: QueueItem, control: TaskControl) -> TaskOutcome:
        ids = item.ids()
        self._ids = ids
        started = time.monotonic()
        control.approvals = self._approvals
        self.window.current_task = item.id
        if not control.continuing:
            self._events.emit(
                EventType.TASK_START,
                text=item.text,
                source=item.source,
                attempt=item.attempts,
                **ids,
            )
        progress = _Progress()
        try:
            await self._run(item, control, ids, progress)
        except (LockLost, StorageFull, HandOver):
            raise
        except Exception as exc:  # a bug: end this task, not the agent
            log.exception("task %s failed unexpectedly", item.id)
            progress.error = f"internal error: {type(exc).__name__}: {exc}"
            progress.code = Code.INTERNAL
            self._events.emit(EventType.ERROR, msg=progress.error, code="internal", **ids)
        finally:
            self._ids = {}
        return end_task(
            self._events,
            control,
            ids,
            started=started,
            error=progress.error,
            text=progress.text,
            tokens_in=progress.tokens_in,
            tokens_out=progress.tokens_out,
            iterations=progress.prompts,
            scrub=self._hooks.scrub_text,
            code=progress.code,
        )

    async def _run(
        self, item: QueueItem, control: TaskControl, ids: TaskIds, progress: _Progress
    ) -> None:
        rerun = self._has_user_turn(item.id)
        if not rerun:
            self._record(self._turn("user", item.text, item, source=item.source), item)
        attempt = 0
        crashes = 0
        tried: set[str] = set()
        while not control.interrupted.is_set():
            model = self.router.current
            tried.add(model)
            entry = self._config.models[model]
            try:
                await self._prompt(entry, item, control, ids, progress, rerun or crashes > 0)
                self._on_alert(None)
                return
            except ProviderError as exc:
                failure: ProviderError = exc
            if isinstance(failure, RuntimeMissing | RuntimeAuth):
                self._on_alert(f"{failure.code}: {failure.message}")
            if control.interrupted.is_set():
                return
            if isinstance(failure, RuntimeCrashed) and crashes < CRASH_RETRIES:
                crashes += 1
                self._events.emit(
                    EventType.WARN,
                    msg=f"{failure.message}; starting it again",
                    code=failure.code,
                    **ids,
                )
                continue
            decision = self.router.after_failure(model, failure, attempt)
            if decision.action is Action.RETRY:
                attempt += 1
                self._events.emit(
                    EventType.WARN,
                    msg=f"{model}: {failure.one_line()}; retrying in {decision.delay_s:.1f} s",
                    code="provider.retry",
                    **ids,
                )
                await _sleep_unless(control, decision.delay_s)
                continue
            if decision.action is Action.SWITCH and decision.to not in tried:
                assert decision.to is not None
                await self._hooks.switch_model(model, decision.to, decision.reason, ids)
                self.window.expect_handoff()
                attempt = 0
                if not self._config.models[decision.to].is_runtime:
                    raise HandOver(decision.to)
                continue
            progress.error, progress.code = failure.one_line(), failure.code
            self._events.emit(EventType.ERROR, msg=progress.error, code=failure.code, **ids)
            return

    async def _prompt(
        self,
        entry: ModelEntry,
        item: QueueItem,
        control: TaskControl,
        ids: TaskIds,
        progress: _Progress,
        again: bool,
    ) -> None:
        """One ``session/prompt`` of ``item`` on ``entry``'s runtime, to its end."""
        cwd = self._cwd_for(item)
        if cwd is None:
            session = self.session_for(entry)
        else:
            session = self.task_session_for(entry, cwd)
        if not session.alive or session.session_id is None:
            if cwd is None:  # the agent's own session: continued across its restarts
                continued = await session.open(self._stored_sessions().get(entry.id))
                self._store_session(entry.id, session.session_id)
            else:  # the task's: new, its worktree the session's cwd; nothing stored
                continued = await session.open(None)
            self._on_mode(session.mode)
        else:
            continued = True
        text = self._compose(item, new_session=not continued, again=again)
        stream = PromptStream(
            item,
            events=self._events,
            redactor=self._hooks.redactor,
            record=lambda turn: self._record(turn, item),
            turn=lambda role, content, **fields: self._turn(
                role, content, item, model=entry.id, **fields
            ),
            plan_path=self._config.dir / PLAN_FILE,
            on_mode=self._mode_changed,
            on_usage=lambda used, size, cost: self._usage(entry.id, used, size, cost),
        )
        client = session.client
        client.stream, client.control = stream, control
        stopper = _Stopper(session, control)
        control.process = stopper
        progress.prompts += 1
        try:
            response = await session.prompt([acp.text_block(text)])
        except ProviderError:
            stream.close(final=False)
            progress.text = "".join(stream.answer)
            if stopper.killed or not session.alive:
                await session.stop()  # started again, a new process, at the next prompt
            raise
        finally:
            client.stream = client.control = None
            control.process = None
            stopper.done()
            await client.terminals.close_all()
        answer = stream.close(final=response.stop_reason == "end_turn")
        progress.text = answer
        self._count(entry.id, response, text, answer, progress)
        self.window.handoff_due = False  # the runtime has seen it
        reason = str(response.stop_reason)
        if reason == "end_turn" or (reason == "cancelled" and control.interrupted.is_set()):
            return
        why = "cancelled the prompt itself" if reason == "cancelled" else f"stopped: {reason}"
        stopped = RuntimeStopped(f"runtime {entry.id} {why}", provider="acp", model=entry.id)
        progress.error, progress.code = stopped.one_line(), stopped.code
        self._events.emit(EventType.ERROR, msg=progress.error, code=stopped.code, **ids)

    def _compose(self, item: QueueItem, *, new_session: bool, again: bool) -> str:
        """The prompt's text: what a new session must be told first, then the input."""
        blocks: list[str] = []
        if new_session:
            # A runtime that starts afresh knows nothing of this agent: its role, what it
            # keeps in mind, and, when there is work before this, the handoff.
            blocks.append(self._sources.system_prompt())
            extra = self._sources.extra_context()
            if extra:
                blocks.append(extra)
            if self.window.handoff_due or self._history.turns(2)[:-1]:
                blocks.append(self._sources.handoff_context())
        else:
            team = self._team_block()
            if team:
                blocks.append(team)
            if self.window.handoff_due:
                # Back from another model: the session remembers its own turns, not
                # what was done meanwhile.
                blocks.append(self._sources.handoff_context())
        if again:
            blocks.append(
                "(This input was being worked on when the work was cut off by a restart. "
                "Check what was already done before doing it again.)"
            )
        blocks.append(item.text)
        return "\n\n".join(block for block in blocks if block.strip())

    # bookkeeping ------------------------------------------------------------------------

    def _count(
        self,
        model: str,
        response: schema.PromptResponse,
        prompt: str,
        answer: str,
        progress: _Progress,
    ) -> None:
        usage = response.usage
        tokens_in = usage.input_tokens if usage is not None else estimate_tokens(prompt)
        tokens_out = usage.output_tokens if usage is not None else estimate_tokens(answer)
        progress.tokens_in += tokens_in
        progress.tokens_out += tokens_out
        self.router.record_success(model, tokens_in, tokens_out)

    def _usage(self, model: str, used: int, size: int, cost: float | None) -> None:
        self.window.tokens = used
        if cost is None:
            return
        # The runtime reports the session's cost so far: the ledger takes the increase.
        before = self._costs.get(model, 0.0)
        self._costs[model] = cost
        if cost > before:
            self.router.add_cost(model, cost - before)

    def _mode_changed(self, mode: str) -> None:
        for session in self._all_sessions():
            if session.alive:
                session.mode = mode
        self._on_mode(mode)

    def _has_user_turn(self, task_id: str) -> bool:
        return self._history.has_input(task_id, HISTORY_CANDIDATES)

    def _record(self, turn: Turn, item: QueueItem) -> None:
        clean = self._hooks.scrub_turn(turn)
        self._history.append(clean)
        self._hooks.on_turn(item, clean)

    def _turn(
        self, role: str, content: str, item: QueueItem, *, source: str, **fields: object
    ) -> Turn:
        base: dict[str, object] = {
            "ts": time.time(),
            "role": role,
            "source": source,
            "content": content,
            "tokens_in": 0,
            "tokens_out": 0,
            "model": self.router.current,
            "task_id": item.id,
            "trace_id": item.trace_id,
            "fence": self._hooks.fence(),
        }
        return Turn.model_validate({**base, **fields})


class _Stopper:
    """The task's running "process" as :class:`TaskControl` stops it: the runtime's prompt."""

    def __init__(self, session: RuntimeSession, control: TaskControl) -> None:
        self._session = session
        self._control = control
        self._watch: asyncio.Task[None] | None = None
        self.killed = False

    def interrupt(self) -> None:
        self._session.client.terminals.interrupt_all()
        if self._watch is None:
            self._watch = asyncio.create_task(self._cancel_then_kill())

    def kill(self) -> None:
        self.killed = True
        self._session.kill_now()

    async def _cancel_then_kill(self) -> None:
        await self._session.cancel()
        await asyncio.sleep(CANCEL_GRACE_S)
        # Still here: the prompt did not end. The runtime ignores the cancel.
        log.warning(
            "runtime %s ignored the cancel for %g s: killing it", self._session.name, CANCEL_GRACE_S
        )
        self.kill()

    def done(self) -> None:
        if self._watch is not None:
            self._watch.cancel()


def _pick_mode(available: list[str], approval: Approval) -> str | None:
    """The runtime mode nearest the agent's policy for commands, by the modes' own names."""
    wanted = _MODE_NAMES[approval]
    for name in wanted:
        if name in available:
            return name
    return None


# Mode ids runtimes use, best first: Claude Code (default, acceptEdits, plan,
# bypassPermissions), Codex (read-only, auto, full-access), Gemini CLI (default, yolo).
_MODE_NAMES: dict[Approval, tuple[str, ...]] = {
    Approval.ASK: ("default", "ask", "read-only", "untrusted"),
    Approval.ALLOW: ("bypassPermissions", "full-access", "yolo", "auto"),
    Approval.DENY: ("plan", "read-only"),
}


async def _sleep_unless(control: TaskControl, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await control.interrupted.wait()
