"""A failed board task goes back to work (issue 26): ``reopen`` and ``retry``.

Both take a ``failed`` task back to ``open`` in one Lua script, keeping why it failed:
the failure's reason moves to ``last_error`` (kept through the claims after it, so the
next claimant reads what went wrong), ``reopened`` counts the round trips, and
``reason`` says who sent it back. A task that is not ``failed`` is refused with
``task.claimed``, its status in the error's detail: an open task needs no reopen, a
claimed one has a holder working on it, and a done one stays done.

* ``reopen``: open to anyone, at once.
* ``retry``: offered back to the agent that failed it. If that agent is running (its
  registry heartbeat key exists just before the script runs, and the script finds it
  still the task's last assignee) the task is open but reserved for it for
  :data:`OFFER_S` seconds (server clock): its claim goes through, anyone else's is
  refused with ``task.claimed`` (detail ``offered_to``, ``offer_left_s``), and an idle
  ``take_tasks`` agent, woken by the board's change notice, claims it first. After the
  offer lapses, or at once when that agent is not running, it is open to anyone, as
  after a reopen. The first claim clears the offer.

The claim script (:mod:`ateam.bus.board`) honours the offer; this module holds the
script that makes one.
"""

from __future__ import annotations

from ateam.errors import TaskClaimed
from ateam.wire.board import BoardTask

__all__ = ["OFFER_S", "REOPEN_FAILED", "offered_error"]

OFFER_S = 30.0
"""How long a retried task waits for the agent that failed it before anyone may claim it:
three heartbeat TTLs, time for an idle agent to hear of it and claim it, not so long that
a busy one holds the team up."""

# KEYS[1] board; ARGV[1] task id, ARGV[2] the reason it goes back (who sent it), ARGV[3]
# the agent to offer it to ('' for none: it is offered only if it is still the one that
# failed the task, as the caller saw it alive), ARGV[4] the offer's length (µs).
REOPEN_FAILED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {'not_found'} end
local task = cmsgpack.unpack(raw)
if task.status ~= 'failed' then return {'not_failed', raw} end
local failed_by = task.assignee
task.last_error = task.reason
task.reopened = tonumber(task.reopened or 0) + 1
task.status = 'open'
task.assignee = ''
task.reason = ARGV[2]
task.updated = now
task.offer_until = 0
task.offered_to = ''
if ARGV[3] ~= '' and ARGV[3] == failed_by then
  task.offered_to = ARGV[3]
  task.offer_until = now + tonumber(ARGV[4])
end
local packed = cmsgpack.pack(task)
redis.call('HSET', KEYS[1], ARGV[1], packed)
return {'ok', packed}
"""
"""No claims index to touch: a failed task is not in it, and an open one is not either."""


def offered_error(task: BoardTask, left_us: int) -> TaskClaimed:
    """The refusal of a claim of a task offered to another agent for ``left_us`` more µs."""
    left_s = round(left_us / 1_000_000, 1)
    return TaskClaimed(
        f"task {task.id} is offered to {task.offered_to} (it failed it and was asked to "
        f"retry) for {left_s:g} s more",
        detail={
            "task": task.id,
            "status": str(task.status),
            "assignee": task.assignee,
            "offered_to": task.offered_to,
            "offer_left_s": left_s,
        },
    )
