"""Defaults, limits and timings in one place (SPEC §4, §5, appendix DL).

Redis key names live in :mod:`ateam.bus.keys`; everything numeric lives here so a
reader can see the whole protocol's tuning at a glance.
"""

from __future__ import annotations

PROTOCOL_VERSION = 1
"""The `v` field of every msgpack payload. New fields are optional; none is removed."""

DEFAULT_NAMESPACE = "ateam:"

# Registry and heartbeat (SPEC §4.1)
HEARTBEAT_INTERVAL_S = 3.0
HEARTBEAT_TTL_S = 10.0
DISCONNECTED_SHOWN_S = 120.0
LIVENESS_CHECK_S = 3.0
"""How often a console asks which agents stopped beating (the rest comes as notices)."""
GRACE_MARKER_S = 30.0

# Single-instance lock (SPEC §4.2)
LOCK_TTL_S = 10.0
LOCK_REFRESH_S = 3.0
LOCK_SAFETY_MARGIN_S = 2.0
"""Stop work when the lock has not been refreshed for TTL minus this margin."""

# Console ownership (SPEC §4.3)
OWNER_TTL_S = 15.0
OWNER_REFRESH_S = 5.0
TAKEOVER_GRACE_S = 2.0
OWNER_CALL_WAIT_S = 5.0
"""How long a claim waits for a one-call claim in its way (another `ateam send`)."""

# RPC (SPEC §4.4)
RPC_DEFAULT_DEADLINE_S = 15.0
RPC_IDEMPOTENCY_S = 60
RPC_MAX_PAYLOAD = 256 * 1024
RPC_REFUSAL_FOLD_S = 5.0
"""Refused requests after the first are told as one warning with a count per interval:
a flood of garbage must not push an agent's real events out of its bounded log."""

# Event stream (SPEC §4.5)
EVENT_LOG_MAXLEN = 10_000
EVENT_LOG_MAX_BYTES = 16 * 1024 * 1024
"""Bytes an agent's event stream may hold (payloads plus a per-entry overhead), beside
the count: past it the oldest events go, so large tool output cannot fill Redis."""
COALESCE_WINDOW_S = 0.050
COALESCE_MAX_BYTES = 8 * 1024
COALESCE_NEWLINE_S = 0.040
COALESCE_HARD_FRAMES_PER_S = 200
COALESCE_HARD_MAX_BYTES = 64 * 1024
"""How large frames grow above ``COALESCE_HARD_FRAMES_PER_S`` ("coalesced harder"): a
flood of output at terminal speed costs an eighth of the events, and so an eighth of the
per-event work of agent, Redis and console, while 256 such frames still fill the stream's
byte cap, so trimming stays fine-grained."""
OWNER_LAG_BYTES = 4 * 1024 * 1024
"""How far (bytes published, counted as the byte cap counts them) the owning console may
lag before the agent stops reading a command's terminal (issue 28 §3; ``exec``
``owner_lag_bytes``). At most half of ``EVENT_LOG_MAX_BYTES``: within it the owner never
meets a trimmed entry."""
OWNER_LAG_POLL_S = 0.02
"""How often a held agent reads its owner's mark again."""
OWNER_MARK_READ_TIMEOUT_S = 1.0
"""How long a held agent waits for its owner's mark before letting output flow."""
OWNER_READ_REPORT_S = 0.05
"""Least time between two reports of a console's read mark to Redis: twenty small writes
a second at most, and a bound of a few MB is never reached by a console that keeps up."""
EVENT_BUFFER_MAX = 100_000
"""Events kept in memory while Redis is unreachable; oldest dropped first."""
PUBLISH_BATCH_MAX = 512
PUBLISH_BATCH_MAX_BYTES = 512 * 1024
"""Payload bytes per append script, beside the count: Redis runs a script atomically, so
a batch of 512 frames of tool output (4 MiB) would hold every client of the server for
~10 ms, and a reader, which takes ~256 KiB a read, would fall behind a flood."""

# Reconnection (SPEC §4.6)
BACKOFF_INITIAL_S = 0.25
BACKOFF_MAX_S = 5.0
BACKOFF_JITTER = 0.25
BACKOFF_WARN_AFTER = 5

# Agent (SPEC §5)
WORKER_RESTART_DELAY_S = 1.0
WORKER_CRASH_WINDOW_S = 5.0
STORAGE_PROBE_S = 1.0
"""How often a worker blocked on a full disk checks for room again."""
STORAGE_PROBE_BYTES = 64 * 1024
"""Room a blocked worker wants before it resumes (more if the failed write was larger):
enough that it does not resume into the next failure at once."""
QUEUE_COMPACT_EVERY = 100
PREVIOUS_EXIT_ENV = "ATEAM_PREVIOUS_EXIT"
"""Set by the supervisor on a restart: how the agent's previous process ended."""
AGENT_TOKEN_ENV = "ATEAM_AGENT_TOKEN"
"""The identity token of a running agent instance, handed by the agent to the
``ateam mcp --as`` its coding agent's runtime starts: the proof that the server acts for
that agent (never on a command line, where every local user could read it)."""
AGENT_MAX_HOPS_ENV = "ATEAM_AGENT_MAX_HOPS"
"""The agent's ``team.max_hops``, beside the token: ``ateam mcp --as`` refuses a message
past it before sending, as the agent's own ``team.send`` does."""
KILLED_FROM_OUTSIDE = frozenset({-9, -15})
"""Exit statuses (killed by SIGKILL or SIGTERM) that are not an item's fault: an item
in progress then is put back without using up an attempt (SPEC §12 beside §5.2)."""
QUEUE_TAIL_SCAN = 1024 * 1024
HISTORY_ROTATE_BYTES = 50 * 1024 * 1024
HISTORY_KEEP = 5
SUMMARY_KEEP = 200

PROMPT_POLL_S = 1.0
"""How often the agent checks its prompt files' mtimes (SPEC §5.6)."""

SHUTDOWN_SOFT_S = 2.0
"""How long a graceful shutdown waits for the current task to stop cooperatively."""
SHUTDOWN_HARD_S = 2.0
"""Then how long after a hard stop (process group killed, stream abandoned)."""

SWITCH_BACK_CHECK_S = 2.0
"""How often an idle agent on a fallback checks whether it can return to its primary
(a probe call is made at most once per ``switching.cooldown_s``)."""

SNAPSHOT_INTERVAL_S = 1.0
"""How often the host's snapshot writer rebuilds ``~/.ateam/session.json`` (issue 12 §4):
a change shows in the file within about this plus one build."""
SNAPSHOT_WRITER_TTL_S = 3.0
"""The writer's seat lapses unless renewed; another agent on the host then takes it."""
SNAPSHOT_ITEMS = 20
"""Newest ``attention``/``blocking`` context items the snapshot shows per project."""
SNAPSHOT_TASKS = 200
"""Most open and claimed board tasks the snapshot lists per project (counts cover all)."""

HANDOFF_LOCK_WAIT_S = 1.0
"""The agent skips a handoff write (and says so in its log) rather than wait longer."""
HANDOFF_BLOCK_TOKENS = 600
"""Most tokens the handoff block adds to the first context after a switch."""

# Knowledge bases and worktrees: here, not in their packages, for the command line's
# argument tables (ateam/cli/arguments.py), which must not import those packages.
KB_SCOPES = ("agent", "project", "user")
"""Every knowledge-base scope name, the default first."""
KB_DEFAULT_SCOPE = "agent"
KB_DEFAULT_K = 8
"""SPEC §10: a search returns the top 8..."""
KB_MIN_SCORE = 0.35
"""...that score at least 0.35 (1 - cosine distance)."""
DIFF_MAX_BYTES = 256 * 1024
"""The unified diff of a branch kept by default; the rest is counted in ``omitted_bytes``."""
ACP_RUNTIME_IDS = ("claude-code", "codex", "gemini")
"""The coding agents ateam knows (``ateam.config.runtimes.KNOWN`` has one entry each; a
unit test holds the two together): ``ateam init --runtime`` offers these."""
