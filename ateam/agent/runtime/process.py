"""The agent process: its lifecycle and signals (SPEC §5.1).

States: INIT (config, lock) → REGISTERED (RPC served, heartbeat on) → IDLE ⇄ BUSY
(⇄ WAITING) → SHUTDOWN. Everything runs on one asyncio loop; the durable files are
written synchronously because an fsync'd append is what makes an acknowledgement true.

:class:`Agent` starts the parts :mod:`ateam.agent.runtime.build` wired (lock, stores, events,
RPC, the upkeep loops, the worker, the REPL), stops them in order, and turns signals
into a stop, an interrupt or a prompt reload. The work loop lives in
:mod:`ateam.agent.loop.worker`, the bus upkeep in :mod:`ateam.agent.loop.upkeep`, model switching
in :mod:`ateam.agent.loop.switching`, compaction in :mod:`ateam.agent.context.compaction` and the
handoff and offload in :mod:`ateam.agent.context.successor`; what the RPC service and the REPL may
use of a running agent are the small protocols of :mod:`ateam.agent.runtime.port`, which
:class:`Agent` satisfies by handing out those parts and by the few calls below that
need more than one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from ateam._fs import Damage
from ateam.agent.loop.control import TaskControl, cancel_quietly
from ateam.agent.loop.status import AgentState
from ateam.agent.loop.worker import Queued
from ateam.agent.runtime.build import Parts, ReplRunner, build_parts
from ateam.agent.state.fence import STATE_LOCK_GRACE_S, STATE_LOCK_WAIT_S
from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.connection import RedisTarget, bus_error, ensure_reachable
from ateam.bus.events import EventType
from ateam.bus.guard import check_eviction
from ateam.bus.identity import proven
from ateam.bus.rpc import RpcServer
from ateam.config import AgentConfig
from ateam.constants import SHUTDOWN_HARD_S, SHUTDOWN_SOFT_S
from ateam.errors import AteamError, Code, Exit, agent_exit_code
from ateam.providers.base import Provider
from ateam.redact import Redactor
from ateam.tools.registry import ToolRegistry
from ateam.wire.results import (
    MemoryStatsResult,
    ModelUseResult,
    OffloadProposal,
    StatusResult,
    SummarizeResult,
)

__all__ = ["Agent", "AgentState", "Queued"]

log = logging.getLogger(__name__)


class Agent:
    """One agent identity, running until shut down.

    Args:
        config: The agent.
        target: The bus it joins.
        provider: Its current model.
        redactor: Masks secrets everywhere.
        tools: The tool registry; the built-ins and plugins without.
        repl: Run the local REPL (SPEC §5.7) on this process's terminal once serving.
        project_root: The project's root, for the ``project`` knowledge base.
        killed_before: The previous process was killed from outside: its item in
            progress keeps its attempts (see :meth:`DurableQueue.open`).
        parts: The parts, built already (a test swapping one); built from the rest if
            not given.
    """

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
        parts: Parts | None = None,
    ) -> None:
        if parts is None:
            parts = build_parts(
                config,
                target,
                provider,
                redactor=redactor,
                tools=tools,
                repl=repl,
                project_root=project_root,
            )
        self.parts = parts
        self._killed_before = killed_before
        # What the RPC service, the REPL, the CLI and the tests use of the parts.
        self.config = config
        self.id = config.id
        self.target = target
        self.keys = parts.keys
        self.client = parts.client
        self.redactor = parts.redactor
        self.lock = parts.lock
        self.events = parts.events
        self.entry = parts.status.entry
        self.queue = parts.queue
        self.history = parts.history
        self.summaries = parts.summaries
        self.handoff = parts.handoff
        self.workctx = parts.workctx
        self.router = parts.router
        self.policy = parts.policy
        self.prompts = parts.prompts
        self.approvals = parts.approvals
        self.sandbox = parts.sandbox
        self.kb = parts.kb
        self.runner = parts.runner
        self._status = parts.status
        self.rpc: RpcServer | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._worker: asyncio.Task[None] | None = None
        self._repl_task: asyncio.Task[None] | None = None

    # what the parts know --------------------------------------------------------------

    @property
    def state(self) -> AgentState:
        return self._status.state

    @property
    def exit_code(self) -> int:
        return self._status.exit_code

    @property
    def control(self) -> TaskControl | None:
        """The running task's control; ``None`` between tasks."""
        return self._status.control

    @property
    def owner(self) -> str | None:
        return self.parts.upkeep.owner

    @property
    def bus_connected(self) -> bool:
        return self.parts.upkeep.bus_connected

    @property
    def provider(self) -> Provider:
        """The model the agent currently talks to."""
        return self.router.provider()

    @property
    def _stop(self) -> asyncio.Event:
        return self._status.stop

    @property
    def _mirror_task(self) -> asyncio.Task[None] | None:
        return self.parts.mirror.task

    # lifecycle ------------------------------------------------------------------------

    async def run(self) -> int:
        """Run until shutdown; returns the process exit code (SPEC §2)."""
        # Signals first: a SIGTERM that arrives during start-up still shuts down cleanly.
        self._install_signals()
        try:
            try:
                await self.start()
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

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Come up (SPEC §5.1): reach the bus, take the lock and the state directory,
        recover the queue, register, serve RPC and start the worker.

        The agent then works until :meth:`stop` (or a signal, under :meth:`run`).
        """
        parts, status = self.parts, self._status
        await ensure_reachable(self.client, self.target)
        # Before the lock: on a server that may evict it, the lock guarantees nothing.
        eviction_risk = await check_eviction(self.client, self.target)
        self.config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The files speak first: a running instance here keeps them even when Redis
        # lost its lock key (evicted, flushed), and must not be replaced by this one.
        await parts.state_lock.refuse_a_running_holder(grace_s=STATE_LOCK_GRACE_S)
        await self.lock.acquire()
        # The files too: a frozen predecessor on this host keeps them until it exits.
        await parts.state_lock.acquire(wait_s=STATE_LOCK_WAIT_S, keep_alive=self.lock.refresh)
        # Read under the state lock: a predecessor still saving its counts has exited.
        self.router.usage = parts.ledger.load()
        self.entry.usage = self.router.usage_view()  # spent before a restart counts too
        report = self.queue.open(killed=self._killed_before)
        self.history.open()  # a torn tail it repairs is reported through its damage log
        self.prompts.load()
        await self.events.start()
        if eviction_risk is not None:  # accepted, and said at every start
            self.events.emit(EventType.WARN, msg=eviction_risk, code=Code.REDIS_EVICTION_POLICY)
        if self.prompts.last_warning:
            self.events.emit(EventType.WARN, msg=self.prompts.last_warning, code="prompt.load")
        for warning in parts.plugin_warnings:
            self.events.emit(EventType.WARN, msg=warning, code="tool.plugin")
        for warning in self.lock.warnings:
            self.events.emit(EventType.WARN, msg=warning, code="lock.takeover")
        for message in report.messages():
            log.warning("%s", message)
            self.events.emit(EventType.WARN, msg=message, code="queue.recovered")
        # Damage found while opening waits in each store's log until now; damage found
        # later (a corrupt file read mid-work) is announced as it is found.
        for damage in parts.damage_logs():
            damage.listen(self._on_damage)
        self.handoff.read()  # a corrupt record is reported now, not at the first switch
        self.entry.fence = self.lock.fence
        self.entry.queue_len = len(self.queue)
        # What the model would see now, rebuilt from disk: after a restart /ctx and
        # memory.stats are right before the first task runs.
        parts.compactor.remeasure()
        status.set(AgentState.REGISTERED)
        await parts.heartbeat.beat()
        self.rpc = parts.rpc(self)
        self.rpc.start()
        upkeep = parts.upkeep
        self._tasks.append(asyncio.create_task(upkeep.maintain(), name="maintain"))
        self._tasks.append(asyncio.create_task(upkeep.lock_watch(), name="lock-watch"))
        self._tasks.append(asyncio.create_task(parts.team.listen(), name="team-context"))
        self._tasks.append(asyncio.create_task(parts.puller.listen(), name="board"))
        parts.stall.start()
        parts.snapshot.start()
        self._tasks.append(asyncio.create_task(parts.reloader.watch(), name="prompts"))
        self._worker = asyncio.create_task(parts.worker.supervise(), name="worker")
        status.set(AgentState.IDLE)
        if parts.repl is not None:
            self._repl_task = asyncio.create_task(self._run_repl(parts.repl), name="repl")
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
        await self.parts.stall.aclose()
        await self.parts.snapshot.aclose()
        with contextlib.suppress(Exception):
            await self.events.aclose(flush_timeout=0.5)
        self.parts.state_lock.release()
        if self.lock.fence:
            with contextlib.suppress(Exception):
                await self.lock.release()

    async def _run_repl(self, run: ReplRunner) -> None:
        """The local REPL; a REPL that fails only loses the REPL, never the agent."""
        try:
            await run(self)
        except Exception:
            log.exception("the local REPL stopped")

    def request_shutdown(self, code: int = 0) -> None:
        self._status.request_shutdown(code)

    async def stop(self) -> None:
        """Shut down in order (SPEC §5.1); the exit code of an earlier request stands."""
        self.request_shutdown()
        await self._shutdown()

    async def _shutdown(self) -> None:
        """Stop RPC, stop the worker, fsync, leave the registry, release the lock, close."""
        parts = self.parts
        self._status.set(AgentState.SHUTDOWN)
        # The REPL goes first: it gives the terminal back before the shutdown lines print.
        await cancel_quietly(self._repl_task)
        # After a lost lock the bus is presumed gone: don't spend seconds on each step.
        bus_wait = 0.3 if self.exit_code == Exit.LOCK_LOST else 2.0
        if self.rpc is not None:
            await self.rpc.aclose(wait=bus_wait)
        # Approvals first, so the model reads why its call did not run.
        self.approvals.reject_all("the agent is shutting down")
        if self.control is not None:
            self.control.interrupt()
        parts.worker.wake()  # an idle worker sees the stop
        if self._worker is not None:
            # Cooperative first; a model that sends nothing for a while or a command
            # that ignores SIGINT gets the hard stop, then the worker is cancelled.
            await asyncio.wait({self._worker}, timeout=SHUTDOWN_SOFT_S)
            if not self._worker.done() and self.control is not None:
                self.control.interrupt(hard=True)
                await asyncio.wait({self._worker}, timeout=SHUTDOWN_HARD_S)
            await cancel_quietly(self._worker)
        parts.upkeep.save_usage()
        self.history.close()
        self.queue.close()
        with contextlib.suppress(Exception):  # a KB that failed to close loses nothing
            self.kb.close()
        for task in self._tasks:
            await cancel_quietly(task)
        await parts.stall.aclose()
        await self.events.aclose(flush_timeout=bus_wait)
        # Each bus step is bounded: a frozen Redis must not keep a stopping agent alive
        # (the lock then simply expires on its own).
        await _bounded(parts.heartbeat.leave(), bus_wait)
        # After the leave, so a holder's last snapshot no longer lists this agent.
        await _bounded(parts.snapshot.aclose(), bus_wait)
        # The files go before the identity: a successor that wins the lock finds them free.
        parts.state_lock.release()
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
            # SIGHUP: reload now when idle, after the current task when busy.
            signal.SIGHUP: functools.partial(self.request_prompt_reload, "SIGHUP"),
        }
        for signum, handler in handlers.items():
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, handler)

    def _on_damage(self, damage: Damage) -> None:
        # Logged by the store already; this makes it an event every console shows, and
        # an alert in `ps` (a warning scrolls away; the alert stays until acknowledged).
        self.events.emit(
            EventType.WARN, msg=damage.message(), code=Code.STORAGE_DAMAGED, **damage.fields()
        )
        self._status.damaged(damage)

    # the port: what the RPC service and the REPL ask of the agent ----------------------

    def status(self) -> StatusResult:
        """The registry entry with the live state, queue length, offsets and bus."""
        return StatusResult.model_validate(
            {
                **self.entry.to_wire(),
                "state": self.state.value,
                "last_offset": self.events.last_offset,
                "queue_len": len(self.queue),
                "bus_connected": self.bus_connected,
                "redis": self.target.describe(),
            }
        )

    def memory_stats(self) -> MemoryStatsResult:
        return MemoryStatsResult.model_validate(self.parts.compactor.stats(self.runner.headroom))

    def enqueue(
        self,
        text: str,
        *,
        source: str,
        rid: str | None = None,
        caller: str | None = None,
        trace_id: str | None = None,
        hops: int = 0,
    ) -> Queued:
        """Durably queue an input, its secrets redacted first. A repeated rid is not re-added.

        Every way in (the ``input`` RPC, the REPL, its inbox) comes through here, so no
        secret reaches the queue file, the history, the handoff or an event.
        """
        return self.parts.worker.enqueue(
            text, source=source, rid=rid, caller=caller, trace_id=trace_id, hops=hops
        )

    async def external_input_allowed(self) -> bool:
        await self.parts.upkeep.current_owner()  # read fresh: the owner may just have said no
        return self.parts.upkeep.owner_allows_external

    async def teammate_proven(self, agent_id: str, auth_sha256: str | None) -> bool:
        return await proven(self.parts.client, self.parts.keys, agent_id, auth_sha256)

    def enqueue_wakeup(self) -> None:
        """Tell the worker that items were added behind its back (e.g. a retry)."""
        self.parts.worker.wakeup()

    def touch_registry(self) -> None:
        self._status.touch()

    def acknowledge_alerts(self) -> int:
        """Clear the damage reports ``ps`` shows; returns how many there were."""
        return self._status.acknowledge()

    def interrupt(self, *, hard: bool = False) -> str | None:
        return self.parts.worker.interrupt(hard=hard)

    async def use_model(self, model: str | None) -> ModelUseResult:
        """``/use MODEL`` pins a model (``None`` unpins)."""
        return ModelUseResult.model_validate(await self.parts.switcher.use(model))

    def propose_offload(self, name: str | None = None) -> OffloadProposal:
        """A spec for a fresh agent to take over this one's work (SPEC §11 ``/offload``)."""
        return OffloadProposal.model_validate(self.parts.keeper.propose_offload(name))

    async def summarize(self, why: str) -> SummarizeResult:
        """Re-summarise the working context from recent history (SPEC §8)."""
        return SummarizeResult.model_validate(await self.parts.compactor.summarize(why))

    def prompt_changed(self, reason: str) -> None:
        """The overlay was edited through ateam (``# text``, ``/sys edit``)."""
        self.parts.reloader.changed(reason)

    def request_prompt_reload(self, reason: str) -> bool:
        """Reload the prompt files; returns whether it happened now (else after the task)."""
        return self.parts.reloader.request(reason)

    async def current_owner(self) -> tuple[str, str] | None:
        """The owning session and its token's SHA-256, or None (see :class:`BusUpkeep`)."""
        return await self.parts.upkeep.current_owner()

    async def restart_marker(self) -> None:
        await self.parts.upkeep.restart_marker()

    # the handoff, for tests and tools that inspect it ---------------------------------

    def _refresh_handoff(self, *, status: str, description: str | None = None) -> None:
        self.parts.keeper.refresh(status=status, description=description)

    def _handoff_context(self) -> str:
        return self.parts.keeper.handoff_context()


async def _bounded(step: Awaitable[Any], seconds: float = 2.0) -> None:
    """Run one shutdown step against the bus, giving up quietly after ``seconds``."""
    with contextlib.suppress(TimeoutError, *CONNECTION_ERRORS):
        async with asyncio.timeout(seconds):
            await step
