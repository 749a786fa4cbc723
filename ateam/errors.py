"""Every error ateam raises, and the stable codes clients branch on.

One file on purpose: the tree below is the whole catalogue, and codes are kept in one place.

The tree::

    AteamError                      code: internal
    ├── ConfigError                 config.invalid         (agent exit 12)
    ├── BusError
    │   ├── RedisUnavailable        redis.unavailable      (exit 2 / agent 13)
    │   ├── EmbeddedServerError     redis.unavailable
    │   │   └── EmbeddedElsewhere   redis.unavailable      (the home's server runs on another host)
    │   ├── RedisPermissionDenied   redis.noperm           (exit 2 / agent 17, final)
    │   ├── RedisAuthFailed         redis.auth             (exit 2 / agent 18, final)
    │   │   └── TlsClientRefused    redis.auth             (no or an untrusted TLS client cert)
    │   ├── EvictionPolicyRefused   redis.eviction_policy  (exit 2 / agent 19, final)
    │   ├── RedisOutOfMemory        redis.oom              (exit 2 / agent 13)
    │   └── RedisReadOnly           redis.readonly         (exit 2 / agent 13)
    ├── DuplicateInstance           duplicate.instance     (agent exit 11)
    ├── BootstrapRefused            bootstrap.refused      (agent exit 16)
    ├── SpawnFailed                 spawn.failed           (a spawned agent never served)
    ├── LockLost                    lock.lost
    ├── WorkerStalled               worker.stalled         (the stall watch cancelled a step)
    ├── StorageError                storage.corrupt        (at start: agent exit 20, final)
    │   ├── StorageIoError          storage.io             (an OS error reading or writing)
    │   └── StorageFull             storage.full           (ENOSPC, EDQUOT: the agent pauses)
    ├── UsageError                  bad_request            (exit 4)
    │   ├── BadRequest              (also an RpcError: the same meaning, from an agent)
    │   └── AmbiguousName           name.ambiguous         (exit 4: a prefix of several names)
    ├── ToolDenied                  tool.denied
    │   └── PlanRequired            plan.required          (edits wait for an approved plan)
    ├── FsDenied                    fs.denied
    ├── FsConflict                  fs.conflict
    ├── KbDenied                    kb.ingest.denied       (a path outside the sandbox)
    ├── KbUnavailable               kb.unavailable         (no chromadb, or another embedder)
    ├── ProjectExists               project.exists         (`ateam init` into a project)
    ├── PromptProtectedViolation    prompt.protected_violation (a protected block edited)
    ├── TaskNotFound                task.not_found         (no such task on the board)
    ├── TaskClaimed                 task.claimed           (not open to claim, or not yours)
    ├── TaskBlocked                 task.blocked           (a dependency is not done)
    ├── GateRefused                 hook.refused           (a quality-gate hook exited 2)
    ├── HookFailed                  hook.failed            (a hook broke: not a refusal)
    ├── IdentityRefused             identity.refused       (exit 3: acting as an agent unproven)
    ├── TaskFailed                  task.failed            (exit 5: a task waited for failed)
    ├── GitError                    git.failed             (git refused: its last line says why)
    │   ├── NotARepository          git.not_repository     (worktrees need a git repository)
    │   ├── NoCommitYet             git.no_commit          (a repository with nothing to branch)
    │   ├── DetachedHead            git.detached_head      (no branch to use as the base)
    │   ├── BranchExists            git.branch_exists      (a branch ateam did not make)
    │   ├── TreeDirty               git.dirty              (uncommitted changes in the way)
    │   └── MergeConflict           git.conflict           (the base moved; files in detail)
    ├── WorkNotFound                work.not_found         (exit 4: no branch for that name or task)
    ├── WorkBusy                    work.busy              (its agent still works on it)
    ├── ProviderError               provider.error         (a model provider failed)
    │   ├── RateLimited             provider.rate_limited  (HTTP 429)
    │   ├── Overloaded              provider.overloaded    (HTTP 529, 503)
    │   ├── ProviderUnavailable     provider.unavailable   (other 5xx, connection)
    │   ├── ContextTooLong          provider.context_too_long
    │   ├── AuthFailed              provider.auth          (401/403, missing key)
    │   └── RuntimeError_           runtime.error          (an ACP coding agent failed)
    │       ├── RuntimeMissing      runtime.missing        (its command is not installed)
    │       ├── RuntimeAuth         runtime.auth           (it needs a login first)
    │       ├── RuntimeProtocol     runtime.protocol       (a newer protocol, garbage, oversized)
    │       ├── RuntimeTimeout      runtime.timeout        (no answer to initialize or cancel)
    │       ├── RuntimeCrashed      runtime.crashed        (its process died mid-prompt)
    │       └── RuntimeStopped      runtime.stopped        (it ended a prompt early: max_tokens ...)
    └── RpcError                    (code of the remote error)
        ├── OwnershipDenied         ownership.denied       (exit 3)
        ├── AgentNotFound           agent.not_found
        ├── PayloadTooLarge         payload.too_large
        ├── RpcTimeout              timeout
        ├── NoSuchMethod            no_such_method
        └── BadRequest              bad_request

One meaning, one code, declared on one class: a malformed request is ``bad_request``
whether the user typed it (:class:`UsageError`) or an agent refused it
(:class:`BadRequest`, which is both). Codes are part of the wire protocol: they never
change once published. Messages are for people and may be reworded. Exit codes are
in :mod:`ateam.exits`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar

from ateam._json import JsonObject


class Code(StrEnum):
    """Stable error codes (SPEC §4.4)."""

    REDIS_UNAVAILABLE = "redis.unavailable"
    OWNERSHIP_DENIED = "ownership.denied"
    AGENT_NOT_FOUND = "agent.not_found"
    DUPLICATE_INSTANCE = "duplicate.instance"
    CONFIG_INVALID = "config.invalid"
    PROMPT_PROTECTED_VIOLATION = "prompt.protected_violation"
    TOOL_DENIED = "tool.denied"
    FS_DENIED = "fs.denied"
    FS_CONFLICT = "fs.conflict"
    KB_INGEST_DENIED = "kb.ingest.denied"
    KB_UNAVAILABLE = "kb.unavailable"
    PAYLOAD_TOO_LARGE = "payload.too_large"
    TIMEOUT = "timeout"
    NO_SUCH_METHOD = "no_such_method"
    BAD_REQUEST = "bad_request"
    INTERNAL = "internal"
    LOCK_LOST = "lock.lost"
    STORAGE_CORRUPT = "storage.corrupt"
    PROVIDER_ERROR = "provider.error"
    PROVIDER_RATE_LIMITED = "provider.rate_limited"
    PROVIDER_OVERLOADED = "provider.overloaded"
    PROVIDER_UNAVAILABLE = "provider.unavailable"
    PROVIDER_CONTEXT_TOO_LONG = "provider.context_too_long"
    PROVIDER_AUTH = "provider.auth"
    BOOTSTRAP_REFUSED = "bootstrap.refused"
    SPAWN_FAILED = "spawn.failed"
    WORKER_STALLED = "worker.stalled"
    STORAGE_FULL = "storage.full"
    STORAGE_DAMAGED = "storage.damaged"
    """Not an error a call returns: the code of the warning that reports a damaged file."""
    PROJECT_EXISTS = "project.exists"
    STORAGE_IO = "storage.io"
    TASK_NOT_FOUND = "task.not_found"
    TASK_CLAIMED = "task.claimed"
    TASK_BLOCKED = "task.blocked"
    TEAM_HOP_LIMIT = "team.hop_limit"
    REDIS_NOPERM = "redis.noperm"
    REDIS_AUTH = "redis.auth"
    REDIS_OOM = "redis.oom"
    REDIS_READONLY = "redis.readonly"
    REDIS_EVICTION_POLICY = "redis.eviction_policy"
    RUNTIME_ERROR = "runtime.error"
    RUNTIME_MISSING = "runtime.missing"
    RUNTIME_AUTH = "runtime.auth"
    RUNTIME_PROTOCOL = "runtime.protocol"
    RUNTIME_TIMEOUT = "runtime.timeout"
    RUNTIME_CRASHED = "runtime.crashed"
    RUNTIME_STOPPED = "runtime.stopped"
    IDENTITY_REFUSED = "identity.refused"
    NAME_AMBIGUOUS = "name.ambiguous"
    TASK_FAILED = "task.failed"
    """A task a front end queued and waited for ended with an error (``send --wait``, a
    piped console); also how ``ps`` heads the alert of an agent whose last task failed."""
    TASK_INTERRUPTED = "task.interrupted"
    """Not an error a call returns: the code of a ``task.end`` stopped by ``interrupt``."""
    TASK_CANCELLED = "task.cancelled"
    """Not an error a call returns: the code of a ``task.end`` stopped by ``cancel``."""
    TASK_ITERATION_LIMIT = "task.iteration_limit"
    """Not an error a call returns: a task that reached ``max_iterations`` model calls."""
    HOOK_REFUSED = "hook.refused"
    HOOK_FAILED = "hook.failed"
    PLAN_REQUIRED = "plan.required"
    MAILBOX_FULL = "mailbox.full"
    GIT_FAILED = "git.failed"
    GIT_NOT_REPOSITORY = "git.not_repository"
    GIT_NO_COMMIT = "git.no_commit"
    GIT_DETACHED_HEAD = "git.detached_head"
    GIT_BRANCH_EXISTS = "git.branch_exists"
    GIT_DIRTY = "git.dirty"
    GIT_CONFLICT = "git.conflict"
    WORK_NOT_FOUND = "work.not_found"
    WORK_BUSY = "work.busy"


class AteamError(Exception):
    """Root of every ateam error: a stable code, a message for people, and detail."""

    code: ClassVar[str] = Code.INTERNAL
    hint: ClassVar[str] = ""

    def __init__(self, message: str, *, detail: Mapping[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        # A copy: the error owns its detail, and code that raises may add to it.
        self.detail: dict[str, Any] = dict(detail) if detail else {}

    def one_line(self) -> str:
        """The single line shown to people: what failed, the code, what to do."""
        hint = f" — {self.hint}" if self.hint else ""
        return f"error [{self.code}]: {self.message}{hint}"

    def to_wire(self) -> JsonObject:
        return {"code": str(self.code), "message": self.message, "detail": self.detail}


class ConfigError(AteamError):
    """A configuration file is missing, unreadable or fails its schema.

    One error may stand for several problems found in one load
    (:func:`ateam.config.problems.combined`): its ``problems`` are each one's own error.
    """

    code = Code.CONFIG_INVALID

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        where = ": ".join(part for part in (file, field) if part)
        super().__init__(
            f"{where}: {message}" if where else message,
            detail={"file": file, "field": field},
        )
        self.file = file
        self.field = field
        self.problems: tuple[ConfigError, ...] = (self,)
        """Every problem this error reports: itself, unless it lists several."""


class BusError(AteamError):
    """Something about the Redis bus went wrong."""

    code = Code.REDIS_UNAVAILABLE


class RedisUnavailable(BusError):
    hint = "check the Redis URL (--redis, ATEAM_REDIS_URL) or run `ateam server status`"


class EmbeddedServerError(BusError):
    hint = "see `ateam server status`; the server log is under ~/.ateam/redis/"


class EmbeddedElsewhere(EmbeddedServerError):
    """The home's embedded server runs on another host (a home shared over NFS).

    Its unix socket cannot be reached from here, and a second server must not be started
    on the same data directory; the message says what to do instead.
    """

    hint = ""

    def __init__(self, message: str, *, host: str, pid: int) -> None:
        super().__init__(message, detail={"host": host, "pid": pid})
        self.host = host
        self.pid = pid


class RedisPermissionDenied(BusError):
    """Redis refused a command, key or channel to the ACL user (``NOPERM``).

    A configuration error, not an outage: retrying cannot help until the ACL changes,
    so an agent that meets it at start exits for good (exit 17).
    """

    code = Code.REDIS_NOPERM
    hint = "give the Redis ACL user what ateam needs (`ateam acl PROJECT` prints it)"


class RedisAuthFailed(BusError):
    """Redis refused the credentials (``WRONGPASS``, ``NOAUTH``, a disabled user)."""

    code = Code.REDIS_AUTH
    hint = "check the user and password (in the URL, or tools.yaml transport.username/password_env)"


class TlsClientRefused(RedisAuthFailed):
    """A TLS server refused the client: no certificate, or one its CA did not sign."""

    hint = "set transport.cert_file/key_file, or ssl_certfile/ssl_keyfile in the URL"


class EvictionPolicyRefused(BusError):
    """The server may evict ateam's keys under memory pressure (see :mod:`ateam.bus.guard`).

    ``detail`` carries ``policy`` and ``maxmemory`` as the server reported them.
    """

    code = Code.REDIS_EVICTION_POLICY
    hint = (
        "run `CONFIG SET maxmemory-policy noeviction` (or set it in the managed service), "
        "or accept the risk with ATEAM_ALLOW_EVICTION=1"
    )


class RedisOutOfMemory(BusError):
    """Redis reached its ``maxmemory`` and refuses writes (``OOM``); it may pass."""

    code = Code.REDIS_OOM
    hint = "free memory on the Redis server or raise its maxmemory"


class RedisReadOnly(BusError):
    """The server is a read-only replica (``READONLY``): writes go to its primary."""

    code = Code.REDIS_READONLY
    hint = "point the Redis URL at the primary, not a replica"


class DuplicateInstance(AteamError):
    code = Code.DUPLICATE_INSTANCE


class BootstrapRefused(AteamError):
    """A ``--bootstrap`` token is unknown, expired, already used or for another agent."""

    code = Code.BOOTSTRAP_REFUSED
    hint = "tokens work once, within 5 minutes; issue a new one with /spawn NAME --remote"


class SpawnFailed(AteamError):
    """``/spawn`` could not start an agent, or the agent never came up on the bus."""

    code = Code.SPAWN_FAILED


class LockLost(AteamError):
    """This process no longer holds its single-instance lock and must stop."""

    code = Code.LOCK_LOST


class WorkerStalled(AteamError):
    """A worker step showed no progress for too long and was cancelled."""

    code = Code.WORKER_STALLED


MOVE_ASIDE = "move it aside to start afresh: "
"""How the one line of a ``storage.corrupt`` error names its file: the supervisor finds
the file to show in ``ps`` and ``up`` after it (:func:`file_to_move_aside`)."""


class StorageError(AteamError):
    """A durable file (queue, history) is unreadable beyond automatic repair.

    Met at start it is final (exit 20): restarting would meet the same file. ``detail``
    carries the ``path``, which the one line names as the file to move aside.
    """

    code = Code.STORAGE_CORRUPT

    def one_line(self) -> str:
        path = self.detail.get("path")
        if self.code != Code.STORAGE_CORRUPT or not isinstance(path, str):
            return super().one_line()
        # Said last, so the file name ends the line whatever characters it holds.
        return f"error [{self.code}]: {self.message} — {MOVE_ASIDE}{path}"


def file_to_move_aside(line: str) -> str | None:
    """The file a ``storage.corrupt`` one line (:meth:`StorageError.one_line`) names."""
    _, found, path = line.partition(MOVE_ASIDE)
    return path.strip() or None if found else None


class StorageIoError(StorageError):
    """A durable file could not be read or written (permissions, a vanished directory).

    Not the caller's fault, so not a ``bad_request``: the request may work once the file
    system is put right.
    """

    code = Code.STORAGE_IO


class StorageFull(StorageError):
    """A durable write failed for want of space (ENOSPC) or quota (EDQUOT).

    Nothing of the write stayed, so nothing it would have acknowledged was: the agent
    keeps the work queued and waits for room instead of failing it.
    """

    code = Code.STORAGE_FULL
    hint = "free space where the agent's state/ lives; the agent resumes by itself"


class UsageError(AteamError):
    """A command line or console command is malformed."""

    code = Code.BAD_REQUEST
    hint = "see /help or `ateam --help`"


class AmbiguousName(UsageError):
    """A typed prefix starts several agent or task ids; the message lists them."""

    code = Code.NAME_AMBIGUOUS
    hint = ""  # the message names the candidates: that is what to do


class ToolDenied(AteamError):
    """A tool call was refused: the tool is unknown, not allowed, or its approval is ``deny``."""

    code = Code.TOOL_DENIED
    hint = "add the tool to tools.allow in agent.yaml (globs such as fs.* work)"


class FsDenied(AteamError):
    """A file-system tool was refused a path: outside the sandbox, a device, a NUL byte."""

    code = Code.FS_DENIED


class FsConflict(AteamError):
    """A patch was refused because its file changed since it was read (SPEC §5.5)."""

    code = Code.FS_CONFLICT
    hint = "read the file again and propose a new patch"


class KbDenied(AteamError):
    """``kb.ingest`` was refused a path: outside the sandbox, a device, a FIFO (SPEC §10)."""

    code = Code.KB_INGEST_DENIED


class KbUnavailable(AteamError):
    """The knowledge base cannot be used as configured.

    Either the ``kb`` extra (chromadb) is not installed, or the scope's store was built
    by another embedder than the one configured now (vectors of different models, or of
    different lengths, cannot be compared).
    """

    code = Code.KB_UNAVAILABLE


class ProjectExists(AteamError):
    """``ateam init`` found a ``.ateam/`` that is not empty; nothing was written."""

    code = Code.PROJECT_EXISTS
    hint = "edit the files there, or choose another directory"


class PromptProtectedViolation(AteamError):
    """An edit of a prompt file would change or remove a protected block (SPEC §5.6)."""

    code = Code.PROMPT_PROTECTED_VIOLATION
    hint = "leave the <!-- ateam-protect:... --> blocks exactly as they are"


class TaskNotFound(AteamError):
    """No task with that id on the project's board."""

    code = Code.TASK_NOT_FOUND
    hint = "see `ateam tasks ls`"


class TaskClaimed(AteamError):
    """The task's claim does not allow the request.

    Raised for a claim of a task that is not open (another agent holds it, or it is
    finished), and for ``done``/``fail`` by anyone but the task's assignee: one code for
    "the claim is not yours", so a loser of a race and a stale finisher branch alike.
    ``detail`` carries ``task``, ``status`` and ``assignee``.
    """

    code = Code.TASK_CLAIMED


class GateRefused(AteamError):
    """A quality-gate hook exited 2: the step is refused, and its stderr says why.

    ``detail`` carries ``hook`` (``task_created``, ``task_done``, ...) and ``feedback``,
    which goes back to the model as it is.
    """

    code = Code.HOOK_REFUSED


class HookFailed(AteamError):
    """A hook could not judge: not found, timed out, or exited other than 0 or 2.

    Reported, never a refusal: a broken gate must not hold the team's work hostage.
    """

    code = Code.HOOK_FAILED
    hint = "fix the command under hooks: in project.yaml or agent.yaml"


class PlanRequired(ToolDenied):
    """An edit or command before the plan the task or agent requires was approved."""

    code = Code.PLAN_REQUIRED
    hint = "write the plan (plan.write) and wait for its approval (/plan approve NAME)"


class GitError(AteamError):
    """A git command ateam ran for an agent's branch or worktree said no (issue 27)."""

    code = Code.GIT_FAILED


class NotARepository(GitError):
    code = Code.GIT_NOT_REPOSITORY
    hint = "run `git init` and commit once, or set worktree: none"


class NoCommitYet(GitError):
    code = Code.GIT_NO_COMMIT
    hint = "commit once: a branch is cut from a commit"


class DetachedHead(GitError):
    code = Code.GIT_DETACHED_HEAD
    hint = "check out a branch, or name the base (base_branch: in agent.yaml, --into)"


class BranchExists(GitError):
    code = Code.GIT_BRANCH_EXISTS
    hint = "rename or delete that branch, or pick another agent name"


class TreeDirty(GitError):
    code = Code.GIT_DIRTY
    hint = "commit or stash the changes first"


class MergeConflict(GitError):
    """The branch does not merge cleanly; ``detail["files"]`` lists the conflicting files."""

    code = Code.GIT_CONFLICT
    hint = "merge the base into the branch and resolve there, or discard the work"


class WorkNotFound(AteamError):
    code = Code.WORK_NOT_FOUND
    hint = "see `ateam tasks ls` and `git branch --list 'ateam/*'`"


class WorkBusy(AteamError):
    code = Code.WORK_BUSY
    hint = "wait until the task ends, or interrupt its agent"


class TaskBlocked(AteamError):
    """The task depends on tasks that are not done yet; ``detail["blocked_by"]`` names them."""

    code = Code.TASK_BLOCKED
    hint = "finish its dependencies first"


class IdentityRefused(AteamError):
    """A process may not act as the agent it names (``ateam mcp --as``, SPEC §9).

    It holds no token of the agent's running instance (none given, a wrong one, or one
    of an instance that stopped or restarted), or it was asked to act for another agent.
    """

    code = Code.IDENTITY_REFUSED
    hint = (
        "only the agent's own runtime holds its token (ATEAM_AGENT_TOKEN), for as long as "
        "that instance runs"
    )


class TaskFailed(AteamError):
    """A task that ``ateam send --wait`` or a piped console waited for did not succeed.

    It ended with an error, was interrupted or cancelled, or its agent stopped before
    it ended. ``detail`` carries ``agent``, ``task`` and the task's own ``task_code``
    (``provider.auth``, ``task.interrupted`` ...; ``None`` when it never ended).
    """

    code = Code.TASK_FAILED

    def __init__(self, message: str, *, agent: str, task: str, task_code: str | None) -> None:
        super().__init__(message, detail={"agent": agent, "task": task, "task_code": task_code})
        self.agent = agent
        self.task = task
        self.task_code = task_code


class ProviderError(AteamError):
    """A model provider failed; the subclass tells the router how (SPEC §7).

    Every provider error carries ``status`` (the HTTP status, ``None`` when there was no
    response) and, in ``detail``, ``status``, ``provider`` (``openai``, ``scripted``, ...)
    and ``model`` (the model entry id the agent routes by). A failure that fits none of
    the subclasses (say a malformed request) is a plain ``ProviderError``.
    """

    code = Code.PROVIDER_ERROR

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        provider: str | None = None,
        model: str | None = None,
        retry_after_s: float | None = None,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        full: dict[str, object] = {"status": status, "provider": provider, "model": model}
        if retry_after_s is not None:
            full["retry_after_s"] = retry_after_s
        super().__init__(message, detail={**full, **(detail or {})})
        self.status = status
        self.provider = provider
        self.model = model
        self.retry_after_s = retry_after_s
        """Seconds the provider asked us to wait (``Retry-After``), when it said."""


class RateLimited(ProviderError):
    """HTTP 429: the provider's rate limit or quota is exhausted for now."""

    code = Code.PROVIDER_RATE_LIMITED


class Overloaded(ProviderError):
    """HTTP 529 (Anthropic) or 503: the provider is up but shedding load."""

    code = Code.PROVIDER_OVERLOADED


class ProviderUnavailable(ProviderError):
    """Any other 5xx, or no response at all (connection refused, reset, timed out)."""

    code = Code.PROVIDER_UNAVAILABLE


class ContextTooLong(ProviderError):
    """The request does not fit the model's context window."""

    code = Code.PROVIDER_CONTEXT_TOO_LONG


class AuthFailed(ProviderError):
    """HTTP 401/403, or the API key's environment variable is not set."""

    code = Code.PROVIDER_AUTH
    hint = "check the variable named by the model's api_key_env in models.yaml"

    @classmethod
    def missing_key(cls, env: str, *, provider: str, model: str) -> AuthFailed:
        """The error for an unset API key variable, raised at the first call, not at start-up."""
        return cls(
            f"environment variable {env} (api_key_env of model {model!r}) is not set",
            provider=provider,
            model=model,
            detail={"api_key_env": env},
        )


class RuntimeError_(ProviderError):
    """A coding agent driven over the Agent Client Protocol failed (issue 24).

    A runtime is a model entry, so its failures are provider failures: the router
    retries, switches or fails the call on them like any other.
    """

    code = Code.RUNTIME_ERROR


class RuntimeMissing(RuntimeError_):
    """The runtime's command is not on ``PATH`` (or not executable)."""

    code = Code.RUNTIME_MISSING


class RuntimeAuth(RuntimeError_):
    """The runtime needs a login (``authenticate``) before it takes a session."""

    code = Code.RUNTIME_AUTH


class RuntimeProtocol(RuntimeError_):
    """The runtime broke the protocol: a newer version, garbage, an oversized message."""

    code = Code.RUNTIME_PROTOCOL


class RuntimeTimeout(RuntimeError_):
    """The runtime did not answer in time (``initialize``, a session, a cancel)."""

    code = Code.RUNTIME_TIMEOUT


class RuntimeCrashed(RuntimeError_):
    """The runtime's process died while it had work."""

    code = Code.RUNTIME_CRASHED


class RuntimeStopped(RuntimeError_):
    """The runtime ended a prompt without an answer (``max_tokens``, ``refusal`` ...)."""

    code = Code.RUNTIME_STOPPED


class RpcError(AteamError):
    """An error returned by (or on the way to) an agent's RPC endpoint."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message, detail=detail)
        if code is not None:
            self.code = code  # type: ignore[misc]  # instance refines the class default


class OwnershipDenied(RpcError):
    code = Code.OWNERSHIP_DENIED
    hint = "another console owns this agent; use /tail to watch or /attach --takeover"


class AgentNotFound(RpcError):
    code = Code.AGENT_NOT_FOUND
    hint = "see `ateam ps` for the agents on this bus"


class PayloadTooLarge(RpcError):
    code = Code.PAYLOAD_TOO_LARGE


class RpcTimeout(RpcError):
    code = Code.TIMEOUT


class NoSuchMethod(RpcError):
    code = Code.NO_SUCH_METHOD


class BadRequest(RpcError, UsageError):
    """A request an agent refused as malformed: a usage error that came over the wire.

    Its code is :class:`UsageError`'s (``RpcError`` declares none), so ``bad_request``
    is declared once.
    """

    hint = ""  # the agent's message says what was wrong; /help is about the console


class HopLimit(RpcError):
    """A message between agents went round too many times (``team.send``, SPEC §9).

    Every message of a conversation thread carries its hop count; an agent refuses one
    past its ``team.max_hops``, so two agents cannot keep each other busy for ever.
    """

    code = Code.TEAM_HOP_LIMIT
    hint = "answer the person who started the thread instead of passing it on"


class MailboxFull(RpcError):
    """A stopped agent's mailbox holds as many messages (or bytes) as it may keep."""

    code = Code.MAILBOX_FULL
    hint = "start the agent (`ateam up NAME`) so it takes its messages"


_RPC_ERRORS: dict[str, type[RpcError]] = {
    Code.OWNERSHIP_DENIED: OwnershipDenied,
    Code.AGENT_NOT_FOUND: AgentNotFound,
    Code.PAYLOAD_TOO_LARGE: PayloadTooLarge,
    Code.TIMEOUT: RpcTimeout,
    Code.NO_SUCH_METHOD: NoSuchMethod,
    Code.BAD_REQUEST: BadRequest,
    Code.TEAM_HOP_LIMIT: HopLimit,
    Code.MAILBOX_FULL: MailboxFull,
}


def rpc_error_from_wire(error: Mapping[str, object]) -> RpcError:
    """Rebuild the typed error a remote agent sent, keeping unknown codes intact."""
    code = str(error.get("code", Code.INTERNAL))
    message = str(error.get("message", "remote error"))
    detail = error.get("detail")
    cls = _RPC_ERRORS.get(code, RpcError)
    return cls(message, code=code, detail=detail if isinstance(detail, dict) else None)
