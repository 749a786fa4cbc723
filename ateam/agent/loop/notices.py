"""Telling the team this agent finished or failed a board task, or went idle (issue 26).

Who hears: the teammates named in ``agent.yaml`` ``team: {notify: [...]}`` for every
notice, and the agent that added a board task for that task's end (a person who added
one has no model to tell; the consoles show the notice on this agent's stream anyway).
The agent never tells itself.

Each notice goes to every receiver's list on the bus (:mod:`ateam.bus.notices`), where
a stopped receiver finds it when it starts, and is recorded on this agent's own stream
as a ``team.notice`` event naming the receivers. A notice is news, never work: failing
to send one is logged and costs nothing else.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import RedisError

from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.events import EventType
from ateam.bus.keys import split_agent
from ateam.bus.notices import NoticeBox
from ateam.wire.board import BoardTask, TaskStatus
from ateam.wire.notices import NoticeKind, TeamNotice, one_line

__all__ = ["Notifier"]

log = logging.getLogger(__name__)

_POST_TIMEOUT_S = 2.0
"""A notice waits this long for the bus per receiver; a finished task never waits on news."""
_FAILURES: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, RedisError, TimeoutError)

_ENDS: dict[TaskStatus, NoticeKind] = {
    TaskStatus.DONE: NoticeKind.FINISHED,
    TaskStatus.FAILED: NoticeKind.FAILED,
}
"""The board states a notice is sent for, and what it says happened."""


class Notifier:
    """Sends one agent's notices.

    Args:
        box: the notices on the bus.
        agent_id: this agent (``project/name``), the sender.
        notify: ``team.notify``: names of teammates of the same project.
        emit: this agent's event stream (``emit(type, **fields)``).
        redact: masks secrets in a result or an error before it leaves the agent.
    """

    def __init__(
        self,
        box: NoticeBox,
        agent_id: str,
        notify: Sequence[str],
        emit: Callable[..., Any],
        redact: Callable[[str], str],
    ) -> None:
        self._box = box
        self.agent_id = agent_id
        self.project = split_agent(agent_id)[0]
        self._subscribers = tuple(f"{self.project}/{name}" for name in notify)
        self._emit = emit
        self._redact = redact

    async def finished(self, task: BoardTask | None) -> None:
        """``task`` as this agent left it; a notice if it ended (done or failed) here."""
        if task is None or task.status not in _ENDS or task.assignee != self.agent_id:
            return
        kind = _ENDS[task.status]
        said = task.result if kind is NoticeKind.FINISHED else task.reason
        creator = task.created_by if _is_teammate(task.created_by, self.project) else None
        await self._send(
            kind,
            [*self._subscribers, *filter(None, [creator])],
            notice_id=_end_id(task),
            board_task=task.id,
            title=one_line(task.title),
            text=one_line(self._redact(said)),
        )

    async def idle(self) -> None:
        """This agent went idle with nothing queued: the subscribers hear it."""
        await self._send(NoticeKind.IDLE, self._subscribers)

    async def _send(
        self,
        kind: NoticeKind,
        to: Sequence[str],
        *,
        notice_id: str = "",
        board_task: str = "",
        title: str = "",
        text: str = "",
    ) -> None:
        receivers = [agent for agent in dict.fromkeys(to) if agent != self.agent_id]
        notice = TeamNotice(
            id=notice_id or os.urandom(6).hex(),
            sender=self.agent_id,
            kind=kind,
            at=time.time(),
            board_task=board_task,
            title=title,
            text=text,
        )
        sent, repeated = [], False
        for receiver in receivers:
            try:
                async with asyncio.timeout(_POST_TIMEOUT_S):
                    posted = await self._box.post(receiver, notice)
            except _FAILURES as exc:
                log.warning("team notice to %s not sent: %s", receiver, exc)
                continue
            if posted:
                sent.append(receiver)
            repeated = repeated or not posted
        if repeated and not sent:
            return  # a replay of an end told already (recorded on the stream then, too)
        # A task's end is recorded even with nobody to tell (a console on this agent shows
        # it all the same); going idle only when someone asked, or every stream would
        # say so after every task.
        if sent or kind is not NoticeKind.IDLE:
            self._emit(EventType.TEAM_NOTICE, **notice.to_wire(), to=sent)


def _end_id(task: BoardTask) -> str:
    """The same id for the same end of a task: a replay after a crash (board marked,
    notice sent, queue item not yet done) sends it again, and the store takes it once.
    A later end of the task (retried, reopened) has a later ``updated``: a new notice."""
    key = f"{task.project}\0{task.id}\0{task.status}\0{task.updated}"
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _is_teammate(created_by: str, project: str) -> bool:
    """Whether a task's creator is an agent of ``project`` (not ``cli``, a session, mcp:…)."""
    owner, slash, name = created_by.partition("/")
    return bool(slash and name) and owner == project
