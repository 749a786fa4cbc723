"""The team task board (issue 12): a project's tasks in Redis, claimed atomically.

One module, over the usual size on purpose: its Lua scripts guard one another (a reopen
must lose to a confirm, a finish to a reopen), so they are read and reviewed together.

One hash per project holds every task of it: field = task id, value = the msgpack
record (:class:`~ateam.wire.board.BoardTask`). The key carries the project as a hash
tag, so a Lua script that reads a task and its dependencies touches one Cluster slot.

Every change of a task's state is one Lua script, so two agents never both win:

* ``claim``: not found → ``task.not_found``; not ``open`` → ``task.claimed`` (naming the
  assignee); a dependency not ``done`` → ``task.blocked`` (naming them); else the task
  becomes ``claimed`` by the caller.
* ``done`` / ``fail``: only while ``claimed`` by the caller, else ``task.claimed``.
* ``reopen`` / ``retry`` of a ``failed`` task (:mod:`ateam.bus.board_reopen`): back to
  ``open``, for anyone or offered first to the running agent that failed it, whose
  offer the claim honours (``task.claimed`` for anyone else until it lapses).
* ``confirm``: the holder is about to run the task (a queue item replayed after a
  restart); only while ``claimed`` by the caller, else ``task.claimed``. It stamps the
  record's ``confirmed`` time (server clock), which :meth:`TaskBoard.reconcile` honours.
* ``reopen``: a claimed task goes back to ``open`` only while still claimed by the agent
  judged lost and unchanged and unconfirmed since the reconcile read the claims, so a
  re-claim in between is never undone and a holder that came back and confirmed its
  claim meanwhile keeps it: of a reopen and a confirm, exactly one wins.

Lost claims (:meth:`TaskBoard.reconcile`): a claim lives as long as its holder's registry
heartbeat (the ``alive`` key the agent refreshes every :data:`HEARTBEAT_INTERVAL_S
<ateam.constants.HEARTBEAT_INTERVAL_S>` with a :data:`HEARTBEAT_TTL_S
<ateam.constants.HEARTBEAT_TTL_S>` expiry) or its restart marker (the ``grace`` key a
planned restart sets). A claim whose holder has neither, and which is older than the
TTL (a holder that never beats, such as ``ateam tasks claim --as`` for an agent that is
not running, gets the TTL to show up), goes back to ``open`` with the reason. Every
running agent reconciles its own project's board, and so does every listing through the
client, so the board tells the truth even when no agent runs. A second hash per project
(``board:{<project>}:claims``, task id -> assignee, kept by the same scripts in the same
slot) is the index reconciling reads, so it costs one small read however big the board.

The scripts edit the record with Redis's built-in ``cmsgpack``: empty strings stand for
"none" (``assignee``, ``result``, ``reason``) because a msgpack ``nil`` vanishes from a
Lua table. Times are the Redis server's clock (``TIME``, µs since the epoch), as the
registry and the context store use, so hosts need not agree on the time.

Key layout (see :class:`~ateam.bus.keys.Keys`)::

    board:{<project>}          hash task id -> msgpack task
    board:{<project>}:claims   hash task id -> assignee, for the claimed tasks only
"""

from __future__ import annotations

import builtins
import logging
import secrets
from collections.abc import Collection, Iterable
from typing import Any

import redis.asyncio as aioredis

from ateam.bus.board_reopen import OFFER_S, REOPEN_FAILED, offered_error
from ateam.bus.board_rework import REOPEN_FINISHED
from ateam.bus.board_work import RECORD_WORK
from ateam.bus.codec import pack, unpack
from ateam.bus.keys import Keys
from ateam.config.names import checked_name
from ateam.constants import HEARTBEAT_INTERVAL_S, HEARTBEAT_TTL_S
from ateam.errors import AteamError, BadRequest, TaskBlocked, TaskClaimed, TaskNotFound
from ateam.redact import Redactor
from ateam.wire.board import BoardTask, TaskStatus
from ateam.wire.work import WorkRecord

log = logging.getLogger(__name__)

__all__ = [
    "DETAIL_MAX_BYTES",
    "TEXT_MAX_BYTES",
    "TITLE_MAX_CHARS",
    "TaskBoard",
]

TITLE_MAX_CHARS = 200
DETAIL_MAX_BYTES = 16 * 1024
"""The limit of ``detail`` in UTF-8 bytes."""
TEXT_MAX_BYTES = 16 * 1024
"""The limit of a ``result`` or a ``reason`` in UTF-8 bytes."""
DEPENDS_MAX = 64


# ------------------------------------------------------------------ the scripts
# Each returns {outcome, record, ...}: the record as it is after the script, so the
# caller builds its answer (or its error) from the one state the script judged.

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
"""

# KEYS[1] board, KEYS[2] its claims index; ARGV[1] task id, ARGV[2] agent.
_CLAIM = (
    _NOW
    + """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {'not_found'} end
local task = cmsgpack.unpack(raw)
-- Checked before the dependencies: a task someone holds is "claimed" whatever else.
if task.status ~= 'open' then return {'claimed', raw} end
-- A retried task waits for the agent that failed it (see board_reopen), for a while.
local offered = task.offered_to or ''
local left = tonumber(task.offer_until or 0) - now
if offered ~= '' and offered ~= ARGV[2] and left > 0 then return {'offered', raw, left} end
local reply = {'blocked', raw}
for _, dep in ipairs(task.depends_on or {}) do
  local other = redis.call('HGET', KEYS[1], dep)
  if not other or cmsgpack.unpack(other).status ~= 'done' then
    table.insert(reply, dep)
  end
end
if #reply > 2 then return reply end
task.status = 'claimed'
task.assignee = ARGV[2]
task.reason = ''
task.offered_to = ''
task.offer_until = 0
task.updated = now
local packed = cmsgpack.pack(task)
redis.call('HSET', KEYS[1], ARGV[1], packed)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return {'ok', packed}
"""
)

# KEYS[1] board, KEYS[2] its claims index; ARGV[1] task id, ARGV[2] agent, ARGV[3] new
# status (done|failed),
# ARGV[4] the field to write (result|reason), ARGV[5] its text.
_FINISH = (
    _NOW
    + """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {'not_found'} end
local task = cmsgpack.unpack(raw)
-- Only the holder finishes: a stale agent whose claim was reopened and re-taken
-- must not close someone else's work.
if task.status ~= 'claimed' or task.assignee ~= ARGV[2] then return {'claimed', raw} end
task.status = ARGV[3]
task[ARGV[4]] = ARGV[5]
task.updated = now
local packed = cmsgpack.pack(task)
redis.call('HSET', KEYS[1], ARGV[1], packed)
redis.call('HDEL', KEYS[2], ARGV[1])
return {'ok', packed}
"""
)

# KEYS[1] board, KEYS[2] its claims index; ARGV[1] task id, ARGV[2] agent.
_CONFIRM = (
    _NOW
    + """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {'not_found'} end
local task = cmsgpack.unpack(raw)
if task.status ~= 'claimed' or task.assignee ~= ARGV[2] then return {'claimed', raw} end
-- Not `updated`: the task did not change, and its claim's age still counts from the claim.
task.confirmed = now
local packed = cmsgpack.pack(task)
redis.call('HSET', KEYS[1], ARGV[1], packed)
return {'ok', packed}
"""
)

# KEYS[1] the claims index. The server's time first, so a reopen can tell what changed
# after this read (see _REOPEN's ARGV[5]).
_CLAIMS = (
    _NOW
    + """
local reply = redis.call('HGETALL', KEYS[1])
table.insert(reply, 1, now)
return reply
"""
)

# KEYS[1] board, KEYS[2] its claims index; ARGV[1] task id, ARGV[2] the assignee
# judged lost, ARGV[3] reason, ARGV[4] the least age of the claim (µs) to reopen it,
# ARGV[5] the server time (µs) before the caller judged the assignee lost (0: none).
_REOPEN = (
    _NOW
    + """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then
  redis.call('HDEL', KEYS[2], ARGV[1])
  return {'not_found'}
end
local task = cmsgpack.unpack(raw)
-- Only if nothing changed since the caller looked: the agent may have finished it, or
-- another agent may hold it by now (the index is set right on the way).
if task.status ~= 'claimed' then
  redis.call('HDEL', KEYS[2], ARGV[1])
  return {'skip', raw}
end
if task.assignee ~= ARGV[2] then
  redis.call('HSET', KEYS[2], ARGV[1], task.assignee)
  return {'skip', raw}
end
-- A holder that never beat is given the TTL from its claim to show up.
if now - task.updated < tonumber(ARGV[4]) then return {'young', raw} end
-- Claimed again or confirmed since the caller looked: the holder beat before it did
-- either, so the judgement "lost" is stale. This is what makes a replayed board task
-- run on one agent only: its holder confirms before running, the reopen checks here.
local judged = tonumber(ARGV[5])
if judged > 0 and (task.updated >= judged or tonumber(task.confirmed or 0) >= judged) then
  return {'young', raw}
end
task.status = 'open'
task.assignee = ''
task.reason = ARGV[3]
task.updated = now
local packed = cmsgpack.pack(task)
redis.call('HSET', KEYS[1], ARGV[1], packed)
redis.call('HDEL', KEYS[2], ARGV[1])
return {'ok', packed}
"""
)


def _new_id() -> str:
    return f"t-{secrets.token_hex(5)}"


def _text(name: str, value: object, *, max_bytes: int) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string; got {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest(f"{name} is not valid Unicode text (it has a lone surrogate)") from None
    if size > max_bytes:
        raise BadRequest(f"{name} is {size} bytes of UTF-8; the limit is {max_bytes}")
    return value


def _title(value: object) -> str:
    title = _text("title", value, max_bytes=4 * TITLE_MAX_CHARS).strip()
    if not title:
        raise BadRequest("title must not be empty")
    if len(title) > TITLE_MAX_CHARS:
        raise BadRequest(f"title is {len(title)} characters long; the limit is {TITLE_MAX_CHARS}")
    return title


def _agent(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name} must be a non-empty agent id (PROJECT/NAME)")
    return value


PRIORITY_LIMIT = 2**31 - 1
"""Priorities stay well inside what msgpack and Lua's doubles hold exactly."""


def _priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"priority must be a whole number; got {value!r}")
    if not -PRIORITY_LIMIT <= value <= PRIORITY_LIMIT:
        raise BadRequest(f"priority must be between -{PRIORITY_LIMIT} and {PRIORITY_LIMIT}")
    return value


def _depends(value: Iterable[object]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise BadRequest("depends_on must be a list of task ids, not one string")
    ids = tuple(dict.fromkeys(value))  # in order, each once
    if len(ids) > DEPENDS_MAX:
        raise BadRequest(f"depends_on: {len(ids)} given; the limit is {DEPENDS_MAX}")
    for dep in ids:
        if not isinstance(dep, str) or not dep:
            raise BadRequest(f"depends_on must hold task ids; got {dep!r}")
    return tuple(str(dep) for dep in ids)


def _status(value: str) -> TaskStatus:
    try:
        return TaskStatus(value)
    except ValueError:
        known = ", ".join(TaskStatus)
        raise BadRequest(f"status must be one of {known}; got {value!r}") from None


def _text_of(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class TaskBoard:
    """The task boards of every project on one bus.

    Args:
        client: The bus.
        keys: Its key names.
        redactor: Masks secrets in the texts stored (title, detail, result, reason).
        lost_after_s: How old a claim must be before :meth:`reconcile` may reopen it
            (the heartbeat TTL; tests shorten it).
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        *,
        redactor: Redactor | None = None,
        lost_after_s: float = HEARTBEAT_TTL_S,
        offer_s: float = OFFER_S,
    ) -> None:
        self._client = client
        self._keys = keys
        self._redactor = redactor or Redactor()
        self._lost_after_s = lost_after_s
        self._offer_us = str(int(offer_s * 1_000_000))
        self.next_loss_s: dict[str, float | None] = {}
        """Per project, as the last :meth:`reconcile` saw it: seconds until the heartbeat
        of a claim holder that stopped beating expires (``None``: none is dying), so a
        caller can reconcile again right then instead of a whole interval later."""
        self._dying: dict[str, set[str]] = {}
        self._claim = client.register_script(_CLAIM)
        self._finish = client.register_script(_FINISH)
        self._reopen = client.register_script(_REOPEN)
        self._confirm = client.register_script(_CONFIRM)
        self._claims = client.register_script(_CLAIMS)
        self._reopen_failed = client.register_script(REOPEN_FAILED)
        self._reopen_finished = client.register_script(REOPEN_FINISHED)
        self._record_work = client.register_script(RECORD_WORK)

    async def add(
        self,
        project: str,
        *,
        title: str,
        detail: str = "",
        priority: int = 0,
        depends_on: Iterable[str] = (),
        created_by: str,
        require_plan: bool = False,
    ) -> BoardTask:
        """Put an ``open`` task on the project's board.

        Raises:
            BadRequest: an argument is invalid, or a ``depends_on`` id is not on the
                board; nothing is stored.
        """
        project = checked_name(project)
        redact = self._redactor.redact
        title = redact(_title(title))
        detail = redact(_text("detail", detail, max_bytes=DETAIL_MAX_BYTES))
        priority = _priority(priority)
        deps = _depends(depends_on)
        created_by = _agent(created_by, "created_by")
        key = self._keys.board(project)
        if deps:
            # Tasks are never deleted, so one that exists now still exists at the HSETNX.
            found = await self._client.hmget(key, list(deps))
            missing = [dep for dep, raw in zip(deps, found, strict=True) if raw is None]
            if missing:
                raise BadRequest(
                    f"depends_on: no task {', '.join(missing)} on the board of {project}",
                    detail={"missing": missing},
                )
        sec, usec = await self._client.time()
        now = int(sec) * 1_000_000 + int(usec)
        while True:
            task = BoardTask(
                id=_new_id(),
                project=project,
                title=title,
                detail=detail,
                status=TaskStatus.OPEN,
                priority=priority,
                depends_on=deps,
                created_by=created_by,
                created=now,
                updated=now,
                require_plan=require_plan is True,
            )
            if await self._client.hsetnx(key, task.id, pack(task.to_wire())):
                await self._announce(task)
                return task  # else an id clash (40 random bits): draw again

    async def get(self, project: str, task_id: str) -> BoardTask | None:
        raw = await self._client.hget(self._keys.board(checked_name(project)), task_id)
        return None if raw is None else _decode(raw)

    async def list(
        self, project: str, *, status: TaskStatus | str | None = None
    ) -> list[BoardTask]:
        """The project's tasks, highest priority first, then oldest first.

        Raises:
            BadRequest: ``status`` is not a task status.
        """
        wanted = None if status is None else _status(status)
        raw = await self._client.hgetall(self._keys.board(checked_name(project)))
        tasks = [task for value in raw.values() if (task := _decode_or_skip(value)) is not None]
        return sorted(
            (t for t in tasks if wanted is None or t.status is wanted),
            key=lambda t: (-t.priority, t.created, t.id),
        )

    async def claim(self, project: str, task_id: str, *, agent: str) -> BoardTask:
        """Make ``agent`` the task's one assignee.

        Raises:
            TaskNotFound: no such task.
            TaskClaimed: the task is not open (held by someone, or finished).
            TaskBlocked: a dependency is not done.
        """
        agent = _agent(agent, "agent")
        reply = await self._run(self._claim, project, task_id, agent)
        outcome, task = reply[0], self._task(reply)
        if outcome == "claimed":
            raise _claimed(task, f"task {task_id} is {task.status}{_by(task)}")
        if outcome == "offered":
            raise offered_error(task, int(reply[2]))
        if outcome == "blocked":
            blocked = [_text_of(dep) for dep in reply[2:]]
            raise TaskBlocked(
                f"task {task_id} waits for {', '.join(blocked)} to be done",
                detail={"task": task_id, "blocked_by": blocked},
            )
        await self._announce(task)
        return task

    async def done(self, project: str, task_id: str, *, agent: str, result: str = "") -> BoardTask:
        """Mark the task ``done``; only its assignee may.

        Raises:
            TaskNotFound: no such task.
            TaskClaimed: ``agent`` does not hold the task's claim.
        """
        text = self._redactor.redact(_text("result", result, max_bytes=TEXT_MAX_BYTES))
        return await self._finish_as(project, task_id, agent, TaskStatus.DONE, "result", text)

    async def fail(self, project: str, task_id: str, *, agent: str, reason: str) -> BoardTask:
        """Mark the task ``failed`` with the reason; only its assignee may.

        Raises:
            TaskNotFound: no such task.
            TaskClaimed: ``agent`` does not hold the task's claim.
        """
        text = self._redactor.redact(_text("reason", reason, max_bytes=TEXT_MAX_BYTES))
        return await self._finish_as(project, task_id, agent, TaskStatus.FAILED, "reason", text)

    async def record_work(
        self, project: str, task_id: str, *, agent: str, work: WorkRecord
    ) -> BoardTask:
        """Record the branch ``agent`` works the task in (:mod:`~ateam.bus.board_work`).

        Raises:
            TaskNotFound: no such task.
            TaskClaimed: ``agent`` is not the task's assignee (in any status).
        """
        agent = _agent(agent, "agent")
        reply = await self._run(self._record_work, project, task_id, agent, pack(work.to_wire()))
        task = self._task(reply)
        if reply[0] == "claimed":
            raise _claimed(task, f"task {task_id} is {task.status}{_by(task)}, not by {agent}")
        return task

    async def reopen(self, project: str, task_id: str, *, by: str) -> BoardTask:
        """A ``failed`` task back to ``open``, for anyone (:mod:`~ateam.bus.board_reopen`).

        Raises:
            TaskNotFound: no such task.
            TaskClaimed: the task is not ``failed`` (its status in the detail).
        """
        return await self._again(project, task_id, by, "reopened", offer_to="")

    async def retry(self, project: str, task_id: str, *, by: str) -> BoardTask:
        """A ``failed`` task back to ``open``, offered first to the agent that failed it
        when that agent is running (:mod:`~ateam.bus.board_reopen`).

        Raises:
            TaskNotFound: no such task.
            TaskClaimed: the task is not ``failed`` (its status in the detail).
        """
        found = await self.get(project, task_id)
        failed_by = found.assignee if found is not None else ""
        # Offered only to a running agent (its heartbeat alive): nobody waits for the dead.
        # The script offers it only if that agent is still the one that failed the task.
        if "/" not in failed_by or not await self._client.exists(self._keys.alive(failed_by)):
            failed_by = ""
        return await self._again(project, task_id, by, "retried", offer_to=failed_by)

    async def rework(self, project: str, task_id: str, *, by: str, why: str) -> BoardTask:
        """A ``done`` or ``failed`` task back to ``open`` because its work was thrown away
        (:mod:`~ateam.bus.board_rework`); ``why`` becomes its ``reason`` and ``last_error``.

        Raises:
            TaskNotFound: no such task.
            TaskClaimed: the task is open or claimed (its status in the detail).
        """
        reason = f"{_text('reason', why, max_bytes=TEXT_MAX_BYTES)} (by {_agent(by, 'by')})"
        reply = await self._run(self._reopen_finished, project, task_id, reason)
        task = self._task(reply)
        if reply[0] == "not_finished":
            raise _claimed(task, f"task {task_id} is {task.status}{_by(task)}, not finished")
        await self._announce(task)
        return task

    async def confirm(self, project: str, task_id: str, *, agent: str) -> BoardTask:
        """Check, for ``agent`` about to run the task, that the board says it holds it.

        Atomic with :meth:`reconcile`'s reopen: once this returns, no reconcile that
        judged ``agent`` lost before its heartbeat came back can reopen the task, and
        once such a reopen happened this raises. The caller must be heartbeating already.

        Raises:
            TaskNotFound: no such task.
            TaskClaimed: ``agent`` does not hold the task's claim (the error's detail
                says its status and assignee now).
        """
        agent = _agent(agent, "agent")
        reply = await self._run(self._confirm, project, task_id, agent)
        task = self._task(reply)
        if reply[0] == "claimed":
            raise _claimed(task, f"task {task_id} is {task.status}{_by(task)}")
        return task

    async def release(
        self, project: str, task_id: str, *, agent: str, reason: str
    ) -> BoardTask | None:
        """Give up ``agent``'s claim of the task: back to ``open`` with ``reason``.

        Only while ``agent`` still holds it; returns the task reopened, else ``None``.
        """
        agent = _agent(agent, "agent")
        reason = self._redactor.redact(_text("reason", reason, max_bytes=TEXT_MAX_BYTES))
        return await self._reopen_lost(project, task_id, agent, 0.0, reason=reason)

    async def reopen_orphans(
        self, project: str, alive: Collection[str]
    ) -> builtins.list[BoardTask]:
        """Put back to ``open`` every claimed task whose assignee is not in ``alive``.

        Each task is reopened only if it is still claimed by the assignee judged lost
        when the script runs. Returns the tasks reopened. (:meth:`reconcile` judges
        liveness itself, from the registry's keys.)
        """
        reopened: builtins.list[BoardTask] = []
        for task in await self.list(project, status=TaskStatus.CLAIMED):
            if task.assignee not in alive:
                found = await self._reopen_lost(project, task.id, task.assignee, min_age_s=0)
                if found is not None:
                    reopened.append(found)
        return reopened

    async def reconcile(
        self, project: str, *, keep: Collection[str] = ()
    ) -> builtins.list[BoardTask]:
        """Reopen the claims of the project's board whose holders are gone; returns them.

        A holder is gone when its registry heartbeat has lapsed (no ``alive`` key) and
        no planned restart is under way (no ``grace`` key), and its claim is older than
        ``lost_after_s`` (the heartbeat TTL). ``keep`` names holders to spare
        whatever Redis says: an agent reconciling never reopens its own claims. One read
        of the claims index when nothing is claimed; Redis errors reach the caller.
        """
        project = checked_name(project)
        # The claims and the server's time in one read: a claim confirmed or taken after
        # it is never reopened on the liveness judged below (see confirm()).
        reply = await self._claims(keys=[_claims_key(self._keys.board(project))])
        judged_at, flat = int(reply[0]), reply[1:]
        if not flat:
            return []
        held = {_text_of(flat[i]): _text_of(flat[i + 1]) for i in range(0, len(flat), 2)}
        holders = sorted(set(held.values()) - set(keep))
        if not holders:
            return []
        pipe = self._client.pipeline(transaction=False)
        for holder in holders:
            pipe.pttl(self._keys.alive(holder))
            pipe.exists(self._keys.grace(holder))
        replies = await pipe.execute()
        ttls, graces = replies[0::2], replies[1::2]
        lost = {
            holder
            for holder, ttl, grace in zip(holders, ttls, graces, strict=True)
            if ttl == -2 and not grace  # -2: no alive key (-1, no expiry, counts as alive)
        }
        # A live agent renews its heartbeat every interval, so its key never runs this
        # low; one that does has stopped beating and is lost when the key expires.
        beating = (HEARTBEAT_TTL_S - HEARTBEAT_INTERVAL_S) * 1000
        dying = {h: ttl / 1000 for h, ttl in zip(holders, ttls, strict=True) if 0 <= ttl < beating}
        self.next_loss_s[project] = min(dying.values()) if dying else None
        # Seen beating, then seen gone: a heartbeat lost for sure, so the claim's age does
        # not matter (that rule is for ids that never beat at all).
        seen_dying, self._dying[project] = self._dying.get(project, set()), set(dying)
        reopened: builtins.list[BoardTask] = []
        for task_id, holder in sorted(held.items()):
            if holder in lost:
                min_age = 0.0 if holder in seen_dying else self._lost_after_s
                found = await self._reopen_lost(project, task_id, holder, min_age, judged_at)
                if found is not None:
                    reopened.append(found)
        return reopened

    # ------------------------------------------------------------------ internals

    async def _announce(self, task: BoardTask) -> None:
        """Tell idle agents that take tasks (``take_tasks``) that the board changed.

        After the change, not in its script: a notice is a hint to look, and a reader
        told of a change always finds it.
        """
        notice = {"project": task.project, "id": task.id, "status": str(task.status)}
        await self._client.publish(self._keys.board_channel(task.project), pack(notice))

    async def _finish_as(
        self, project: str, task_id: str, agent: str, status: TaskStatus, field: str, text: str
    ) -> BoardTask:
        agent = _agent(agent, "agent")
        reply = await self._run(self._finish, project, task_id, agent, str(status), field, text)
        task = self._task(reply)
        if reply[0] == "claimed":
            raise _claimed(task, f"task {task_id} is {task.status}{_by(task)}, not by {agent}")
        await self._announce(task)  # a task done may unblock others
        return task

    async def _again(
        self, project: str, task_id: str, by: str, verb: str, *, offer_to: str
    ) -> BoardTask:
        by = _agent(by, "by")
        reason = f"{verb} by {by}"
        reply = await self._run(
            self._reopen_failed, project, task_id, reason, offer_to, self._offer_us
        )
        task = self._task(reply)
        if reply[0] == "not_failed":
            message = f"task {task_id} is {task.status}{_by(task)}; only a failed task is {verb}"
            raise _claimed(task, message)
        await self._announce(task)  # wakes the agents that take tasks, the offered one first
        return task

    async def _reopen_lost(
        self,
        project: str,
        task_id: str,
        holder: str,
        min_age_s: float,
        judged_at: int = 0,
        *,
        reason: str = "",
    ) -> BoardTask | None:
        """Reopen one claim of ``holder`` judged lost; None when it changed meanwhile.

        ``judged_at``: the server time (µs) read before ``holder`` was judged lost; a
        claim taken or confirmed since is kept (0: the caller's judgement is taken as is).
        """
        reason = reason or f"assignee {holder} lost (heartbeat)"
        min_age = str(int(min_age_s * 1_000_000))
        reply = await self._script(
            self._reopen, project, task_id, holder, reason, min_age, str(judged_at)
        )
        if reply[0] != "ok":
            return None
        task = self._task(reply)
        await self._announce(task)
        return task

    async def _run(
        self, script: Any, project: str, task_id: str, *args: str | bytes
    ) -> builtins.list[Any]:
        reply = await self._script(script, project, task_id, *args)
        if reply[0] == "not_found":
            raise TaskNotFound(
                f"no task {task_id} on the board of {project}",
                detail={"task": task_id, "project": project},
            )
        return reply

    async def _script(
        self, script: Any, project: str, task_id: str, *args: str | bytes
    ) -> builtins.list[Any]:
        board = self._keys.board(checked_name(project))
        reply: builtins.list[Any] = await script(
            keys=[board, _claims_key(board)], args=[task_id, *args]
        )
        reply[0] = _text_of(reply[0])
        return reply

    @staticmethod
    def _task(reply: builtins.list[Any]) -> BoardTask:
        return _decode(reply[1])


def _claims_key(board: str) -> str:
    """The claims index of a board: the board's key (and so its hash tag, its slot) + suffix."""
    return f"{board}:claims"


def _decode_or_skip(raw: bytes | str) -> BoardTask | None:
    """A listed task, or None (logged) for a record this version cannot read: one bad
    record must not hide the whole board from agents, verbs and the snapshot."""
    try:
        return _decode(raw)
    except (AteamError, ValueError, TypeError, KeyError) as exc:
        log.warning("unreadable task record skipped: %s", exc)
        return None


def _decode(raw: bytes | str) -> BoardTask:
    return BoardTask.from_wire(unpack(raw.encode() if isinstance(raw, str) else raw))


def _by(task: BoardTask) -> str:
    return f" by {task.assignee}" if task.assignee else ""


def _claimed(task: BoardTask, message: str) -> TaskClaimed:
    return TaskClaimed(
        message,
        detail={"task": task.id, "status": str(task.status), "assignee": task.assignee},
    )
