"""The work loop: inputs queued durably, taken one at a time, run, finished, and the upkeep after.

Over 600 lines on purpose: taking an item, running it, settling a replayed one and
pausing for disk room all move the same few fields of one loop, and read together.

Every way in (the ``input`` RPC, the REPL, its inbox) goes through :meth:`Worker.enqueue`,
which redacts first, so no secret reaches the queue file, the history, the handoff or an
event. The worker takes the next item, runs it under the stall watch, records its end and
then does the upkeep between tasks (the working context, summaries, the context check),
each step bounded and never fatal. Idle, it checks now and then whether the primary model
is back. A crashed worker is restarted once; a second crash within
:data:`WORKER_CRASH_WINDOW_S` stops the agent.

An item replayed after a restart is settled without running when running it would do
the work twice (issue 22, :meth:`Worker._settled`): its final answer is in the history
already (the process died between writing it and recording the end), so it is finished
with that answer; or it is a board task the board no longer says this agent holds (a
teammate took it over while this agent was down), so it is dropped with a notice.

A full disk pauses work rather than failing it (:meth:`Worker._until_written`): nothing
is taken meanwhile, the item in hand stays queued, and the agent resumes by itself once a
write succeeds (issue 10; SPEC §12: an acknowledged input is never lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from ateam._fs import probe_room
from ateam._jsonl import storage_error
from ateam.agent.context.compaction import Compactor
from ateam.agent.context.successor import HandoffKeeper
from ateam.agent.context.teamfeed import TeamFeed, blocking_task_text
from ateam.agent.context.window import HISTORY_CANDIDATES
from ateam.agent.context.working import WorkingContext
from ateam.agent.loop import journal
from ateam.agent.loop.board_puller import SOURCE_PREFIX as BOARD_SOURCE
from ateam.agent.loop.board_puller import BoardPuller, board_task_text
from ateam.agent.loop.control import TaskControl
from ateam.agent.loop.gates import Gates
from ateam.agent.loop.modes import WorkModes
from ateam.agent.loop.prompt_reload import PromptReloader
from ateam.agent.loop.status import AgentState, AgentStatus, Alert
from ateam.agent.loop.switching import ModelSwitcher
from ateam.agent.loop.task import TaskOutcome, TaskRunner
from ateam.agent.loop.upkeep import BusUpkeep
from ateam.agent.loop.watchdog import StallWatch
from ateam.agent.loop.workspaces import Workspaces
from ateam.agent.state.fence import WriteFence
from ateam.agent.state.history import History
from ateam.agent.state.queue import DurableQueue
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.config import AgentConfig
from ateam.constants import (
    STORAGE_PROBE_BYTES,
    STORAGE_PROBE_S,
    SWITCH_BACK_CHECK_S,
    WORKER_CRASH_WINDOW_S,
    WORKER_RESTART_DELAY_S,
)
from ateam.errors import Code, LockLost, StorageError, StorageFull, WorkerStalled
from ateam.exits import Exit
from ateam.redact import Redactor
from ateam.wire.turns import Turn

__all__ = ["Queued", "Worker"]

LOCK_CONFIRM_POLL_S = 0.25
"""How often a worker paused by an unconfirmed lock looks whether it may write again."""

log = logging.getLogger(__name__)

_BUS_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, RedisError)
"""The board could not be asked: refused or unreachable, never an answer."""


@dataclass(frozen=True)
class Queued:
    """What :meth:`Worker.enqueue` did with an input."""

    item: QueueItem
    created: bool
    """``False``: the request id was seen before and its first item is returned."""
    redacted: int
    """Secrets replaced by ``****`` before the text was queued."""


class Worker:
    """Takes queued items one at a time and runs them, with the upkeep between tasks."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        queue: DurableQueue,
        history: History,
        runner: TaskRunner,
        stall: StallWatch,
        team: TeamFeed,
        puller: BoardPuller,
        workctx: WorkingContext,
        status: AgentStatus,
        events: EventPublisher,
        redactor: Redactor,
        keeper: HandoffKeeper,
        compactor: Compactor,
        switcher: ModelSwitcher,
        reloader: PromptReloader,
        upkeep: BusUpkeep,
        write_fence: WriteFence,
        modes: WorkModes,
        gates: Gates | None = None,
        workspaces: Workspaces | None = None,
    ) -> None:
        self.modes = modes
        """A board task whose plan awaits approval stays claimed (see :mod:`.modes`)."""
        self._config = config
        self._queue = queue
        self._history = history
        self.runner = runner
        self._stall = stall
        self._team = team
        self._puller = puller
        self._workctx = workctx
        self._status = status
        self._events = events
        self._redactor = redactor
        self._keeper = keeper
        self._compactor = compactor
        self._switcher = switcher
        self._reloader = reloader
        self._upkeep = upkeep
        self._write_fence = write_fence
        self._gates = gates
        """The quality gates: ``agent_idle`` is asked here (``task_done`` by the runner)."""
        self._workspaces = workspaces
        """With ``worktree: agent|task``: a task's work is committed as it ends."""
        self._work = asyncio.Event()
        """Set when there may be work: an input, a retry, a stop."""
        self._strays_checked = False
        """Whether this process looked for claims it holds with nothing queued for them."""
        self._refused_for_room: StorageFull | None = None
        """An input refused for lack of room: the worker waits, blocked, until there is."""
        self.on_idle: Callable[[], Awaitable[None]] | None = None
        """Told once per busy → idle with nothing queued (the team's notices)."""
        self.answer_back: Callable[[QueueItem, TaskOutcome], Awaitable[bool]] | None = None
        """Sends an item's answer to the teammate that asked for it (``reply_to``);
        ``False`` when the agent stopped before it could (:mod:`ateam.agent.loop.replies`)."""

    # the way in ----------------------------------------------------------------------

    @property
    def queue(self) -> DurableQueue:
        """The queue it takes work from (``queue.*`` reads and edits it directly)."""
        return self._queue

    def enqueue(
        self,
        text: str,
        *,
        source: str,
        rid: str | None = None,
        caller: str | None = None,
        trace_id: str | None = None,
        hops: int = 0,
        reply_to: str | None = None,
    ) -> Queued:
        """Durably queue an input, its secrets redacted first. A repeated rid is not re-added."""
        if rid is not None:
            existing = self._queue.find_rid(rid)
            if existing is not None:
                return Queued(existing, created=False, redacted=0)
        clean = self._redactor.scrub(text)
        try:
            item = self._queue.append(
                clean.text,
                source=source,
                rid=rid,
                caller=caller,
                trace_id=trace_id or os.urandom(6).hex(),
                hops=hops,
                reply_to=reply_to,
            )
        except StorageFull as exc:
            # Refused, not acknowledged; an idle worker turns blocked too, so /ps and
            # the consoles say why inputs are refused until there is room.
            self._refused_for_room = exc
            self._work.set()
            raise
        self.wakeup()
        return Queued(item, created=True, redacted=clean.replaced)

    def wakeup(self) -> None:
        """Items were added (or re-queued behind the worker's back): take them."""
        self._status.entry.queue_len = len(self._queue)
        self._work.set()
        self._status.touch()

    def wake(self) -> None:
        """Wake an idle worker so it sees a stop."""
        self._work.set()

    def interrupt(self, *, hard: bool = False) -> str | None:
        """Stop the running task; returns its id, or None when there is none."""
        control, current = self._status.control, self._queue.current
        if control is None or current is None:
            return None
        control.interrupt(hard=hard)
        return current.id

    # the loop ------------------------------------------------------------------------

    async def supervise(self) -> None:
        """Restart a crashed worker once after 1 s; a second crash within 5 s exits 15."""
        status = self._status
        last_crash: float | None = None
        while not status.stop.is_set():
            try:
                await self._work_loop()
                return
            except asyncio.CancelledError:
                raise
            except LockLost as exc:  # a write was fenced off: no crash, no restart here
                if self._write_fence.lost:  # evidence of another instance: stop
                    status.lock_lost(exc.message)
                    return
                # Unconfirmed, not lost: Redis has been out of reach longer than the
                # lock's margin. Nothing was written; once the upkeep confirms or takes
                # the lock again, the item in progress is taken up where its turns end.
                log.warning("work paused until the lock is confirmed: %s", exc.message)
                await self._until_confirmed()
            except Exception as exc:
                now = time.monotonic()
                log.exception("worker crashed")
                self._events.emit(EventType.ERROR, msg=f"worker crashed: {exc!r}")
                if last_crash is not None and now - last_crash <= WORKER_CRASH_WINDOW_S:
                    print(f"ateam agent {status.id}: worker crashed twice", file=sys.stderr)
                    status.request_shutdown(Exit.WORKER_CRASHED)
                    return
                last_crash = now
                await asyncio.sleep(WORKER_RESTART_DELAY_S)

    async def _until_confirmed(self) -> None:
        """Until the write fence opens again (the lock confirmed) or the agent stops."""
        status, fence = self._status, self._write_fence
        # Polled: the fence opens on the upkeep's clock and has no event to wait on; this
        # runs only while Redis is out of reach, four times a second.
        while not (fence.open or fence.lost or status.stop.is_set()):  # noqa: ASYNC110
            await asyncio.sleep(LOCK_CONFIRM_POLL_S)

    async def _work_loop(self) -> None:
        if not self._strays_checked:
            self._strays_checked = True
            # A board task held for its plan's approval has nothing queued, on purpose.
            held = self.modes.held_board_tasks
            await self._puller.release_strays(self._queued_board_tasks() | held)
        while not self._status.stop.is_set():
            if self._refused_for_room is not None:
                full, self._refused_for_room = self._refused_for_room, None
                # The refused write is not retried (its sender was told), so the size to
                # wait for is a probe's, not the refused input's: a huge input refused
                # must not keep small ones waiting.
                await self._until_written(full, lambda: None, room=STORAGE_PROBE_BYTES)
                continue
            try:
                item = self._queue.current or self._queue.take()
            except StorageFull as exc:
                # The start cannot be recorded, so nothing is taken: the item stays first
                # in line and is taken once there is room.
                await self._until_written(exc, self._queue.take)
                continue
            if item is None:
                await self._idle()
                continue
            if not await self._settled(item):
                await self._process(item)

    async def _idle(self) -> None:
        self._reloader.apply_pending("deferred until the agent was idle")
        # Cleared before looking for team work: news that arrives while we look (a
        # blocking item, a board change) wakes the wait below instead of being lost.
        self._work.clear()
        if await self._take_team_work():
            return
        if self._gates is not None and await self._gates.on_idle(self.enqueue):
            return  # the agent_idle hook refused: its feedback is the next input
        if self.on_idle is not None and self._status.state is AgentState.BUSY:
            await self._step("idle notice", self.on_idle())
        self._status.set(AgentState.IDLE)
        await self._step("switch-back check", self._switcher.maybe_switch_back(self._work))
        # Wake now and then while idle: the primary may have recovered.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SWITCH_BACK_CHECK_S):
                await self._work.wait()

    async def _take_team_work(self) -> bool:
        """Give an idle agent the team's work: a blocking context item first.

        Returns whether an item was queued (the loop then takes it).
        """
        blocking = await self._team.take_blocking(self._outsiders_allowed)
        if blocking is None:
            return await self._take_board_task()
        try:
            self.enqueue(blocking_task_text(blocking), source=f"context:{blocking.id}")
        except StorageFull:
            self._team.inbox[blocking.id] = blocking  # fed once there is room
            return False
        await self._team.mark_fed(blocking)
        return True

    async def _outsiders_allowed(self) -> bool:
        """Whether input from external runtimes may reach the agent now (see upkeep)."""
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self._upkeep.current_owner()
        return self._upkeep.owner_allows_external

    async def _take_board_task(self) -> bool:
        """With ``take_tasks``, claim a task from the board and queue it."""
        if self.modes.holding_board_task:  # unless the board took it back meanwhile
            await self.modes.forget_unheld(self._puller.holds)
        if self.modes.holding_board_task:
            return False  # its answer carries the held task on; taking another would race it
        task = await self._puller.next_task()
        if task is None:
            return False
        try:
            self.enqueue(board_task_text(task), source=f"{BOARD_SOURCE}{task.id}")
        except StorageFull as exc:
            await self._puller.finished(task.id, ok=False, text="", error=exc.message)
            return False
        except Exception as exc:
            # Claimed but not queued: give it up (failed, with why) rather than hold it
            # for good — the reconcile never reopens a live agent's own claims.
            await self._puller.finished(task.id, ok=False, text="", error=repr(exc))
            raise
        return True

    # replays that must not run -------------------------------------------------------

    async def _settled(self, item: QueueItem) -> bool:
        """Settle ``item`` without running it when a run would repeat work; whether it was.

        The board is asked before every run of a board task, a fresh claim's included: it
        is the truth, whatever the queue file remembers. The history only for an item an
        earlier process had in progress (a crash counts an attempt, a kill a kill): a
        fresh one has no turns there, and the read is not free.
        """
        replayed = item.attempts > 1 or item.kills > 0
        answer = (
            self._history.final_answer(item.id, within=HISTORY_CANDIDATES) if replayed else None
        )
        if answer is not None:
            await self._finish_answered(item, answer.content)
            return True
        if not item.source.startswith(BOARD_SOURCE):
            return False
        task_id = item.source.removeprefix(BOARD_SOURCE)
        why = await self._not_held(task_id)
        if self._status.stop.is_set():
            self._queue.release(item.id)  # not run, nor dropped: asked again after restart
            return True
        if why is None:
            return False
        await self._drop(item, task_id, why)
        return True

    def _queued_board_tasks(self) -> set[str]:
        items = [*self._queue.pending(), *filter(None, [self._queue.current])]
        sources = [it.source for it in items if it.source.startswith(BOARD_SOURCE)]
        return {source.removeprefix(BOARD_SOURCE) for source in sources}

    async def _finish_answered(self, item: QueueItem, text: str) -> None:
        """End an item whose final answer the history holds: done with it, not run again."""
        message = (
            f"queue: {item.id} was answered before the agent stopped; "
            "its end is recorded now and it is not run again"
        )
        self._warn(item, message, "queue.recovered")
        # The first task.end may never have left the process: consumers wait for one.
        self._events.emit(
            EventType.TASK_END,
            ok=True,
            error=None,
            recovered=True,
            task_id=item.id,
            trace_id=item.trace_id,
        )
        await self._finish(item, TaskOutcome(True, None, text, 0, 0))

    def _warn(self, item: QueueItem, message: str, code: str) -> None:
        """What a replay settled without running ``item``: in the log and as a ``warn``."""
        log.warning("%s", message)
        self._events.emit(
            EventType.WARN, msg=message, code=code, task_id=item.id, trace_id=item.trace_id
        )

    async def _not_held(self, task_id: str) -> str | None:
        """Why the board does not say this agent holds ``task_id``; ``None`` if it does.

        Waits for the bus as long as it takes (a task must not run unconfirmed); a stop
        meanwhile returns a reason (the caller sees the stop).
        """
        backoff = Backoff()
        while not self._status.stop.is_set():
            try:
                return await self._puller.holds(task_id)
            except _BUS_ERRORS as exc:
                delay = backoff.next_delay()
                log.warning("board task %s not confirmed yet (%s); asking again", task_id, exc)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._status.stop.wait()
        return "the agent is stopping"

    async def _drop(self, item: QueueItem, task_id: str, why: str) -> None:
        """Drop a board item the board no longer gives this agent: told, never run."""
        message = (
            f"queue: {item.id} (board task {task_id}) dropped, not run: {why}; "
            "the board no longer says this agent holds it"
        )
        self._warn(item, message, "queue.dropped")
        notice = Turn(
            role="system",
            source="queue",
            content=message,
            task_id=item.id,
            trace_id=item.trace_id,
            fence=self._status.entry.fence,
        )
        self._remember("drop notice", self._history.append, notice)
        end = functools.partial(self._queue.done, item.id, ok=False, error=f"dropped: {why}")
        try:
            end()
        except StorageFull as exc:
            if not await self._until_written(exc, end):
                return
        # The task may be open again: an idle agent looks at the board once more.
        self._puller.dirty = self._puller.enabled
        self._status.entry.queue_len = len(self._queue)
        self._status.touch()

    async def _process(self, item: QueueItem) -> None:
        status = self._status
        status.control = control = TaskControl()
        status.entry.current_task = item.id
        status.entry.queue_len = len(self._queue)
        status.set(AgentState.BUSY)
        journal.task_started(item)
        began = time.monotonic()
        await self._team.begin_task(time.time())  # what the team shared, for this task

        def stop_stalled() -> None:
            control.interrupt(
                hard=True,
                reason=f"stalled: no progress for {self._stall_s()}",
                code=Code.WORKER_STALLED,
            )

        full: StorageFull | None = None
        try:
            outcome = await self._stall.step(
                f"task {item.id}", self.runner.run(item, control), stop=stop_stalled
            )
        except WorkerStalled as exc:
            # The task ignored its hard stop: end it here, as the runner would have.
            outcome = TaskOutcome(False, f"stalled: {exc.message}", "", 0, 0, code=exc.code)
            self._events.emit(
                EventType.TASK_END,
                ok=False,
                error=outcome.error,
                code=outcome.code,
                task_id=item.id,
                trace_id=item.trace_id,
            )
        except asyncio.CancelledError:
            if status.stop.is_set() and not self._write_fence.lost:
                self._queue.release(item.id)  # torn down mid-task: runs again after restart
            raise
        except LockLost:
            raise  # nothing more of ours may be written; the successor re-runs the item
        except StorageFull as exc:  # the runner could not record a turn
            full = exc
            outcome = TaskOutcome(False, exc.message, "", 0, 0)
        except Exception as exc:
            error = self._redactor.redact(repr(exc))
            self._queue.done(item.id, ok=False, error=error)
            status.entry.last_error = error
            crashed = TaskOutcome(False, error, "", 0, 0, code=Code.INTERNAL)
            journal.task_ended(status, item, crashed, time.monotonic() - began)
            raise
        finally:
            status.control = None
            status.entry.current_task = None
            self._reloader.apply_pending("deferred until the task ended")
        if self._write_fence.lost:
            return  # fenced: the queue file is the successor's now
        if full is not None:
            # As far as the files know the task has not run (a turn is missing), so it
            # goes back to the head with its attempt given back, once that can be written.
            journal.task_put_back(item, full.message)
            await self._until_written(full, lambda: self._queue.release(item.id))
            return
        if status.stop.is_set() and not outcome.ok:
            # Cut short by shutdown or a lost lock, not by a person: the acknowledged
            # input goes back to the head and runs again after the restart.
            journal.task_put_back(item, "the agent is stopping")
            self._queue.release(item.id)
            return
        await self._finish(item, outcome, time.monotonic() - began)

    async def _finish(self, item: QueueItem, outcome: TaskOutcome, seconds: float = 0.0) -> None:
        """Record the end of a task that ran, then the bookkeeping and upkeep after it."""
        if self._workspaces is not None and not self.modes.holds_back(item):
            # Before the board: a task seen done shows its commit (a replay commits again,
            # finding nothing new, if the agent was killed between the two).
            await self._workspaces.finish(item, outcome)
        if item.source.startswith(BOARD_SOURCE) and not self.modes.holds_back(item):
            # The board before the queue: killed in between, the replay finds the task
            # finished there and settles the item; the other way round this agent would
            # hold the claim for good with nothing left to run for it.
            task_id = item.source.removeprefix(BOARD_SOURCE)
            await self._puller.finished(
                task_id, ok=outcome.ok, text=outcome.text, error=outcome.error
            )
        held = self.modes.held(item)  # its plan waited: the answer's input answers back
        if item.reply_to is not None and self.answer_back is not None and not held:
            # Before done, as the board is: killed in between, the replay finds the answer
            # in the history and sends it again under the same request id, which the
            # asker's queue recognises. Stopped before it could be sent: the restart does.
            if not await self.answer_back(item, outcome):
                return
        try:
            self._queue.done(item.id, ok=outcome.ok, error=outcome.error)
        except StorageFull as exc:
            # The task ran and its turns are on disk: only its end is missing, and that
            # is what is written once there is room, not a second run.
            end = functools.partial(self._queue.done, item.id, ok=outcome.ok, error=outcome.error)
            if not await self._until_written(exc, end):
                return
        journal.task_ended(self._status, item, outcome, seconds)
        entry = self._status.entry
        if outcome.error and outcome.error not in ("interrupted", "cancelled"):
            entry.last_error = self._redactor.redact(outcome.error)
            self._remember("failure", self._workctx.add_failure, outcome.error, task=item.id)
        self._keeper.task_finished(item, outcome.ok)
        self._upkeep.save_usage()
        entry.queue_len = len(self._queue)
        self._status.touch()
        if self._remember("task count", self._workctx.note_task_done):
            await self._step("summary", self._compactor.periodic_summary())
        self._compactor.update_ctx_pct()
        await self._step("context check", self._switcher.check_context_fill())
        self._status.touch()

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

    # a full disk ---------------------------------------------------------------------

    async def _until_written(
        self, full: StorageFull, write: Callable[[], object], *, room: int | None = None
    ) -> bool:
        """Blocked until ``write``, the write that failed, succeeds; ``False`` if stopped first.

        Nothing is taken meanwhile and the item in hand stays queued. Once a scratch
        write of real size succeeds, the write that failed is retried.
        """
        status = self._status
        if room is None:
            room = max(STORAGE_PROBE_BYTES, int(full.detail.get("bytes") or 0))
        reason = (
            f"{full.message}; nothing is taken until it can be written "
            f"(retrying every {STORAGE_PROBE_S:g} s)"
        )
        log.warning("blocked: %s", reason)
        status.alert(Alert.BLOCKED, f"blocked: {reason}")
        self._events.emit(
            EventType.WARN, msg=f"blocked: {reason}", code=full.code, path=full.detail.get("path")
        )
        status.set(AgentState.BLOCKED)
        started = time.monotonic()
        try:
            while True:
                # Waits on the stop event, so a shutdown never waits out a probe interval.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STORAGE_PROBE_S):
                        await status.stop.wait()
                if status.stop.is_set():
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
                status.set(AgentState.BUSY)
                return True
        finally:
            if status.alerting(Alert.BLOCKED) == f"blocked: {reason}":
                status.alert(Alert.BLOCKED, None)
            status.touch()

    def _probe_room(self, size: int) -> None:
        state_dir = self._config.state_dir
        self._write_fence("a probe of free space")  # a scratch file in state/ is a write too
        try:
            probe_room(state_dir, size)
        except OSError as exc:
            raise storage_error("state", "no room for a write in", state_dir, exc) from exc

    # upkeep between tasks ------------------------------------------------------------

    async def _step(self, name: str, work: Awaitable[Any]) -> None:
        """One upkeep step between tasks: bounded, watched, and never fatal to the worker.

        The item before it is already done and acknowledged work waits behind it, so a
        step that fails or hangs costs at most ``watchdog.step_timeout_s`` of delay,
        never the worker.
        """
        limit = self._config.spec.watchdog.step_timeout_s
        try:
            async with asyncio.timeout(limit):
                await self._stall.step(name, work)
        except TimeoutError:
            self._events.emit(
                EventType.WARN,
                msg=f"{name} took longer than {limit:g}s and was abandoned; work goes on",
                code="worker.step_timeout",
            )
        except WorkerStalled as exc:
            self._events.emit(EventType.WARN, msg=exc.message, code=exc.code)
        except LockLost as exc:
            if self._write_fence.lost:
                self._status.lock_lost(exc.message)
            else:  # unconfirmed: this step is skipped; the next task waits for the lock
                log.warning("%s skipped: %s", name, exc.message)
        except Exception as exc:
            log.exception("%s failed", name)
            self._events.emit(
                EventType.ERROR, msg=f"{name} failed: {exc!r}; work goes on", code="internal"
            )

    def _stall_s(self) -> str:
        return f"{self._config.spec.watchdog.cancel_after_s:g}s"
