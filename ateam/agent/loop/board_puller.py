"""``take_tasks: true``: an idle agent takes work from its project's task board (issue 12).

A lead plans on the board; teammates pull. When the agent is idle and the board may
have changed (at start, after each of its tasks, and whenever the board's channel
announces a change), it claims the most important open task whose dependencies are
done — the claim is the board's atomic Lua claim, so of several idle agents exactly one
gets each task — and queues it as its own input with source ``board:<id>``. When that
input's task ends the agent marks the board task done with its final answer, or failed
with the error, unless the model already did so with the ``tasks.*`` tools.

Such an item runs only while the board says this agent holds the task (:meth:`BoardPuller.
holds`, asked by the worker just before each run): an item replayed from the durable
queue after a restart may stand for a claim that was reopened meanwhile and taken by a
teammate, and is then dropped rather than run a second time.

Nothing polls: with no news the board is not read. A bus error costs one chance to
pull, never the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection

import redis.asyncio as aioredis

from ateam.bus.board import TEXT_MAX_BYTES, TaskBoard
from ateam.bus.codec import unpack
from ateam.bus.keys import Keys
from ateam.bus.subscription import SOFT_ERRORS, listen_forever
from ateam.errors import AteamError, BadRequest, TaskBlocked, TaskClaimed, TaskNotFound
from ateam.wire.board import BoardTask, TaskStatus

__all__ = ["SOURCE_PREFIX", "BoardPuller", "board_task_text"]

log = logging.getLogger(__name__)

SOURCE_PREFIX = "board:"
"""Queue items taken from the board carry ``board:<task id>`` as their source."""

_LOST_RACE = (TaskClaimed, TaskBlocked, TaskNotFound)
_READ_TIMEOUT_S = 2.0


class BoardPuller:
    """Claims board tasks for one agent while it is idle.

    Args:
        board: the team's task boards.
        client, keys: for the board channel's change notices.
        project: the agent's project.
        agent_id: the claimant.
        enabled: ``agent.yaml`` ``take_tasks``; when false nothing is read or claimed.
    """

    def __init__(
        self,
        board: TaskBoard,
        client: aioredis.Redis,
        keys: Keys,
        project: str,
        agent_id: str,
        *,
        enabled: bool,
    ) -> None:
        self._board = board
        self._client = client
        self._keys = keys
        self.project = project
        self.agent_id = agent_id
        self.enabled = enabled
        self.dirty = enabled
        """The board may hold work for us (set by news, cleared by a fruitless look)."""
        self.on_news: Callable[[], None] | None = None
        """Wakes the idle worker (set by the composition root)."""
        self.listening = asyncio.Event()
        self.on_finished: Callable[[BoardTask | None], Awaitable[None]] | None = None
        """Told each task this agent finished, as the board left it (the team's notices)."""
        self._offer_wake: asyncio.TimerHandle | None = None

    async def next_task(self) -> BoardTask | None:
        """Claim the most important claimable open task, if the board may have one."""
        if not (self.enabled and self.dirty):
            return None
        self.dirty = False
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                tasks = await self._board.list(self.project)
        except SOFT_ERRORS as exc:
            self.dirty = True  # look again on the next wake
            log.warning("board not read: %s", exc)
            return None
        done = {t.id for t in tasks if t.status is TaskStatus.DONE}
        # A task retried for this agent first (it failed it and was asked again); then
        # highest priority first, then oldest (sorted() keeps that order among equals).
        for task in sorted(tasks, key=lambda t: t.offered_to != self.agent_id):
            if task.status is not TaskStatus.OPEN or not set(task.depends_on) <= done:
                continue
            try:
                # No timeout here: one cut short after the script ran would leave a claim
                # nobody works on (the reconcile spares a live agent's own claims).
                return await self._board.claim(self.project, task.id, agent=self.agent_id)
            except _LOST_RACE as exc:
                self._wake_when_offer_lapses(exc)
                continue  # another agent was quicker; try the next one
            except SOFT_ERRORS as exc:
                self.dirty = True
                log.warning("board claim of %s not confirmed: %s", task.id, exc)
                return await self._mine_after_all(task.id)
        return None

    def _wake_when_offer_lapses(self, refused: AteamError) -> None:
        """A task offered to a teammate (a retry) is ours to try once the offer lapses;
        no change is announced then, so this look is booked rather than waited for (one
        booking at a time: the latest refusal knows the latest offer)."""
        left = refused.detail.get("offer_left_s")
        if not isinstance(left, int | float):
            return
        if self._offer_wake is not None:
            self._offer_wake.cancel()
        self._offer_wake = asyncio.get_running_loop().call_later(float(left) + 0.1, self._news)

    async def _mine_after_all(self, task_id: str) -> BoardTask | None:
        """After a claim whose reply was lost: the task, if the claim went through."""
        with contextlib.suppress(*SOFT_ERRORS):
            task = await self._board.get(self.project, task_id)
            if task is not None and task.status is TaskStatus.CLAIMED:
                if task.assignee == self.agent_id:
                    return task
        return None

    async def holds(self, task_id: str) -> str | None:
        """Whether the board still says this agent holds ``task_id``: ``None`` if it does
        (and the claim is confirmed, see :meth:`TaskBoard.confirm`), else why not.

        Raises:
            RedisError, OSError: the board could not be asked in time; the caller asks again.
        """
        try:
            # Bounded, so a stop is seen on a silent link; asked again, a confirm that ran
            # already only confirms once more.
            async with asyncio.timeout(_READ_TIMEOUT_S):
                await self._board.confirm(self.project, task_id, agent=self.agent_id)
        except (TaskClaimed, TaskNotFound, BadRequest) as exc:  # BadRequest: an unreadable record
            return exc.message
        return None

    async def release_strays(self, queued: Collection[str]) -> None:
        """At start: give up this agent's claims that no queued item stands for.

        A process killed between claiming a task and queueing it held the claim with
        nothing to run for it, and being alive again it would hold it for good (the
        reconcile spares a live agent's claims). Reopened, the task goes to whoever is
        idle first, this agent included. A bus error skips this, logged.
        """
        if not self.enabled:
            return  # a lead's model may hold claims of its own through the tools
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                claimed = await self._board.list(self.project, status=TaskStatus.CLAIMED)
            for task in claimed:
                if task.assignee == self.agent_id and task.id not in queued:
                    reason = f"{self.agent_id} restarted with nothing queued for it"
                    await self._board.release(
                        self.project, task.id, agent=self.agent_id, reason=reason
                    )
                    log.warning("board task %s reopened: %s", task.id, reason)
        except SOFT_ERRORS as exc:
            log.warning("claims without a queued item not checked: %s", exc)

    async def finished(self, task_id: str, *, ok: bool, text: str, error: str | None) -> None:
        """Record the end of the queue item that carried board task ``task_id``."""
        self.dirty = self.enabled
        task: BoardTask | None = None
        try:
            if ok:
                result = _clip(text or "done")
                task = await self._board.done(
                    self.project, task_id, agent=self.agent_id, result=result
                )
            else:
                reason = _clip(error or "failed")
                task = await self._board.fail(
                    self.project, task_id, agent=self.agent_id, reason=reason
                )
        except _LOST_RACE:
            # Finished by the model through tasks.done/fail, or reopened meanwhile: the
            # board says which (the notice tells what the board holds, not our guess).
            with contextlib.suppress(*SOFT_ERRORS):
                task = await self._board.get(self.project, task_id)
        except SOFT_ERRORS as exc:
            log.warning("board task %s not marked finished: %s", task_id, exc)
        if self.on_finished is not None:
            await self.on_finished(task)

    async def listen(self) -> None:
        """Mark the board dirty and wake the worker on every change of our project."""
        if not self.enabled:
            return
        await listen_forever(
            self._client,
            (self._keys.board_channel(self.project),),
            on_open=self._caught_up,
            on_message=self._on_notice,
            listening=self.listening,
            what="board",
        )

    async def _caught_up(self) -> None:
        self._news()  # what changed while we could not hear: look once

    async def _on_notice(self, data: bytes) -> None:
        notice = unpack(data)
        if isinstance(notice, dict) and notice.get("project") == self.project:
            self._news()

    def _news(self) -> None:
        self.dirty = True
        if self.on_news is not None:
            self.on_news()


def _clip(text: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= TEXT_MAX_BYTES:
        return text
    return data[: TEXT_MAX_BYTES - 4].decode("utf-8", "ignore") + " …"


def board_task_text(task: BoardTask) -> str:
    """The input an agent is given for a board task it claimed."""
    lines = [f"[board task {task.id}, claimed by you from the {task.project} board]", task.title]
    if task.detail:
        lines += ["", task.detail]
    if task.last_error:
        # Reopened or retried after a failure: what went wrong last time, to do otherwise.
        lines += ["", f"An earlier attempt failed: {task.last_error}"]
    lines += [
        "",
        "Your final answer is recorded as the task's result; if you cannot do it, say why.",
    ]
    return "\n".join(lines)
