"""A board task's branch (issue 27): ``record_work`` writes what its agent's worktree holds.

An agent with ``worktree: task`` (or ``agent``) records on the task it works the branch it
works in: once when the task's worktree is made (branch, base, worktree, nothing
committed yet), so a running task shows its branch, and again at the task's end with the
commit and the diffstat against the base, before the task is marked done, so a reader
that sees it done sees its work too.

Only the task's assignee writes it, whatever the task's status: a task is marked done
(or failed) by the model's own ``tasks.done`` tool before the agent's end-of-task commit
in some runs, and the record must still land then. A teammate that took the task over
after a reopen is its assignee now, and a stale agent cannot overwrite its record.

The script is here and the method on :class:`~ateam.bus.board.TaskBoard`, as
:mod:`ateam.bus.board_reopen` does it.
"""

from __future__ import annotations

__all__ = ["RECORD_WORK"]

# KEYS[1] board; ARGV[1] task id, ARGV[2] the agent that records, ARGV[3] the record
# (a msgpack map, WorkRecord.to_wire). `updated` is not moved: the task's status did not
# change, and the reconcile reads `updated` as "claimed again since it looked".
RECORD_WORK = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {'not_found'} end
local task = cmsgpack.unpack(raw)
if task.assignee ~= ARGV[2] then return {'claimed', raw} end
task.work = cmsgpack.unpack(ARGV[3])
local packed = cmsgpack.pack(task)
redis.call('HSET', KEYS[1], ARGV[1], packed)
return {'ok', packed}
"""
