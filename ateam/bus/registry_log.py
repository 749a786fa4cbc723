"""The registry's change log (issue 28 §4): which agents' records moved, in order.

A reader that keeps a copy of a project's registry (the session snapshot of every host)
must not read 10 000 entries a second to learn that none changed. Every write of an
entry, a heartbeat field's removal or a final exit therefore also notes the agent in
the project's change log, in the same pipeline and after the write it announces:

* ``<registry>:log`` — a hash: ``ver``, a counter raised once per noted change;
  ``epoch``, a token the first writer after the key was lost sets (a Redis that restarted
  empty, a flushed database: every copy made before is then void); ``floor``, the
  highest version trimmed away (a reader that saw less than that starts over).
* ``<registry>:changes`` — a sorted set: agent id → the version of its last change,
  at most :data:`CHANGES_KEPT` members (the oldest are trimmed, raising ``floor``).

A reader asks ``ZRANGEBYSCORE changes (seen +inf``, then reads just those agents;
because the note lands after the write, a reader that sees a note reads the write.
The keys share the registry's hash tag, so the script touches one Cluster slot, and the
project prefix, so a project's ACL grants them.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import redis.asyncio as aioredis

from ateam.bus.keys import Keys

__all__ = ["CHANGES_KEPT", "RESYNC_S", "changes_key", "log_key", "note_changes"]

CHANGES_KEPT = 4096
"""Members the change set keeps: a reader a tick behind more than this many changes
(a whole team joining at once) reads the registry whole, as it would anyway."""
RESYNC_S = 60.0
"""A reader of the log reads a project whole at least this often, whatever the log says:
a bound on any drift nobody foresaw (a writer that notes nothing, a foreign one; a key
lost to eviction)."""

# KEYS[1] log hash, KEYS[2] change set; ARGV[1] epoch proposal, ARGV[2] members kept,
# ARGV[3..] agent ids. Returns the version after the last note.
_NOTE_LUA = """
redis.call('HSETNX', KEYS[1], 'epoch', ARGV[1])
local ver = 0
for i = 3, #ARGV do
  ver = redis.call('HINCRBY', KEYS[1], 'ver', 1)
  redis.call('ZADD', KEYS[2], ver, ARGV[i])
end
local kept = tonumber(ARGV[2])
local n = redis.call('ZCARD', KEYS[2])
if n > kept then
  local last = n - kept - 1
  local cut = redis.call('ZRANGE', KEYS[2], last, last, 'WITHSCORES')
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, last)
  redis.call('HSET', KEYS[1], 'floor', cut[2])
end
return ver
"""


def log_key(keys: Keys, project: str) -> str:
    """``<registry>:log``: the version counter, the epoch and the trim floor."""
    return f"{keys.registry(project)}:log"


def changes_key(keys: Keys, project: str) -> str:
    """``<registry>:changes``: agent id → version of its last change."""
    return f"{keys.registry(project)}:changes"


def note_changes(
    pipe: aioredis.client.Pipeline,
    keys: Keys,
    project: str,
    agents: Sequence[bytes | str],
) -> None:
    """Queue on ``pipe`` the note that ``agents`` of ``project`` changed.

    Queue it after the writes it announces: pipelined commands run in order.
    """
    # EVAL, not EVALSHA: a pipeline (a Cluster one above all) cannot load a script a
    # node lacks mid-flight, and the text is a few hundred bytes on a rare write.
    # A new epoch is proposed each time (HSETNX: only the first note after a loss sets
    # it), so even the process that wrote before the loss starts a different one.
    pipe.eval(
        _NOTE_LUA,
        2,
        log_key(keys, project),
        changes_key(keys, project),
        secrets.token_hex(8),
        CHANGES_KEPT,
        *agents,
    )
