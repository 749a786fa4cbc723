"""The agent process: lifecycle, signals, worker, heartbeat and shutdown (SPEC §5.1).

States: INIT (config, lock) → REGISTERED (RPC served, heartbeat on) → IDLE ⇄ BUSY
(⇄ WAITING) → SHUTDOWN. Everything runs on one asyncio loop; the durable files are
written synchronously because an fsync'd append is what makes an acknowledgement true.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ateam._fs import Damage, DamageLog, atomic_write, probe_room
from ateam._jsonl import storage_error
from ateam.agent.fence import STATE_LOCK_WAIT_S, StateDirLock, WriteFence
from ateam.agent.handoff import HandoffStore
from ateam.agent.history import History, SummaryLog
from ateam.agent.kb import AgentKb
from ateam.agent.plan import read_plan
from ateam.agent.prompts import Prompts
from ateam.agent.queue import DurableQueue, QueueItem
from ateam.agent.router import ModelRouter, Reason
from ateam.agent.runner import (
    HISTORY_CANDIDATES,
    TaskControl,
    TaskOutcome,
    TaskRunner,
    cancel_quietly,
)
from ateam.agent.service import PLAN_FILE, build_methods
from ateam.agent.teamfeed import TeamFeed
from ateam.agent.usage import UsageLedger
from ateam.agent.watchdog import Stall, StallWatch
from ateam.agent.workctx import SummaryOutcome, WorkingContext
from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.connection import RedisTarget, bus_error, ensure_reachable, make_client
from ateam.bus.context import ContextStore
from ateam.bus.events import EventPublisher, EventType
from ateam.bus.keys import Keys
from ateam.bus.lock import InstanceLock
from ateam.bus.registry import AgentEntry, Heartbeat, Registry
from ateam.bus.rpc import RpcServer
from ateam.config import AgentConfig
from ateam.config.schema import Approval
from ateam.constants import (
    BACKOFF_WARN_AFTER,
    GRACE_MARKER_S,
    HANDOFF_BLOCK_TOKENS,
    HANDOFF_LOCK_WAIT_S,
    HEARTBEAT_INTERVAL_S,
    PROMPT_POLL_S,
    SHUTDOWN_HARD_S,
    SHUTDOWN_SOFT_S,
    STORAGE_PROBE_BYTES,
    STORAGE_PROBE_S,
    SWITCH_BACK_CHECK_S,
    WORKER_CRASH_WINDOW_S,
    WORKER_RESTART_DELAY_S,
)
from ateam.errors import (
    EXIT_LOCK_LOST,
    EXIT_WORKER_CRASHED,
    AteamError,
    Code,
    LockLost,
    StorageError,
    StorageFull,
    WorkerStalled,
    agent_exit_code,
)
from ateam.paths import ateam_home
from ateam.providers import build_provider
from ateam.providers.base import Provider, estimate_tokens
from ateam.redact import Redactor
from ateam.tools.approvals import Answer, ApprovalRequest, Approvals
from ateam.tools.builtin import default_registry
from ateam.tools.fs import Sandbox
from ateam.tools.pty import ExecLimits
from ateam.tools.registry import ToolContext, ToolRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Queued:
    """What :meth:`Agent.enqueue` did with an input."""

    item: QueueItem
    created: bool
    """``False``: the request id was seen before and its first item is returned."""
    redacted: int
    """Secrets replaced by ``****`` before the text was queued."""


class AgentState(StrEnum):
    INIT = "init"
    REGISTERED = "registered"
    IDLE = "idle"
    BUSY = "busy"
    WAITING = "waiting"
    BLOCKED = "blocked"
    """The state directory cannot be written (a full disk): nothing is taken, the work
    stays queued, and the agent resumes by itself once a write succeeds."""
    SHUTDOWN = "shutdown"


class Agent:
    """One agent identity, running until shut down."""

    def __init__(
        self,
        config: AgentConfig,
        target: RedisTarget,
        provider: Provider,
        *,
        redactor: Redactor | None = None,
        tools: ToolRegistry | None = None,
        repl: bool = False,
        project_root: Path | None = None,
        killed_before: bool = False,
    ) -> None:
        self.config = config
        self._killed_before = killed_before
        """The previous process was killed from outside: its item in progress keeps
        its attempts (see :meth:`DurableQueue.open`)."""
        self.repl = repl
        """Run the local REPL (SPEC §5.7) on this process's terminal once serving."""
        self._repl_task: asyncio.Task[None] | None = None
        self.id = config.id
        self.target = target
        self.keys = Keys(target.namespace)
        self.redactor = redactor or Redactor()
        self.state = AgentState.INIT
        self.client: aioredis.Redis = make_client(target)
        self.lock = InstanceLock(self.client, self.keys, self.id)
        self.write_fence = WriteFence(self.lock, self.id)
        """Every durable store checks it before writing (issue 9: fencing covers files)."""
        self.state_lock = StateDirLock(config.state_dir, self.id)
        fence = self.write_fence
        self.queue = DurableQueue(config.state_dir, fence=fence)
        self.history = History(config.state_dir, fence=fence)
        self.router = ModelRouter(config, factory=build_provider, current=provider.model)
        self.router.providers[provider.model] = provider
        self.ledger = UsageLedger(config.state_dir, fence=fence)
        self.router.on_usage = self._usage_changed
        self._usage_dirty = False
        self._refused_for_room: StorageFull | None = None
        """An input refused for lack of room: the worker waits, blocked, until there is."""
        self.events = EventPublisher(
            self.client,
            self.keys,
            self.id,
            offset_file=config.state_dir / "offset",
            fence=lambda: self.lock.fence,
            on_fenced=self._on_fenced,
            on_connection_change=self._on_bus_change,
            scrub=self._scrub_event,
        )
        self._task_events = 0
        """Events that belong to a task: the stall watch's sign of progress."""
        self.entry = AgentEntry(
            id=self.id,
            name=config.name,
            project=config.project,
            model=provider.model,
            primary=config.model,
            cwd=str(config.cwd),
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=time.time(),
        )
        self.heartbeat = Heartbeat(self.client, self.keys, self.entry)
        self.summaries = SummaryLog(config.state_dir, fence=fence, scrub=self.redactor.redact)
        self.handoff = HandoffStore(
            config.state_dir,
            model=provider.model,
            project=config.project,
            mirror=self._mirror_handoff,
            lock_timeout_s=HANDOFF_LOCK_WAIT_S,
            fence=fence,
            scrub=self.redactor.redact_obj,
        )
        self.team = TeamFeed(
            ContextStore(self.client, self.keys, redactor=self.redactor), config.project, self.id
        )
        self.workctx = WorkingContext(config.state_dir, fence=fence, scrub=self.redactor.redact_obj)
        self._recent_actions: list[str] = []
        self._files_touched: list[str] = []
        self.tool_registry, self._plugin_warnings = (
            (tools, []) if tools is not None else default_registry()
        )
        self.policy = self.tool_registry.for_agent(
            config.tools_allow, config.tools_deny, config.approval
        )
        self.prompts = Prompts(
            config.base_prompt_path,
            config.overlay_prompt_path,
            agent_id=self.id,
            toolbox=self.policy.schemas,
        )
        self.approvals = Approvals(
            on_change=self._on_approvals_change,
            announce=self._announce_approval,
            resolved=self._approval_resolved,
        )
        self.sandbox = Sandbox(config.cwd, config.fs_whitelist)
        self.kb = AgentKb(
            agent_id=config.id,
            agent_dir=config.dir,
            project_root=project_root,
            home=ateam_home(),
            allowed_roots=[self.sandbox.root, *self.sandbox.whitelist],
            redact=self.redactor.redact,
        )
        spec = config.exec
        self.exec_limits = ExecLimits(
            timeout_s=spec.timeout_s,
            cpu_s=spec.cpu_s,
            output_limit=spec.output_limit_bytes,
            inherit_env=spec.inherit_env,
            # Passed-through secrets reach the tools; their values are masked (cli.py).
            env_allow=(*spec.env_allow, *config.spec.tools.env_passthrough),
        )
        self.runner = TaskRunner(
            self.events,
            self.history,
            provider,
            system_prompt=self.prompts.effective,
            summaries=self._logged_summaries,
            policy=self.policy,
            approvals=self.approvals,
            tool_context=self._tool_context,
            max_iterations=config.spec.max_iterations,
            approval_timeout_s=config.spec.tools.approval_timeout_s,
            fence=lambda: self.lock.fence,
            scrub=self.redactor.redact_obj,
            scrub_text=self.redactor.redact,
            scrub_bytes=self.redactor.redact_bytes,
            router=self.router,
            on_switch=self._on_switch,
            on_turn=self._on_turn,
            extra_context=self._extra_context,
            handoff_context=self._handoff_context,
            compact=self._compact,
            compacted_until=_read_marker(config.state_dir / "context" / "compacted_until"),
        )
        self._prompt_reload_pending = False
        self.rpc: RpcServer | None = None
        self.control: TaskControl | None = None
        self.owner: str | None = None
        self.exit_code = 0
        self.bus_connected = True
        self._stop = asyncio.Event()
        self._work = asyncio.Event()
        self._registry_dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._mirror_next: bytes | None = None
        self._mirror_task: asyncio.Task[None] | None = None
        self._last_idle_compaction = -1e9
        self._last_failed_compaction = -1e9
        self._worker: asyncio.Task[None] | None = None
        watch = config.spec.watchdog
        self.stall = StallWatch(
            progress=lambda: self._task_events,
            paused=lambda: self.state is AgentState.WAITING,
            alert=self._on_stall,
            clear=self._on_stall_cleared,
            stall_after_s=watch.stall_after_s,
            cancel_after_s=watch.cancel_after_s,
        )

    @property
    def provider(self) -> Provider:
        """The model the agent currently talks to."""
        return self.router.provider()

    # lifecycle ------------------------------------------------------------------------

    async def run(self) -> int:
        """Run until shutdown; returns the process exit code (SPEC §2)."""
        # Signals first: a SIGTERM that arrives during start-up still shuts down cleanly.
        self._install_signals()
        try:
            try:
                await self._start()
            except RedisError as exc:
                raise bus_error(exc) from exc
        except AteamError as exc:
            await self._abandon_start()
            print(
                exc.message if exc.code == "duplicate.instance" else exc.one_line(), file=sys.stderr
            )
            await self._close_client()
            return agent_exit_code(exc)
        await self._stop.wait()
        await self._shutdown()
        return self.exit_code

    async def _start(self) -> None:
        await ensure_reachable(self.client, self.target)
        await self.lock.acquire()
        self.config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The files too: a frozen predecessor on this host keeps them until it exits.
        await self.state_lock.acquire(wait_s=STATE_LOCK_WAIT_S, keep_alive=self.lock.refresh)
        # Read under the state lock: a predecessor still saving its counts has exited.
        self.router.usage = self.ledger.load()
        self.entry.usage = self.router.usage_view()  # spent before a restart counts too
        report = self.queue.open(killed=self._killed_before)
        self.history.open()  # a torn tail it repairs is reported through its damage log
        self.prompts.load()
        await self.events.start()
        if self.prompts.last_warning:
            self.events.emit(EventType.WARN, msg=self.prompts.last_warning, code="prompt.load")
        for warning in self._plugin_warnings:
            self.events.emit(EventType.WARN, msg=warning, code="tool.plugin")
        for warning in self.lock.warnings:
            self.events.emit(EventType.WARN, msg=warning, code="lock.takeover")
        for message in report.messages():
            log.warning("%s", message)
            self.events.emit(EventType.WARN, msg=message, code="queue.recovered")
        # Damage found while opening waits in each store's log until now; damage found
        # later (a corrupt file read mid-work) is announced as it is found.
        for damage in self._damage_logs():
            damage.listen(self._on_damage)
        self.handoff.read()  # a corrupt record is reported now, not at the first switch
        self.entry.fence = self.lock.fence
        self.entry.queue_len = len(self.queue)
        # What the model would see now, rebuilt from disk: after a restart /ctx and
        # memory.stats are right before the first task runs.
        self.runner.context_tokens = self.runner.build_context().tokens
        self._update_ctx_pct()
        self._set_state(AgentState.REGISTERED)
        await self.heartbeat.beat()
        self.rpc = RpcServer(
            self.client,
            self.keys,
            self.id,
            build_methods(self),
            current_owner=self.current_owner,
            on_bad_request=self._on_bad_request,
        )
        self.rpc.start()
        self._tasks.append(asyncio.create_task(self._maintain(), name="maintain"))
        self._tasks.append(asyncio.create_task(self._lock_watch(), name="lock-watch"))
        self.stall.start()
        self._tasks.append(asyncio.create_task(self._watch_prompts(), name="prompts"))
        self._worker = asyncio.create_task(self._supervise_worker(), name="worker")
        self._set_state(AgentState.IDLE)
        if self.repl:
            self._repl_task = asyncio.create_task(self._run_repl(), name="repl")
        # Everything loaded so far (config schemas, SDKs) lives as long as the process:
        # keep it out of the collector so full collections don't pause event streaming.
        gc.freeze()
        log.info("agent %s serving (fence %s, pid %s)", self.id, self.lock.fence, os.getpid())

    async def _abandon_start(self) -> None:
        """Undo a half-done start: stop what started, give the lock back if we took it."""
        if self.rpc is not None:
            await self.rpc.aclose()
        for task in self._tasks:
            await cancel_quietly(task)
        await cancel_quietly(self._worker)
        await self.stall.aclose()
        with contextlib.suppress(Exception):
            await self.events.aclose(flush_timeout=0.5)
        self.state_lock.release()
        if self.lock.fence:
            with contextlib.suppress(Exception):
                await self.lock.release()

    async def _run_repl(self) -> None:
        """The local REPL; a REPL that fails only loses the REPL, never the agent."""
        from ateam.agent.repl import AgentRepl

        try:
            await AgentRepl(self).run()
        except Exception:
            log.exception("the local REPL stopped")

    def request_shutdown(self, code: int = 0) -> None:
        if not self._stop.is_set():
            self.exit_code = code
            self._stop.set()

    async def _shutdown(self) -> None:
        """Stop RPC, stop the worker, fsync, leave the registry, release the lock, close."""
        self._set_state(AgentState.SHUTDOWN)
        # The REPL goes first: it gives the terminal back before the shutdown lines print.
        await cancel_quietly(self._repl_task)
        # After a lost lock the bus is presumed gone: don't spend seconds on each step.
        bus_wait = 0.3 if self.exit_code == EXIT_LOCK_LOST else 2.0
        if self.rpc is not None:
            await self.rpc.aclose(wait=bus_wait)
        # Approvals first, so the model reads why its call did not run.
        self.approvals.reject_all("the agent is shutting down")
        if self.control is not None:
            self.control.interrupt()
        self._work.set()  # wake an idle worker so it sees the stop
        if self._worker is not None:
            # Cooperative first; a model that sends nothing for a while or a command
            # that ignores SIGINT gets the hard stop, then the worker is cancelled.
            await asyncio.wait({self._worker}, timeout=SHUTDOWN_SOFT_S)
            if not self._worker.done() and self.control is not None:
                self.control.interrupt(hard=True)
                await asyncio.wait({self._worker}, timeout=SHUTDOWN_HARD_S)
            await cancel_quietly(self._worker)
        self._save_usage()
        self.history.close()
        self.queue.close()
        with contextlib.suppress(Exception):  # a KB that failed to close loses nothing
            self.kb.close()
        for task in self._tasks:
            await cancel_quietly(task)
        await self.stall.aclose()
        await self.events.aclose(flush_timeout=bus_wait)
        # Each bus step is bounded: a frozen Redis must not keep a stopping agent alive
        # (the lock then simply expires on its own).
        await _bounded(self.heartbeat.leave(), bus_wait)
        # The files go before the identity: a successor that wins the lock finds them free.
        self.state_lock.release()
        await _bounded(self.lock.release(), bus_wait)
        await _bounded(self.client.aclose(), bus_wait)
        log.info("agent %s stopped", self.id)

    async def _close_client(self) -> None:
        await _bounded(self.client.aclose())

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        handlers: dict[signal.Signals, Callable[[], object]] = {
            signal.SIGINT: self.interrupt,
            signal.SIGTERM: self.request_shutdown,
            signal.SIGHUP: self._reload_prompts,
        }
        for signum, handler in handlers.items():
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, handler)

    # state and registry ------------------------------------------------------------

    def _set_state(self, state: AgentState) -> None:
        if state == self.state:
            return
        self.state = state
        self.entry.state = state.value
        self.events.emit(EventType.STATE, state=state.value)
        self._registry_dirty.set()

    def _scrub_event(self, fields: dict[str, Any]) -> dict[str, Any]:
        # Every event passes here once, so this is where a task's progress is counted;
        # ownership and registry notices carry no task id and do not count.
        if "task_id" in fields:
            self._task_events += 1
        scrubbed: dict[str, Any] = self.redactor.redact_obj(fields)
        return scrubbed

    def touch_registry(self) -> None:
        self._registry_dirty.set()

    async def current_owner(self) -> tuple[str, str] | None:
        """The owning session and its token's SHA-256 (``OwnerClaim``), or None.

        Notices a change the moment it is read. Both fields in one HMGET: the RPC owner
        check runs this on every mutating call.
        """
        raw, digest = await self.client.hmget(self.keys.owner(self.id), ["session", "token_sha256"])
        owner = raw.decode() if isinstance(raw, bytes) else None
        if owner != self.owner:
            self.events.emit(EventType.OWNERSHIP, owner=owner, previous=self.owner)
            self.owner = owner
            self.entry.owner = owner
            self._registry_dirty.set()
        if owner is None:
            return None
        token_sha256 = digest.decode("ascii", "replace") if isinstance(digest, bytes) else ""
        return owner, token_sha256

    async def _maintain(self) -> None:
        """Heartbeat, lock refresh and owner watch, every 3 s or sooner on news."""
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the
            # cancel that shutdown sends, leaving this loop refreshing the lock forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HEARTBEAT_INTERVAL_S):
                    await self._registry_dirty.wait()
            if self._stop.is_set():
                return
            changed = self._registry_dirty.is_set()
            self._registry_dirty.clear()
            self._save_usage()
            try:
                await self.lock.refresh()
                await self.current_owner()
                self.entry.queue_len = len(self.queue)
                self.entry.fence = self.lock.fence
                await self.heartbeat.beat(changed=changed)
            except LockLost as exc:
                self._lock_lost(str(exc))
                return
            except CONNECTION_ERRORS as exc:
                log.warning("heartbeat failed: %s", exc)
            if self.lock.expired_locally():
                self._lock_lost("could not refresh the instance lock before it expired")
                return

    async def _lock_watch(self) -> None:
        """Stop work when the lock may have lapsed, even if a Redis call hangs.

        The maintenance loop checks too, but only between calls; on a silent network
        partition its refresh can block for as long as TCP takes to give up.
        """
        while not self._stop.is_set():
            await asyncio.sleep(0.5)
            if self.lock.expired_locally():
                self._lock_lost("could not refresh the instance lock before it expired")
                return

    def _lock_lost(self, why: str) -> None:
        if self._stop.is_set():
            return
        self.write_fence.mark_lost()  # from now on nothing of ours reaches the files
        log.error("stopping: %s", why)
        print(f"ateam agent {self.id}: stopping: {why}", file=sys.stderr)
        if self.control is not None:
            self.control.interrupt(hard=True)
        self.request_shutdown(EXIT_LOCK_LOST)

    def _on_fenced(self) -> None:
        self._lock_lost("another process holds the instance lock (fenced)")

    def _on_bus_change(self, connected: bool, failures: int) -> None:
        self.bus_connected = connected
        if not connected and failures == BACKOFF_WARN_AFTER:
            log.warning("Redis unreachable after %d attempts; still retrying", failures)
            # Buffered like every event: consoles see it once the bus is back.
            self.events.emit(
                EventType.WARN,
                msg=f"Redis was unreachable for {failures} consecutive attempts",
                code="redis.unavailable",
            )
        if connected and failures == 0:
            self._registry_dirty.set()

    def _usage_changed(self) -> None:
        # Written by the maintenance loop within a heartbeat (3 s), after each task and
        # on shutdown, not after every model call: a kill -9 loses at most a heartbeat
        # of counts, and a busy tool loop does not fsync a file per call.
        self._usage_dirty = True

    def _save_usage(self) -> None:
        """Persist the usage counts if they changed, and show them in the registry."""
        if not self._usage_dirty or self.write_fence.lost:
            return
        self.entry.usage = self.router.usage_view()
        # A failure keeps the counts in memory, dirty, for the next try.
        self._usage_dirty = not self.ledger.save_quietly(self.router.usage)

    def _on_bad_request(self, message: str) -> None:
        self.events.emit(EventType.WARN, msg=f"rejected a request: {message}", code="bad_request")

    # work ----------------------------------------------------------------------------

    def enqueue(
        self,
        text: str,
        *,
        source: str,
        rid: str | None = None,
        caller: str | None = None,
        trace_id: str | None = None,
    ) -> Queued:
        """Durably queue an input, its secrets redacted first. A repeated rid is not re-added.

        Every way in (the ``input`` RPC, the REPL, its inbox) comes through here, so no
        secret reaches the queue file, the history, the handoff or an event.
        """
        if rid is not None:
            existing = self.queue.find_rid(rid)
            if existing is not None:
                return Queued(existing, created=False, redacted=0)
        clean = self.redactor.scrub(text)
        try:
            item = self.queue.append(
                clean.text,
                source=source,
                rid=rid,
                caller=caller,
                trace_id=trace_id or os.urandom(6).hex(),
            )
        except StorageFull as exc:
            # Refused, not acknowledged; an idle worker turns blocked too, so /ps and
            # the consoles say why inputs are refused until there is room.
            self._refused_for_room = exc
            self._work.set()
            raise
        self.entry.queue_len = len(self.queue)
        self._work.set()
        self._registry_dirty.set()
        return Queued(item, created=True, redacted=clean.replaced)

    def enqueue_wakeup(self) -> None:
        """Tell the worker that items were added behind its back (e.g. a retry)."""
        self.entry.queue_len = len(self.queue)
        self._work.set()
        self._registry_dirty.set()

    def interrupt(self, *, hard: bool = False) -> str | None:
        if self.control is None or self.queue.current is None:
            return None
        self.control.interrupt(hard=hard)
        return self.queue.current.id

    # prompts -------------------------------------------------------------------------

    def _reload_prompts(self) -> None:
        """SIGHUP: reload now when idle, after the current task when busy."""
        self.request_prompt_reload("SIGHUP")

    def request_prompt_reload(self, reason: str) -> bool:
        """Reload the prompt files; returns whether it happened now (else after the task)."""
        if self.state in (AgentState.BUSY, AgentState.WAITING):
            if self._prompt_reload_pending:
                return False  # already queued: the 1 s poll must not repeat the notice
            self._prompt_reload_pending = True
            self.events.emit(
                EventType.PROMPT,
                action="reload_deferred",
                reason=reason,
                version=self.prompts.version,
            )
            return False
        self._apply_prompt_reload(reason)
        return True

    def _apply_prompt_reload(self, reason: str) -> None:
        self._prompt_reload_pending = False
        result = self.prompts.reload()
        if result.refused:
            self.events.emit(EventType.WARN, msg=result.refused, code="prompt.protected_violation")
        self.events.emit(
            EventType.PROMPT,
            action="reloaded",
            reason=reason,
            changed=result.changed,
            version=self.prompts.version,
        )

    def prompt_changed(self, reason: str) -> None:
        """The overlay was edited through ateam (``# text``, ``/sys edit``)."""
        self.events.emit(
            EventType.PROMPT, action="updated", reason=reason, version=self.prompts.version
        )

    async def _watch_prompts(self) -> None:
        """Poll the prompt files' mtimes every second (SPEC §5.6)."""
        while not self._stop.is_set():
            await asyncio.sleep(PROMPT_POLL_S)
            try:
                if self.prompts.changed_on_disk():
                    self.request_prompt_reload("file changed")
            except OSError as exc:
                log.warning("prompt poll failed: %s", exc)

    # approvals and tools ---------------------------------------------------------------

    def _on_approvals_change(self, open_requests: int) -> None:
        if open_requests:
            self._set_state(AgentState.WAITING)
        elif self.state is AgentState.WAITING:
            self._set_state(AgentState.BUSY if self.control is not None else AgentState.IDLE)

    def _announce_approval(self, request: ApprovalRequest) -> None:
        kind = EventType.DIFF_PROPOSED if request.kind == "diff" else EventType.APPROVAL_REQUEST
        self.events.emit(kind, **request.to_wire())

    def _approval_resolved(self, request: ApprovalRequest, answer: Answer) -> None:
        self.events.emit(
            EventType.APPROVAL_RESOLVED,
            request_id=request.id,
            decision=answer.decision.value,
            by=answer.by,
            reason=answer.reason,
            task_id=request.task_id,
            trace_id=request.trace_id,
        )

    def _tool_context(
        self,
        item: QueueItem,
        approval: Approval,
        on_output: Callable[[bytes], None],
        control: TaskControl,
    ) -> ToolContext:
        return ToolContext(
            agent_id=self.id,
            cwd=self.config.cwd,
            task_id=item.id,
            trace_id=item.trace_id,
            sandbox=self.sandbox,
            approval=approval,
            on_output=on_output,
            exec_limits=self.exec_limits,
            track=control.track,
            plan_path=self.config.dir / PLAN_FILE,
            redact=self.redactor.redact,
            list_agents=self._list_agents,
            memory=self.workctx,
            context_items=ContextStore(self.client, self.keys, redactor=self.redactor),
            kb=self.kb,
        )

    async def _list_agents(self) -> list[dict[str, Any]]:
        views = await Registry(self.client, self.keys).list()
        return [view.to_json() for view in views]

    async def _supervise_worker(self) -> None:
        """Restart a crashed worker once after 1 s; a second crash within 5 s exits 15."""
        last_crash: float | None = None
        while not self._stop.is_set():
            try:
                await self._work_loop()
                return
            except asyncio.CancelledError:
                raise
            except LockLost as exc:  # a write was fenced off: no crash, no restart here
                self._lock_lost(exc.message)
                return
            except Exception as exc:
                now = time.monotonic()
                log.exception("worker crashed")
                self.events.emit(EventType.ERROR, msg=f"worker crashed: {exc!r}")
                if last_crash is not None and now - last_crash <= WORKER_CRASH_WINDOW_S:
                    print(f"ateam agent {self.id}: worker crashed twice", file=sys.stderr)
                    self.request_shutdown(EXIT_WORKER_CRASHED)
                    return
                last_crash = now
                await asyncio.sleep(WORKER_RESTART_DELAY_S)

    async def _work_loop(self) -> None:
        while not self._stop.is_set():
            if self._refused_for_room is not None:
                full, self._refused_for_room = self._refused_for_room, None
                # The refused write is not retried (its sender was told), so the size to
                # wait for is a probe's, not the refused input's: a huge input refused
                # must not keep small ones waiting.
                await self._until_written(full, lambda: None, room=STORAGE_PROBE_BYTES)
                continue
            try:
                item = self.queue.current or self.queue.take()
            except StorageFull as exc:
                # The start cannot be recorded, so nothing is taken: the item stays first
                # in line and is taken once there is room.
                await self._until_written(exc, self.queue.take)
                continue
            if item is None:
                if self._prompt_reload_pending:
                    self._apply_prompt_reload("deferred until the agent was idle")
                self._set_state(AgentState.IDLE)
                self._work.clear()
                await self._upkeep("switch-back check", self._maybe_switch_back())
                # Wake now and then while idle: the primary may have recovered.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(SWITCH_BACK_CHECK_S):
                        await self._work.wait()
                continue
            await self._process(item)

    async def _process(self, item: QueueItem) -> None:
        self.control = control = TaskControl()
        self.entry.current_task = item.id
        self.entry.queue_len = len(self.queue)
        self._set_state(AgentState.BUSY)
        await self.team.refresh()  # what the team shared since, for this task's turns

        def stop_stalled() -> None:
            control.interrupt(hard=True, reason=f"stalled: no progress for {self._stall_s()}")

        full: StorageFull | None = None
        try:
            outcome = await self.stall.step(
                f"task {item.id}", self.runner.run(item, control), stop=stop_stalled
            )
        except WorkerStalled as exc:
            # The task ignored its hard stop: end it here, as the runner would have.
            outcome = TaskOutcome(False, f"stalled: {exc.message}", "", 0, 0)
            self.events.emit(
                EventType.TASK_END,
                ok=False,
                error=outcome.error,
                task_id=item.id,
                trace_id=item.trace_id,
            )
        except asyncio.CancelledError:
            if self._stop.is_set() and not self.write_fence.lost:
                self.queue.release(item.id)  # torn down mid-task: runs again after restart
            raise
        except LockLost:
            raise  # nothing more of ours may be written; the successor re-runs the item
        except StorageFull as exc:  # the runner could not record a turn
            full = exc
            outcome = TaskOutcome(False, exc.message, "", 0, 0)
        except Exception as exc:
            self.queue.done(item.id, ok=False, error=self.redactor.redact(repr(exc)))
            self.entry.last_error = self.redactor.redact(repr(exc))
            raise
        finally:
            self.control = None
            self.entry.current_task = None
            if self._prompt_reload_pending:
                self._apply_prompt_reload("deferred until the task ended")
        if self.write_fence.lost:
            return  # fenced: the queue file is the successor's now
        if full is not None:
            # As far as the files know the task has not run (a turn is missing), so it
            # goes back to the head with its attempt given back, once that can be written.
            await self._until_written(full, lambda: self.queue.release(item.id))
            return
        if self._stop.is_set() and not outcome.ok:
            # Cut short by shutdown or a lost lock, not by a person: the acknowledged
            # input goes back to the head and runs again after the restart.
            self.queue.release(item.id)
            return
        await self._finish(item, outcome)

    async def _finish(self, item: QueueItem, outcome: TaskOutcome) -> None:
        """Record the end of a task that ran, then the bookkeeping and upkeep after it."""
        try:
            self.queue.done(item.id, ok=outcome.ok, error=outcome.error)
        except StorageFull as exc:
            # The task ran and its turns are on disk: only its end is missing, and that
            # is what is written once there is room, not a second run.
            end = functools.partial(self.queue.done, item.id, ok=outcome.ok, error=outcome.error)
            if not await self._until_written(exc, end):
                return
        if outcome.error and outcome.error not in ("interrupted", "cancelled"):
            self.entry.last_error = self.redactor.redact(outcome.error)
            self._remember("failure", self.workctx.add_failure, outcome.error, task=item.id)
        self._task_finished(item, outcome.ok)
        self._save_usage()
        self.entry.queue_len = len(self.queue)
        self._registry_dirty.set()
        if self._remember("task count", self.workctx.note_task_done):
            await self._upkeep("summary", self.summarize("every 5 tasks"))
        self._update_ctx_pct()
        await self._upkeep("context check", self._check_context_fill())
        self._registry_dirty.set()

    def _remember(self, what: str, write: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One working-context write after a task; ``None`` if it failed.

        The working context helps the model, it is not the record of the work: a write
        that fails (a full disk included) is logged and the work goes on.
        """
        try:
            return write(*args, **kwargs)
        except StorageError as exc:
            log.warning("working context (%s) not updated: %s", what, exc.one_line())
            return None

    async def _until_written(
        self, full: StorageFull, write: Callable[[], object], *, room: int | None = None
    ) -> bool:
        """Blocked until ``write``, the write that failed, succeeds; ``False`` if stopped first.

        A full disk pauses work rather than failing it: nothing is taken meanwhile and
        the item in hand stays queued. Once a scratch write of real size succeeds, the
        write that failed is retried, so the agent resumes by itself when there is room
        (issue 10; SPEC §12: an acknowledged input is never lost).
        """
        if room is None:
            room = max(STORAGE_PROBE_BYTES, int(full.detail.get("bytes") or 0))
        reason = (
            f"{full.message}; nothing is taken until it can be written "
            f"(retrying every {STORAGE_PROBE_S:g} s)"
        )
        log.warning("blocked: %s", reason)
        self.entry.alert = f"blocked: {reason}"
        self.events.emit(
            EventType.WARN, msg=f"blocked: {reason}", code=full.code, path=full.detail.get("path")
        )
        self._set_state(AgentState.BLOCKED)
        started = time.monotonic()
        try:
            while True:
                # Waits on the stop event, so a shutdown never waits out a probe interval.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STORAGE_PROBE_S):
                        await self._stop.wait()
                if self._stop.is_set():
                    return False
                try:
                    self._probe_room(room)
                    write()
                except StorageFull:
                    continue
                waited = time.monotonic() - started
                # Inputs refused meanwhile were refused, not kept: nothing to wait for.
                self._refused_for_room = None
                log.warning("storage writable again after %.0f s; resuming", waited)
                self._set_state(AgentState.BUSY)
                return True
        finally:
            if self.entry.alert == f"blocked: {reason}":
                self.entry.alert = None
            self._registry_dirty.set()

    def _probe_room(self, size: int) -> None:
        state_dir = self.config.state_dir
        try:
            probe_room(state_dir, size)
        except OSError as exc:
            raise storage_error("state", "no room for a write in", state_dir, exc) from exc

    def _damage_logs(self) -> tuple[DamageLog, ...]:
        """Every store's damage reports (issue 10: damage is reported, never absorbed)."""
        return (
            self.queue.damage,
            self.history.damage,
            self.summaries.damage,
            self.handoff.damage,
            self.workctx.damage,
            self.ledger.damage,
        )

    def _on_damage(self, damage: Damage) -> None:
        # Logged by the store already; this makes it an event every console shows.
        self.events.emit(
            EventType.WARN, msg=damage.message(), code=Code.STORAGE_DAMAGED, **damage.fields()
        )

    async def _upkeep(self, name: str, work: Awaitable[Any]) -> None:
        """One upkeep step between tasks: bounded, watched, and never fatal to the worker.

        The item before it is already done and acknowledged work waits behind it, so a
        step that fails or hangs costs at most ``watchdog.step_timeout_s`` of delay,
        never the worker.
        """
        limit = self.config.spec.watchdog.step_timeout_s
        try:
            async with asyncio.timeout(limit):
                await self.stall.step(name, work)
        except TimeoutError:
            self.events.emit(
                EventType.WARN,
                msg=f"{name} took longer than {limit:g}s and was abandoned; work goes on",
                code="worker.step_timeout",
            )
        except WorkerStalled as exc:
            self.events.emit(EventType.WARN, msg=exc.message, code=exc.code)
        except LockLost as exc:
            self._lock_lost(exc.message)
        except Exception as exc:
            log.exception("%s failed", name)
            self.events.emit(
                EventType.ERROR, msg=f"{name} failed: {exc!r}; work goes on", code="internal"
            )

    def _stall_s(self) -> str:
        return f"{self.config.spec.watchdog.cancel_after_s:g}s"

    def _on_stall(self, stall: Stall) -> None:
        """The stall watch saw a silent step: everyone sees it (events, ps, /ps)."""
        message = stall.message()
        log.warning("%s", message)
        self.entry.alert = message
        ids = {}
        if self.queue.current is not None:
            ids = {"task_id": self.queue.current.id, "trace_id": self.queue.current.trace_id}
        self.events.emit(
            EventType.WARN,
            msg=message,
            code="worker.stalled",
            step=stall.step,
            idle_s=round(stall.idle_s, 1),
            cancelling=stall.cancelling,
            **ids,
        )
        self._registry_dirty.set()

    def _on_stall_cleared(self) -> None:
        if self.entry.alert is not None:
            self.entry.alert = None
            self._registry_dirty.set()

    async def _check_context_fill(self) -> None:
        """Context at or over ``switch_at``: summarise; still full, a larger window (SPEC §7)."""
        threshold = 100 * self.config.spec.switching.switch_at
        if self.entry.ctx_pct < threshold:
            return
        # A compaction that just failed is not retried after every task: each try is a
        # model call, and a model that cannot summarise would slow every task down.
        cooldown = self.config.spec.switching.cooldown_s
        if time.monotonic() - self._last_failed_compaction >= cooldown:
            if not await self._compact({}):
                self._last_failed_compaction = time.monotonic()
        self.runner.context_tokens = self.runner.build_context().tokens
        self._update_ctx_pct()
        if self.entry.ctx_pct < threshold:
            return
        current = self.router.current
        window = self.provider.context_window
        bigger = self.router.larger_fallback(current, window)
        if bigger is not None:
            await self._on_switch(current, bigger, Reason.CONTEXT_FULL, {})
            self._update_ctx_pct()

    # models, handoff, working context ---------------------------------------------

    async def _on_switch(
        self, from_model: str, to_model: str, reason: Any, ids: dict[str, Any]
    ) -> None:
        """Move to ``to_model``: verify the handoff, record the switch, tell everyone."""
        why = str(reason) if reason is not None else Reason.PINNED.value
        record, validity = self.handoff.show()
        if not validity.ok:
            # Stale or missing: write a fresh one from what the agent knows now.
            self._refresh_handoff(status="in_progress" if self.control else "idle")
            record, validity = self.handoff.show()
        if not validity.ok:
            self.events.emit(
                EventType.WARN,
                msg=f"switching {from_model} → {to_model} with an incomplete handoff "
                f"({validity.reason})",
                code="handoff.incomplete",
                **ids,
            )
            why = Reason.INCOMPLETE_HANDOFF.value
        else:
            self._announce_handoff("used", record or {}, to=to_model, **ids)
        self.router.switch(to_model)
        usage = {"ctx_pct": self.entry.ctx_pct, **self.router.usage_view()}
        try:
            self.handoff.record_switch(
                from_model=from_model,
                to_model=to_model,
                reason=why,
                usage_percent=self.entry.ctx_pct,
            )
        except AteamError as exc:  # the switch itself must still happen
            log.warning("handoff history not written: %s", exc)
        self.runner.expect_handoff()
        self.entry.model = to_model
        self.entry.last_switch = {
            "from": from_model,
            "to": to_model,
            "reason": why,
            "ts": time.time(),
        }
        self.events.emit(
            EventType.MODEL_SWITCH,
            **{"from": from_model},
            to=to_model,
            reason=why,
            usage=usage,
            **ids,
        )
        log.warning("model switch %s -> %s (%s)", from_model, to_model, why)
        self._registry_dirty.set()

    async def _maybe_switch_back(self) -> None:
        """Idle: return to the primary when it is healthy and the context fits (SPEC §7).

        Runs on the worker while it has nothing to do, so the probe is abandoned the
        moment work arrives: a queued task never waits for a health check.
        """
        blocker = self.router.switch_back_blocker(context_tokens=self.runner.context_tokens)
        if blocker == "context" and self._compaction_due():
            # Moved for room: the only way back is a smaller context, so summarise.
            await self._compact({})
            self.runner.context_tokens = self.runner.build_context().tokens
            self._update_ctx_pct()
            blocker = self.router.switch_back_blocker(context_tokens=self.runner.context_tokens)
        if blocker is not None:
            return
        primary = self.router.primary
        probe = asyncio.create_task(self.router.probe(primary), name="probe")
        work = asyncio.create_task(self._work.wait(), name="probe-interrupt")
        try:
            await asyncio.wait({probe, work}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            work.cancel()
        if not probe.done():
            await cancel_quietly(probe)
            return
        if probe.cancelled() or probe.exception() is not None or not probe.result():
            return
        if self._work.is_set() or self._stop.is_set():
            return  # work arrived as the probe finished: switch back when next idle
        await self._on_switch(self.router.current, primary, Reason.SWITCH_BACK, {})

    def _compaction_due(self) -> bool:
        now = time.monotonic()
        if now - self._last_idle_compaction < self.config.spec.switching.cooldown_s:
            return False
        self._last_idle_compaction = now
        return True

    async def use_model(self, model: str | None) -> dict[str, Any]:
        """``/use MODEL`` pins a model (``None`` unpins)."""
        previous = self.router.current
        if model is not None and model in self.config.models:
            self.router.provider(model)  # a model that cannot be built is refused here
        self.router.pin(model)
        self.entry.pinned = self.router.pinned
        if self.router.current != previous:
            self.router.current = previous  # _on_switch does the move and the records
            await self._on_switch(previous, model or previous, Reason.PINNED, {})
        self._registry_dirty.set()
        return {"current": self.router.current, "pinned": self.router.pinned}

    def _on_turn(self, item: QueueItem, turn: dict[str, Any]) -> None:
        """After every recorded turn: keep the handoff current (SPEC §7)."""
        for call in turn.get("tool_calls") or ():
            args = call.get("args") or {}
            what = args.get("cmd") or args.get("path") or ""
            self._recent_actions.append(f"{call.get('name')} {what}".strip()[:200])
            if call.get("name") in ("fs.write", "fs.patch") and args.get("path"):
                if args["path"] not in self._files_touched:
                    self._files_touched.append(str(args["path"]))
        del self._recent_actions[:-10]
        del self._files_touched[:-50]
        self._refresh_handoff(status="in_progress", description=item.text)

    def _task_finished(self, item: QueueItem, ok: bool) -> None:
        self._refresh_handoff(status="done" if ok else "failed", description=item.text)

    def _refresh_handoff(self, *, status: str, description: str | None = None) -> None:
        task: dict[str, Any] = {"status": status, "project": self.config.project}
        if description is not None:
            task["description"] = description[:2000]
        decisions = [d.get("decision", "") for d in self.workctx.decisions()[-5:]]
        failures = [
            {key: f.get(key, "") for key in ("description", "root_cause", "resolution")}
            for f in self.workctx.failures()[-3:]
        ]
        # A failure nobody resolved yet still blocks; a resolved one is a lesson.
        blockers = [f["description"] for f in failures if not f["resolution"]]
        try:
            record = self.handoff.update(
                {
                    "model": {"current": self.router.current, "usage_percent": self.entry.ctx_pct},
                    "task": task,
                    "context": {
                        "recent_actions": list(self._recent_actions),
                        "decisions": decisions,
                        "next_steps": self._next_steps(),
                        "blockers": blockers,
                        "failures": failures,
                    },
                    "files_touched": list(self._files_touched),
                },
                author=self.router.current,
            )
        except AteamError as exc:  # a handoff that cannot be written must not stop work
            log.warning("handoff not written: %s", exc)
            return
        self._announce_handoff("refreshed", record)

    def _announce_handoff(self, action: str, record: Mapping[str, Any], **ids: Any) -> None:
        """The ``handoff`` event: written (``refreshed``) or taken up by a switch (``used``)."""
        context = record.get("context") or {}
        self.events.emit(
            EventType.HANDOFF,
            action=action,
            sequence=record.get("sequence"),
            checksum=record.get("checksum"),
            ready=record.get("handoff_ready"),
            next_steps=len(context.get("next_steps") or ()),
            **ids,
        )

    def _next_steps(self) -> list[str]:
        """What comes next: the plan's open items, else the queued inputs (SPEC §7)."""
        steps = _plan_steps(read_plan(self.config.dir / PLAN_FILE))
        if not steps:
            steps = [item.text for item in self.queue.pending()[:NEXT_STEPS_MAX]]
        return [_one_line(step, 200) for step in steps[:NEXT_STEPS_MAX]]

    def _extra_context(self) -> str:
        """The working context (SPEC §8) and the team's context items (SPEC §9)."""
        blocks = (self.workctx.render(), self.team.render())
        return "\n\n".join(block for block in blocks if block)

    def _logged_summaries(self) -> list[dict[str, Any]]:
        """Summaries for the context from ``summary.jsonl``: the newest, as a fallback.

        The working context's running summary folds every earlier summary in, and it is
        in every turn's context already; the log's copy is only needed when that file
        is gone or damaged, so the same text is never paid for twice.
        """
        if self.workctx.summary():
            return []
        return self.summaries.all()[-1:]

    def _handoff_context(self) -> str:
        """The block the first call after a switch carries: the handoff and the summary."""
        record = self.handoff.read() or {}
        lines = [
            "## Handoff",
            f"You are taking over from model {record.get('author', '?')} mid-work.",
            *_handoff_lines(record),
        ]
        # The rolling summary is already in the working-context block every turn carries;
        # this block stays small so the first context after a switch stays in budget.
        block = "\n".join(lines)
        limit = HANDOFF_BLOCK_TOKENS * 4  # ~4 characters a token
        return block if len(block) <= limit else block[: limit - 1] + "…"

    def propose_offload(self, name: str | None = None) -> dict[str, Any]:
        """A spec for a fresh agent to take over this one's work (SPEC §11 ``/offload``).

        The handoff is refreshed first, so the new agent starts from this moment; it is
        its first task, beside the overlay as its system prompt. Nothing changes here:
        this agent keeps working, and the console decides what (if anything) is started.
        """
        current = self.queue.current
        if current is not None:
            self._refresh_handoff(status="in_progress", description=current.text)
        else:
            with contextlib.suppress(AteamError):  # re-stamped so it is not stale
                self.handoff.update({}, author=self.router.current)
        record, validity = self.handoff.show()
        record = record or {}
        checksum = str(record.get("checksum", "none"))
        state = "verified" if validity.ok else f"not verified: {validity.reason}"
        summary = self.workctx.summary().strip()
        lines = [
            f"You take over work offloaded by agent {self.id} (its handoff {checksum}, {state}).",
            *_handoff_lines(record),
        ]
        if summary:
            lines += ["Summary of its work so far:", summary]
        pending = [item.text for item in self.queue.pending()][:5]
        if pending:
            lines.append(f"Still queued at {self.id} (it keeps these unless you are told):")
            lines.extend(f"- {text[:300]}" for text in pending)
        lines.append("Continue the task from here; say what you do first.")
        return {
            "from": self.id,
            "project": self.config.project,
            "name": name or f"{self.config.name}-2",
            "cwd": str(self.config.cwd),
            "model": self.router.current,
            "system_prompt": self.prompts.overlay_text(),
            "kb_ids": [],
            "task": current.text if current is not None else "",
            "first_task": "\n".join(lines),
            "handoff": {"checksum": checksum, "valid": validity.ok, "reason": validity.reason},
        }

    def _mirror_handoff(self, data: bytes) -> None:
        """Mirror the record into Redis: one sender, always the newest bytes, in order."""
        self._mirror_next = data
        if self._mirror_task is not None and not self._mirror_task.done():
            return
        with contextlib.suppress(RuntimeError):  # no running loop (shutdown)
            self._mirror_task = asyncio.get_running_loop().create_task(self._send_mirror())

    async def _send_mirror(self) -> None:
        while self._mirror_next is not None:
            data, self._mirror_next = self._mirror_next, None
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self.client.set(self.keys.handoff(self.id), data)

    async def _compact(self, ids: dict[str, Any]) -> bool:
        """Summarise the oldest turns still in the context and leave them out of it.

        Only turns after the previous compaction, outside the running task, and as many
        as fit half the model's window (the summary call must fit too) are summarised;
        the marker moves to the newest of them and never back. ``False``: nothing
        changed, the raw turns stay.
        """
        current = self.runner._current_task
        marker = self.runner.compacted_until
        candidates = [
            t
            for t in self.history.tail(HISTORY_CANDIDATES)
            if float(t.get("ts") or 0) > marker and t.get("task_id") != current
        ]
        room = self.provider.context_window // 2
        fed: list[dict[str, Any]] = []
        used = 0
        for turn in candidates:  # oldest first
            cost = estimate_tokens(str(turn.get("content") or "")) + 8
            if fed and used + cost > room:
                break
            fed.append(turn)
            used += cost
        if not fed:
            return False
        outcome = await self._summarize_turns(fed)
        self.events.emit(
            EventType.CONTEXT,
            action="summarized" if outcome.ok else "summary_failed",
            reason="context too long",
            attempts=outcome.attempts,
            error=outcome.reason,
            turns=len(fed),
            **ids,
        )
        if not outcome.ok:
            return False  # nothing dropped: the raw turns stay, the router decides
        newest = max(float(t.get("ts") or 0) for t in fed)
        self.runner.compacted_until = max(marker, newest)
        self.write_fence("the compaction marker")
        _write_marker(
            self.config.state_dir / "context" / "compacted_until", self.runner.compacted_until
        )
        return True

    async def summarize(self, why: str) -> dict[str, Any]:
        """Re-summarise the working context from recent history (SPEC §8)."""
        outcome = await self._summarize_turns(self.history.tail(200))
        self.events.emit(
            EventType.CONTEXT,
            action="summarized" if outcome.ok else "summary_failed",
            reason=why,
            attempts=outcome.attempts,
            error=outcome.reason,
        )
        return {"ok": outcome.ok, "attempts": outcome.attempts, "reason": outcome.reason}

    async def _summarize_turns(self, turns: list[dict[str, Any]]) -> SummaryOutcome:
        """One summary, bounded in time: a slow model delays work, it never holds it.

        A summary that was made is also appended to ``state/summary.jsonl`` (SPEC §5.3),
        the record of every summary and of the turns it covers.
        """
        limit = self.config.spec.watchdog.step_timeout_s
        model = self.router.current
        try:
            async with asyncio.timeout(limit):
                outcome = await self.workctx.summarize(self.provider, turns, model=model)
        except TimeoutError:
            return SummaryOutcome(False, None, 1, f"timed out after {limit:g}s")
        if outcome.ok and outcome.summary:
            stamps = [float(t.get("ts") or 0) for t in turns] or [time.time()]
            self.summaries.append(outcome.summary, window=(stamps[0], stamps[-1]), model=model)
        return outcome

    def _update_ctx_pct(self) -> None:
        if self.provider.context_window:
            self.entry.ctx_pct = round(
                100 * self.runner.context_tokens / self.provider.context_window, 1
            )

    async def restart_marker(self) -> None:
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self.heartbeat.grace(GRACE_MARKER_S)


def _read_marker(path: Path) -> float:
    try:
        return float(path.read_text(encoding="ascii").strip() or 0)
    except (OSError, ValueError):
        return 0.0


def _write_marker(path: Path, value: float) -> None:
    """Write the compaction marker; a full disk is ``storage.full`` like every store's."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(path, f"{value!r}\n".encode("ascii"))
    except OSError as exc:
        raise storage_error("context", "cannot write", path, exc) from exc


async def _bounded(step: Awaitable[Any], seconds: float = 2.0) -> None:
    """Run one shutdown step against the bus, giving up quietly after ``seconds``."""
    with contextlib.suppress(TimeoutError, *CONNECTION_ERRORS):
        async with asyncio.timeout(seconds):
            await step


NEXT_STEPS_MAX = 5
"""Next steps a handoff carries: enough to go on, few enough to stay in budget."""
_CHECKLIST = re.compile(r"^\s*[-*+]\s+\[( |x|X)\]\s+(.+)$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.+)$")


def _plan_steps(plan: str) -> list[str]:
    """The open checklist items of a Markdown plan, or its list items if it has no boxes."""
    boxes = [_CHECKLIST.match(line) for line in plan.splitlines()]
    if any(boxes):
        return [m.group(2).strip() for m in boxes if m is not None and m.group(1) == " "]
    items = (_LIST_ITEM.match(line) for line in plan.splitlines())
    return [m.group(1).strip() for m in items if m is not None]


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _handoff_lines(record: Mapping[str, Any]) -> list[str]:
    """The task, context lists and touched files of a handoff record, as prompt lines."""
    task = record.get("task") or {}
    context = record.get("context") or {}
    lines = [f"Task: {task.get('description', '')} (status: {task.get('status', '?')})"]
    for title, key in (
        ("Recent actions", "recent_actions"),
        ("Decisions", "decisions"),
        ("Next steps", "next_steps"),
        ("Blockers", "blockers"),
    ):
        items = context.get(key) or []
        if items:
            lines.append(f"{title}:")
            lines.extend(f"- {item}" for item in items)
    failures = [f for f in context.get("failures") or () if isinstance(f, Mapping)]
    if failures:
        lines.append("Failures (root cause → resolution, where known):")
        for failure in failures:
            cause = failure.get("root_cause") or "cause unknown"
            fix = failure.get("resolution") or "unresolved"
            lines.append(f"- {failure.get('description', '')} ({cause} → {fix})")
    if record.get("files_touched"):
        lines.append("Files touched: " + ", ".join(record["files_touched"][-20:]))
    return lines
