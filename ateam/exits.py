"""Every process exit status ateam uses (SPEC §2), and which error ends a process with which.

Beside :mod:`ateam.errors`, whose codes the tables below map: the console and the verbs
use :data:`CLI_EXIT`, the agent :data:`AGENT_EXIT`.
"""

from __future__ import annotations

from enum import IntEnum, unique

from ateam.errors import AteamError, Code

__all__ = [
    "AGENT_EXIT",
    "CLI_EXIT",
    "EXIT_BOOTSTRAP_REFUSED",
    "EXIT_LOCK_LOST",
    "EXIT_WORKER_CRASHED",
    "Exit",
    "agent_exit_code",
    "cli_exit_code",
]


@unique
class Exit(IntEnum):
    """Every process exit status ateam uses (SPEC §2), written once."""

    OK = 0
    FAILED = 1
    REDIS_UNAVAILABLE = 2
    OWNERSHIP_DENIED = 3
    USAGE = 4
    """A malformed command line or request, an unknown agent, an invalid configuration."""
    TASK_FAILED = 5
    """Not in SPEC §2's list: a task the console or verb queued and waited for did not
    succeed (``task.failed``: ``ateam send --wait``, a console reading a script)."""
    DUPLICATE_INSTANCE = 11
    CONFIG_INVALID = 12
    AGENT_REDIS_UNAVAILABLE = 13
    LOCK_LOST = 14
    """Not in SPEC §2's list: the lock lapsed (e.g. a long Redis outage). Unlike 11
    nobody else is known to hold it, so a supervisor may restart the agent."""
    WORKER_CRASHED = 15
    BOOTSTRAP_REFUSED = 16
    """Not in SPEC §2's list: the ``--bootstrap`` token was refused before the agent
    joined. Final like 12 (a used or expired token never becomes valid), but told apart
    from a configuration error so a script knows to ask for a new token."""
    REDIS_PERMISSION_DENIED = 17
    """Redis refused the agent's ACL user a command, key or channel (``redis.noperm``): final."""
    REDIS_AUTH_FAILED = 18
    """Redis refused the agent's credentials (``redis.auth``): final."""
    EVICTION_POLICY = 19
    """The server may evict the agent's keys (``redis.eviction_policy``): final."""
    STORAGE_CORRUPT = 20
    """Not in SPEC §2's list: a state file is damaged beyond automatic repair
    (``storage.corrupt``) at start. Final: every restart would meet the same file,
    until a person moves it aside."""
    INTERRUPTED = 130
    """Ctrl-C at a verb, as a shell reports SIGINT."""


# Console and verbs use the first table, the agent the second.
CLI_EXIT: dict[str, Exit] = {
    Code.REDIS_UNAVAILABLE: Exit.REDIS_UNAVAILABLE,
    Code.OWNERSHIP_DENIED: Exit.OWNERSHIP_DENIED,
    # Refused like a console that does not own the agent: not the right holder.
    Code.IDENTITY_REFUSED: Exit.OWNERSHIP_DENIED,
    Code.BAD_REQUEST: Exit.USAGE,
    Code.NAME_AMBIGUOUS: Exit.USAGE,
    Code.NO_SUCH_METHOD: Exit.USAGE,
    Code.AGENT_NOT_FOUND: Exit.USAGE,
    Code.CONFIG_INVALID: Exit.USAGE,
    Code.REDIS_NOPERM: Exit.REDIS_UNAVAILABLE,
    Code.REDIS_AUTH: Exit.REDIS_UNAVAILABLE,
    Code.REDIS_EVICTION_POLICY: Exit.REDIS_UNAVAILABLE,
    Code.REDIS_OOM: Exit.REDIS_UNAVAILABLE,
    Code.REDIS_READONLY: Exit.REDIS_UNAVAILABLE,
    Code.TASK_FAILED: Exit.TASK_FAILED,
    Code.WORK_NOT_FOUND: Exit.USAGE,
}
AGENT_EXIT: dict[str, Exit] = {
    Code.DUPLICATE_INSTANCE: Exit.DUPLICATE_INSTANCE,
    Code.CONFIG_INVALID: Exit.CONFIG_INVALID,
    Code.REDIS_UNAVAILABLE: Exit.AGENT_REDIS_UNAVAILABLE,
    Code.LOCK_LOST: Exit.LOCK_LOST,
    Code.BOOTSTRAP_REFUSED: Exit.BOOTSTRAP_REFUSED,
    Code.REDIS_NOPERM: Exit.REDIS_PERMISSION_DENIED,
    Code.REDIS_AUTH: Exit.REDIS_AUTH_FAILED,
    Code.REDIS_EVICTION_POLICY: Exit.EVICTION_POLICY,
    Code.STORAGE_CORRUPT: Exit.STORAGE_CORRUPT,
    # A repository worktrees cannot branch from (issue 27): as final as a bad configuration,
    # every restart would meet the same repository until a person commits or checks out.
    Code.GIT_NO_COMMIT: Exit.CONFIG_INVALID,
    Code.GIT_DETACHED_HEAD: Exit.CONFIG_INVALID,
    Code.GIT_BRANCH_EXISTS: Exit.CONFIG_INVALID,  # `worktree: agent` and a branch not ours
    # A full or read-only server may recover (memory freed, a failover): restartable.
    Code.REDIS_OOM: Exit.AGENT_REDIS_UNAVAILABLE,
    Code.REDIS_READONLY: Exit.AGENT_REDIS_UNAVAILABLE,
}
EXIT_LOCK_LOST = Exit.LOCK_LOST
EXIT_WORKER_CRASHED = Exit.WORKER_CRASHED
EXIT_BOOTSTRAP_REFUSED = Exit.BOOTSTRAP_REFUSED


def cli_exit_code(error: AteamError) -> int:
    return int(CLI_EXIT.get(str(error.code), Exit.FAILED))


def agent_exit_code(error: AteamError) -> int:
    return int(AGENT_EXIT.get(str(error.code), Exit.FAILED))
