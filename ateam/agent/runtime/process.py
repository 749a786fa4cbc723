"""The agent process: its lifecycle and signals (SPEC §5.1).

States: INIT (config, lock) → REGISTERED (RPC served, heartbeat on) → IDLE ⇄ BUSY
(⇄ WAITING) → SHUTDOWN. Everything runs on one asyncio loop; the durable files are
written synchronously because an fsync'd append is what makes an acknowledgement true.

:class:`Agent` starts the parts :mod:`ateam.agent.runtime.build` wired (lock, stores, events,
RPC, the upkeep loops, the worker, the REPL), stops them in order, and turns signals
into a stop, an interrupt or a prompt reload. The work loop lives in
:mod:`ateam.agent.loop.worker`, the bus upkeep in :mod:`ateam.agent.loop.upkeep`, model switching
in :mod:`ateam.agent.loop.switching`, compaction in :mod:`ateam.agent.context.compaction` and the
handoff and offload in :mod:`ateam.agent.context.successor`. What the RPC service and
the REPL may use of a running agent is the :class:`~ateam.agent.runtime.port.ServicePort`
the composition root built from the parts (``parts.port``): :class:`Agent` hands it to
them, and keeps only its lifecycle and where in it the agent is.
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
from ateam.agent.acp.process import kill_leftover
from ateam.agent.loop.control import cancel_quietly
from ateam.agent.loop.status import AgentState
from ateam.agent.loop.worker import Queued
from ateam.agent.runtime.build import Parts, ReplRunner, build_parts
from ateam.agent.runtime.inbox import MailboxIntake
from ateam.agent.state.fence import STATE_LOCK_GRACE_S, STATE_LOCK_WAIT_S
from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.connection import RedisTarget, bus_error, ensure_reachable
from ateam.bus.events import EventType
from ateam.bus.guard import check_eviction
from ateam.bus.mailbox import Mailbox
from ateam.bus.rpc import RpcServer
from ateam.config import AgentConfig
from ateam.constants import SHUTDOWN_HARD_S, SHUTDOWN_SOFT_S
from ateam.errors import AteamError, Code
from ateam.exits import Exit, agent_exit_code
from ateam.providers.base import Provider
from ateam.redact import Redactor
from ateam.tools.registry import ToolRegistry

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
        self.port = parts.port
        """What the RPC service and the REPL use: each protocol is served by its owner."""
        self._killed_before = killed_before
        self.config = config
        self.id = config.id
        self.target = target
        self._status = parts.status
        self.rpc: RpcServer | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._worker: asyncio.Task[None] | None = None
        self._repl_task: asyncio.Task[None] | None = None

    # where it is in its lifecycle -----------------------------------------------------

    @property
    def state(self) -> AgentState:
        return self._status.state

    @property
    def exit_code(self) -> int:
        """What :meth:`run` returns: 0, or the first stop request's code."""
        return self._status.exit_code

    @property
    def _stop(self) -> asyncio.Event:
        return self._status.stop

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
        await ensure_reachable(parts.client, self.target)
        # Before the lock: on a server that may evict it, the lock guarantees nothing.
        eviction_risk = await check_eviction(parts.client, self.target)
        self.config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The files speak first: a running instance here keeps them even when Redis
        # lost its lock key (evicted, flushed), and must not be replaced by this one.
        await parts.state_lock.refuse_a_running_holder(grace_s=STATE_LOCK_GRACE_S)
        await parts.lock.acquire()
        # The files too: a frozen predecessor on this host keeps them until it exits.
        await parts.state_lock.acquire(wait_s=STATE_LOCK_WAIT_S, keep_alive=parts.lock.refresh)
        # Read under the state lock: a predecessor still saving its counts has exited.
        parts.router.usage = parts.ledger.load()
        # A coding agent's process group left by a killed predecessor dies before ours starts.
        leftover = kill_leftover(self.config.state_dir)
        status.entry.usage = parts.router.usage_view()  # spent before a restart counts too
        report = parts.queue.open(killed=self._killed_before)
        parts.history.open()  # a torn tail it repairs is reported through its damage log
        parts.prompts.load()
        await parts.events.start()
        if eviction_risk is not None:  # accepted, and said at every start
            parts.events.emit(EventType.WARN, msg=eviction_risk, code=Code.REDIS_EVICTION_POLICY)
        if parts.prompts.last_warning:
            parts.events.emit(EventType.WARN, msg=parts.prompts.last_warning, code="prompt.load")
        if leftover is not None:
            parts.events.emit(
                EventType.WARN,
                msg=f"killed the coding agent's process group {leftover} a previous "
                "instance of this agent left running",
                code="runtime.leftover",
            )
        for warning in parts.plugin_warnings:
            parts.events.emit(EventType.WARN, msg=warning, code="tool.plugin")
        for warning in parts.lock.warnings:
            parts.events.emit(EventType.WARN, msg=warning, code="lock.takeover")
        for message in report.messages():
            log.warning("%s", message)
            parts.events.emit(EventType.WARN, msg=message, code="queue.recovered")
        # Damage found while opening waits in each store's log until now; damage found
        # later (a corrupt file read mid-work) is announced as it is found.
        for damage in parts.damage_logs():
            damage.listen(self._on_damage)
        parts.handoff.read()  # a corrupt record is reported now, not at the first switch
        status.entry.fence = parts.lock.fence
        status.entry.queue_len = len(parts.queue)
        # What the model would see now, rebuilt from disk: after a restart /ctx and
        # memory.stats are right before the first task runs.
        parts.compactor.remeasure()
        parts.tasks.check_at_start()
        status.set(AgentState.REGISTERED)
        # What teammates sent while this agent was not running, queued before it serves:
        # nothing sent over RPC, nor a board task, can be queued ahead of older mail.
        mail = MailboxIntake(
            Mailbox(parts.client, parts.keys),
            self.id,
            parts.worker,
            parts.events,
            max_hops=lambda: self.config.spec.team.max_hops,
        )
        await mail.take_in_first()
        await parts.heartbeat.beat()
        self.rpc = parts.rpc(parts.port)
        self.rpc.start()
        upkeep = parts.upkeep
        self._tasks.append(asyncio.create_task(upkeep.maintain(), name="maintain"))
        self._tasks.append(asyncio.create_task(upkeep.lock_watch(), name="lock-watch"))
        self._tasks.append(asyncio.create_task(parts.team.listen(), name="team-context"))
        self._tasks.append(asyncio.create_task(parts.puller.listen(), name="board"))
        self._tasks.append(asyncio.create_task(mail.run(), name="mailbox"))
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
        log.info("agent %s serving (fence %s, pid %s)", self.id, parts.lock.fence, os.getpid())

    async def _abandon_start(self) -> None:
        """Undo a half-done start: stop what started, give the lock back if we took it."""
        if self.rpc is not None:
            await self.rpc.aclose()
        for task in self._tasks:
            await cancel_quietly(task)
        await cancel_quietly(self._worker)
        parts = self.parts
        await _bounded(parts.tasks.close(), 5.0)
        await parts.stall.aclose()
        await parts.snapshot.aclose()
        with contextlib.suppress(Exception):
            await parts.events.aclose(flush_timeout=0.5)
        parts.state_lock.release()
        if parts.lock.fence:
            with contextlib.suppress(Exception):
                await parts.lock.release()

    async def _run_repl(self, run: ReplRunner) -> None:
        """The local REPL; a REPL that fails only loses the REPL, never the agent."""
        try:
            await run(self.port)
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
        parts.approvals.reject_all("the agent is shutting down")
        if self._status.control is not None:
            self._status.control.interrupt()
        parts.worker.wake()  # an idle worker sees the stop
        if self._worker is not None:
            # Cooperative first; a model that sends nothing for a while or a command
            # that ignores SIGINT gets the hard stop, then the worker is cancelled.
            await asyncio.wait({self._worker}, timeout=SHUTDOWN_SOFT_S)
            if not self._worker.done() and self._status.control is not None:
                self._status.control.interrupt(hard=True)
                await asyncio.wait({self._worker}, timeout=SHUTDOWN_HARD_S)
            await cancel_quietly(self._worker)
        await _bounded(parts.tasks.close(), 5.0)  # the coding agents' process groups
        parts.upkeep.save_usage()
        parts.history.close()
        parts.queue.close()
        with contextlib.suppress(Exception):  # a KB that failed to close loses nothing
            parts.kb.close()
        for task in self._tasks:
            await cancel_quietly(task)
        await parts.stall.aclose()
        await parts.events.aclose(flush_timeout=bus_wait)
        # Each bus step is bounded: a frozen Redis must not keep a stopping agent alive
        # (the lock then simply expires on its own).
        await _bounded(parts.heartbeat.leave(), bus_wait)
        # After the leave, so a holder's last snapshot no longer lists this agent.
        await _bounded(parts.snapshot.aclose(), bus_wait)
        # The files go before the identity: a successor that wins the lock finds them free.
        parts.state_lock.release()
        await _bounded(parts.lock.release(), bus_wait)
        await _bounded(parts.client.aclose(), bus_wait)
        log.info("agent %s stopped", self.id)

    async def _close_client(self) -> None:
        await _bounded(self.parts.client.aclose())

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        handlers: dict[signal.Signals, Callable[[], object]] = {
            signal.SIGINT: self.parts.worker.interrupt,
            signal.SIGTERM: self.request_shutdown,
            # SIGHUP: reload now when idle, after the current task when busy.
            signal.SIGHUP: functools.partial(self.parts.reloader.request, "SIGHUP"),
        }
        for signum, handler in handlers.items():
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, handler)

    def _on_damage(self, damage: Damage) -> None:
        # Logged by the store already; this makes it an event every console shows, and
        # an alert in `ps` (a warning scrolls away; the alert stays until acknowledged).
        self.parts.events.emit(
            EventType.WARN, msg=damage.message(), code=Code.STORAGE_DAMAGED, **damage.fields()
        )
        self._status.damaged(damage)


async def _bounded(step: Awaitable[Any], seconds: float = 2.0) -> None:
    """Run one shutdown step against the bus, giving up quietly after ``seconds``."""
    with contextlib.suppress(TimeoutError, *CONNECTION_ERRORS):
        async with asyncio.timeout(seconds):
            await step
