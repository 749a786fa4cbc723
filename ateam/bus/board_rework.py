"""A finished board task goes back to open because its work was thrown away (issue 27).

``ateam discard TASK --reopen`` deletes the branch a task's agent worked on; the task,
``done`` or ``failed``, must then be done again. Unlike :mod:`~ateam.bus.board_reopen`
(failed tasks only, why it failed kept for the next claimant), this takes a ``done``
task back too: its ``result`` and its ``work`` record are cleared (they describe work
that no longer exists), and ``last_error`` says the work was discarded, so whoever claims
it next knows it was done once and thrown away.
"""

from __future__ import annotations

__all__ = ["REOPEN_FINISHED"]

# KEYS[1] board; ARGV[1] task id, ARGV[2] the reason it goes back (who discarded what).
REOPEN_FINISHED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {'not_found'} end
local task = cmsgpack.unpack(raw)
if task.status ~= 'failed' and task.status ~= 'done' then return {'not_finished', raw} end
if task.status == 'failed' and task.reason ~= '' then
  task.last_error = task.reason .. '; ' .. ARGV[2]
else
  task.last_error = ARGV[2]
end
task.reopened = tonumber(task.reopened or 0) + 1
task.status = 'open'
task.assignee = ''
task.reason = ARGV[2]
task.result = ''
task.work = nil
task.updated = now
task.offer_until = 0
task.offered_to = ''
local packed = cmsgpack.pack(task)
redis.call('HSET', KEYS[1], ARGV[1], packed)
return {'ok', packed}
"""
"""No claims index to touch: neither a done nor a failed task is in it."""
