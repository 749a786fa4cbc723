"""The session snapshot (issue 12 §4): the team in one JSON file, for tools without Redis.

Three parts, each usable alone:

* :func:`build_snapshot` (once) and :class:`SnapshotReader` (again and again) read the
  bus — the registry, each project's task board and its urgent context items — into a
  :class:`Snapshot`, whose :meth:`Snapshot.to_json` is the document ``ateam session
  --json`` prints and ``~/.ateam/session.json`` holds.
* :class:`SnapshotFile` writes that document atomically (temp file, fsync, rename), only
  when it differs from what the file holds, and keeps the day's latest copy under
  ``sessions/YYYY-MM-DD.json`` (UTC date).
* :class:`WriterSeat` elects one writer per host and ``ATEAM_HOME`` on a bus, so 200
  agents on one host do not all rebuild the same file: ``SET NX PX`` on a key named by
  both, renewed and released only by the token that took it.

"Differs" ignores the fields that move without news (:data:`VOLATILE`): when the
snapshot was made, who made it, and each agent's ``last_seen``. An idle team therefore
leaves the file alone, and a reader tells liveness from ``state``, which turns
``disconnected`` (a change, so a write) once a heartbeat is older than the TTL.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import secrets
import socket
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from ateam._fs import atomic_write, file_key
from ateam._json import JsonObject
from ateam.bus.board import TaskBoard
from ateam.bus.context_items import ContextStore
from ateam.bus.keys import Keys
from ateam.bus.registry_mirror import RegistryMirror
from ateam.config.names import checked_name
from ateam.constants import SNAPSHOT_ITEMS, SNAPSHOT_TASKS, SNAPSHOT_WRITER_TTL_S
from ateam.errors import BadRequest
from ateam.paths import private_dir
from ateam.wire.board import BoardTask, TaskStatus
from ateam.wire.context_items import ContextItem, Urgency
from ateam.wire.registry import AgentEntry, AgentStatus

__all__ = [
    "ARCHIVE_DIR",
    "SESSION_FILE",
    "SNAPSHOT_VERSION",
    "VOLATILE",
    "ProjectSnapshot",
    "Snapshot",
    "SnapshotFile",
    "SnapshotReader",
    "WriterSeat",
    "build_snapshot",
    "fingerprint",
    "render",
    "seat_key",
]

SNAPSHOT_VERSION = 1
"""The document's ``version``. New fields may appear; none is removed or renamed."""
SESSION_FILE = "session.json"
ARCHIVE_DIR = "sessions"
VOLATILE = frozenset({"generated_at", "writer"})
"""Top-level fields that never make a write on their own (nor does an agent's ``last_seen``)."""
CLIP_CHARS = 1000
"""An item's ``content`` is cut to this many characters (``summary`` is at most 1 KiB)."""

_US = 1_000_000


def _iso(epoch_s: float) -> str:
    """``2026-02-06T15:30:00.123Z``: UTC, millisecond precision."""
    stamp = datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _clip(text: str) -> str:
    return text if len(text) <= CLIP_CHARS else text[: CLIP_CHARS - 1] + "…"


def _shown_fields(entry: AgentEntry) -> tuple[object, ...]:
    """What :func:`_agent_json` shows of an entry (its usage, context share... are not)."""
    return (
        entry.id, entry.name, entry.state, entry.current_task, entry.model, entry.host,
        entry.pid, entry.cwd, entry.queue_len, entry.alert,
    )  # fmt: skip


def _agent_json(view: AgentStatus, now_s: float) -> JsonObject:
    entry = view.entry
    return {
        "id": entry.id,
        "name": entry.name,
        "state": view.state,
        "current_task": entry.current_task,
        "model": entry.model,
        "last_seen": _iso(now_s - view.heartbeat_age_s),
        "host": entry.host,
        "pid": entry.pid,
        "cwd": entry.cwd,
        "queue_len": entry.queue_len,
        "alert": entry.alert,
    }


def _task_json(task: BoardTask) -> JsonObject:
    return {
        "id": task.id,
        "title": task.title,
        "status": str(task.status),
        "assignee": task.assignee or None,
        "priority": task.priority,
        "depends_on": list(task.depends_on),
        "created_by": task.created_by,
        "created": _iso(task.created / _US),
        "updated": _iso(task.updated / _US),
        "reason": task.reason or None,
    }


def _item_json(item: ContextItem) -> JsonObject:
    return {
        "id": item.id,
        "type": str(item.type),
        "urgency": str(item.urgency),
        "title": item.title,
        "summary": item.summary,
        "content": _clip(item.content),
        "scope": str(item.scope),
        "tags": list(item.tags),
        "source_agent": item.source_agent or None,
        "source_runtime": item.source_runtime,
        "created_at": _iso(item.created_at),
        "expires_at": _iso(item.expires_at),
    }


@dataclass(frozen=True)
class ProjectSnapshot:
    """One project as the snapshot shows it."""

    name: str
    agents: tuple[AgentStatus, ...]
    tasks: tuple[BoardTask, ...]
    """Open and claimed tasks, highest priority first (at most :data:`SNAPSHOT_TASKS`)."""
    counts: dict[str, int]
    """Tasks on the board by status, all of them."""
    attention: tuple[ContextItem, ...]
    """The newest ``attention`` and ``blocking`` items the project sees, newest first."""

    def to_json(self, now_s: float) -> JsonObject:
        return {
            "agents": [_agent_json(view, now_s) for view in self.agents],
            "tasks": [_task_json(task) for task in self.tasks],
            "task_counts": dict(self.counts),
            "attention": [_item_json(item) for item in self.attention],
        }


@dataclass(frozen=True)
class Snapshot:
    """The team on one bus at one moment."""

    generated_at: float
    """Epoch seconds on the Redis server's clock."""
    bus: str
    """The bus, its password masked."""
    namespace: str
    projects: tuple[ProjectSnapshot, ...]
    writer: dict[str, Any] | None = None
    """Who wrote the file (``agent``, ``host``, ``pid``); ``None`` when only printed."""
    mark: object = field(default=None, compare=False)
    """Equal between two snapshots of one reader that show the same (beyond
    :data:`VOLATILE`): a writer holding the last one written skips rendering this one."""

    def to_json(self) -> JsonObject:
        """The document: ``version``, ``generated_at``, ``writer``, ``bus``, ``projects``."""
        return {
            "version": SNAPSHOT_VERSION,
            "generated_at": _iso(self.generated_at),
            "writer": self.writer,
            "bus": self.bus,
            "namespace": self.namespace,
            "projects": {p.name: p.to_json(self.generated_at) for p in self.projects},
        }


async def build_snapshot(
    client: aioredis.Redis,
    keys: Keys,
    *,
    bus: str = "",
    projects: Collection[str] | None = None,
    also: Iterable[str] = (),
    writer: dict[str, Any] | None = None,
) -> Snapshot:
    """Read the team from the bus once (see :meth:`SnapshotReader.read` for the arguments).

    Raises:
        BadRequest: a name in ``projects`` is not a project name.
    """
    reader = SnapshotReader(client, keys, bus=bus)
    return await reader.read(projects=projects, also=also, writer=writer)


class SnapshotReader:
    """Reads snapshots of one bus, again and again.

    Finding a project's newest urgent items can mean scanning past many quiet ones, so
    they are read again only when one of the project's context indexes moved (a post, a
    prune) or one of the items found expired. The registry is kept by a
    :class:`~ateam.bus.registry_mirror.RegistryMirror`, which reads only the agents that
    changed (issue 28 §4); the boards are read each time.

    Args:
        client: the bus.
        keys: its key names.
        bus: how to name the bus in the document (a masked URL).
    """

    def __init__(self, client: aioredis.Redis, keys: Keys, *, bus: str = "") -> None:
        self._client = client
        self._keys = keys
        self._bus = bus
        self._mirror = RegistryMirror(client, keys, relevant=_shown_fields)
        self._board = TaskBoard(client, keys)
        self._context = ContextStore(client, keys)
        self._items: dict[str, tuple[list[Any], float, tuple[ContextItem, ...]]] = {}
        """Per project: the indexes' marks, the first expiry and the items they gave."""

    async def read(
        self,
        *,
        projects: Collection[str] | None = None,
        also: Iterable[str] = (),
        writer: dict[str, Any] | None = None,
    ) -> Snapshot:
        """The team now.

        Args:
            projects: only these projects (each shown even without agents); ``None``:
                every project with an agent in the registry, plus ``also``.
            also: projects to show even when none of their agents is registered.
            writer: who writes the document, if it is written to a file.

        Raises:
            BadRequest: a name in ``projects`` is not a project name.
        """
        chosen = None if projects is None else sorted({checked_name(name) for name in projects})
        grouped = await self._mirror.grouped()
        sec, usec = await self._client.time()
        now_s = int(sec) + int(usec) / _US
        names = chosen if chosen is not None else sorted({*grouped, *also})
        shown = await asyncio.gather(
            *(self._project(name, grouped.get(name, ()), now_s) for name in names)
        )
        self._items = {name: self._items[name] for name in names if name in self._items}
        # The agents by the mirror's generation (comparing 10 000 entries would cost what
        # the mirror saves), the rest as they are: a few hundred tasks and items.
        restarting = tuple(v.id for v in self._mirror.silent() if v.restarting)
        rest = tuple((p.name, p.tasks, tuple(p.counts.items()), p.attention) for p in shown)
        mark = (self._mirror.generation, restarting, rest)
        return Snapshot(now_s, self._bus, self._keys.ns, tuple(shown), writer, mark)

    async def _project(
        self, name: str, agents: tuple[AgentStatus, ...], now_s: float
    ) -> ProjectSnapshot:
        try:
            checked_name(name)
        except BadRequest:
            # A registry entry with a project name no key may carry (a foreign writer):
            # its agents still show; it has no board or items to read.
            return ProjectSnapshot(name, agents, (), {str(s): 0 for s in TaskStatus}, ())
        every = await self._board.list(name)
        counts = {str(status): 0 for status in TaskStatus}
        for task in every:
            counts[str(task.status)] += 1
        active = (TaskStatus.OPEN, TaskStatus.CLAIMED)
        tasks = tuple(task for task in every if task.status in active)[:SNAPSHOT_TASKS]
        return ProjectSnapshot(name, agents, tasks, counts, await self._attention(name, now_s))

    async def _attention(self, name: str, now_s: float) -> tuple[ContextItem, ...]:
        pipe = self._client.pipeline(transaction=False)
        for index in (self._keys.context_index(name), self._keys.context_global_index):
            pipe.zcard(index)
            pipe.zrevrange(index, 0, 0, withscores=True)
        marks: list[Any] = await pipe.execute()
        cached = self._items.get(name)
        if cached is not None and cached[0] == marks and now_s < cached[1]:
            return cached[2]
        found = await self._context.list(name, min_urgency=Urgency.ATTENTION, limit=SNAPSHOT_ITEMS)
        items = tuple(found)
        self._items[name] = (marks, min((i.expires_at for i in items), default=math.inf), items)
        return items


# ---------------------------------------------------------------- the file


def fingerprint(document: dict[str, Any]) -> str:
    """The document without its :data:`VOLATILE` fields, as canonical JSON."""
    kept = {k: v for k, v in document.items() if k not in VOLATILE}
    projects = kept.get("projects")
    if isinstance(projects, dict):
        kept["projects"] = {name: _steady(project) for name, project in projects.items()}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _steady(project: object) -> object:
    """A project's part of the document without its agents' ``last_seen``."""
    if not isinstance(project, dict) or not isinstance(project.get("agents"), list):
        return project
    agents = [
        {k: v for k, v in agent.items() if k != "last_seen"} if isinstance(agent, dict) else agent
        for agent in project["agents"]
    ]
    return {**project, "agents": agents}


def render(document: dict[str, Any]) -> bytes:
    """The bytes of the file: indented UTF-8 JSON with a final newline."""
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


class SnapshotFile:
    """``HOME/session.json`` and its daily copies ``HOME/sessions/YYYY-MM-DD.json``.

    Writes replace the file atomically (temp file, fsync, rename, 0600), so a reader sees
    the old document or the new one, never part of either. Blocking: run it in a thread.

    Args:
        home: the ateam home (``~/.ateam`` or ``$ATEAM_HOME``).
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = home / SESSION_FILE
        self.archive_dir = home / ARCHIVE_DIR
        self._written: tuple[object, str] | None = None
        """The file's identity and fingerprint right after this object last wrote it."""

    def archive_path(self, document: dict[str, Any]) -> Path:
        """The copy for the (UTC) day the document was generated."""
        day = str(document.get("generated_at", ""))[:10] or datetime.now(UTC).date().isoformat()
        return self.archive_dir / f"{day}.json"

    def write(self, document: dict[str, Any]) -> bool:
        """Replace the file with ``document`` unless it holds the same already.

        The day's copy is written with every change, and once a day even without one.
        Returns whether ``session.json`` was written.

        Raises:
            OSError: the file or its copy could not be written.
        """
        mark = fingerprint(document)
        private_dir(self.home)
        changed = not self._holds(mark)
        data = render(document)
        # The copy goes first: whoever reads a new session.json finds a copy at least as
        # new (the other order let a reader see the file a change ahead of its copy).
        # A copy that cannot be written must not keep the live file stale: it is
        # written still, and the copy's error raised after.
        archive = self.archive_path(document)
        failed: OSError | None = None
        if changed or not archive.exists():
            try:
                private_dir(self.archive_dir)
                atomic_write(archive, data)
            except OSError as exc:
                failed = exc
        if changed:
            atomic_write(self.path, data)  # 0600 when new; a mode someone chose is kept
            self._written = (file_key(self.path), mark)
        if failed is not None:
            raise failed
        return changed

    def untouched(self, day: str) -> bool:
        """Whether ``session.json`` is still the file this object last wrote, and the
        copy of ``day`` (``YYYY-MM-DD``) exists: a writer whose snapshot shows nothing
        new may then skip rendering it (two stats instead of a fingerprint)."""
        if self._written is None or self._written[0] != file_key(self.path):
            return False
        return (self.archive_dir / f"{day}.json").exists()

    def _holds(self, mark: str) -> bool:
        """Whether the file holds a document with fingerprint ``mark``.

        Trusts its own last write while the file is the one it wrote; a file replaced
        since (another writer, a person) is read, so a stale writer that overwrote a
        newer document is corrected at the next tick even when nothing changed.
        """
        if self._written is not None and self._written == (file_key(self.path), mark):
            return True
        try:
            current = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return False
        if not isinstance(current, dict) or fingerprint(current) != mark:
            return False
        self._written = (file_key(self.path), mark)
        return True


# ---------------------------------------------------------------- the writer seat

# KEYS[1] seat; ARGV[1] token, ARGV[2] ttl ms. Only the holder extends its term: a paused
# process whose term lapsed must not extend (or, below, end) its successor's.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def seat_key(keys: Keys, host: str, home: Path) -> str:
    """The writer seat of one host and home: ``{ns}session-writer:<host>:<home digest>``.

    The home is hashed: a path may hold any character, a key name should not.
    """
    digest = hashlib.sha256(str(home).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{keys.ns}session-writer:{host}:{digest}"


class WriterSeat:
    """The one writer of a host's snapshot file: taken with ``SET NX PX``, renewed by its token.

    Args:
        client: the bus.
        keys: its key names.
        home: the ateam home whose file the seat is for.
        holder: who asks (an agent id); stored beside the token for people reading Redis.
        host: this host's name (default: :func:`socket.gethostname`).
        ttl_s: how long a term lasts unless renewed.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        home: Path,
        *,
        holder: str,
        host: str | None = None,
        ttl_s: float = SNAPSHOT_WRITER_TTL_S,
    ) -> None:
        self._client = client
        self.key = seat_key(keys, host or socket.gethostname(), home)
        self._token = f"{holder} {secrets.token_hex(8)}"
        self._ttl_ms = int(ttl_s * 1000)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self.held = False

    async def claim(self) -> bool:
        """Renew the term if held, else try to take the seat; returns whether it is held."""
        if self.held:
            self.held = bool(await self._renew(keys=[self.key], args=[self._token, self._ttl_ms]))
        if not self.held:
            taken = await self._client.set(self.key, self._token, nx=True, px=self._ttl_ms)
            self.held = bool(taken)
        return self.held

    async def release(self) -> None:
        """Give the seat up, so another process takes it at its next try, not after the TTL."""
        if self.held:
            self.held = False
            await self._release(keys=[self.key], args=[self._token])

    async def holder(self) -> str | None:
        """The current holder's token, whoever it is (for tests and diagnostics)."""
        raw: bytes | str | None = await self._client.get(self.key)
        return raw.decode() if isinstance(raw, bytes) else raw
