"""The durable prompt queue (SPEC §5.2): an append-only op log with crash recovery.

One module, over the usual size on purpose: the op log's format, its replay and the
operations that write it must agree line for line, and are reviewed together.

``state/queue.jsonl`` holds one JSON object per line, each one operation:

- ``{"op": "add", ...item}``: an item was enqueued;
- ``{"op": "start", "id", "attempts"}``: processing began (the attempt number, absolute);
- ``{"op": "done", "id", "ok", "error"}``: processing finished;
- ``{"op": "requeue", "id", "attempts"?}``: the item was in progress when the process
  died, or was released by a graceful stop, and goes back to the head (a release also
  gives the attempt back, so a stop never counts as a crash);
- ``{"op": "last", "last_id"}``: the highest id ever issued, so ids keep increasing after
  compaction has emptied the file;
- ``{"op": "seen", "rid", "id", "trace_id"}``: a finished item's request id, kept by
  compaction (the newest 1024), so a retried ``input`` is never queued twice, whatever
  restarts and compactions happened in between.

Every op is written and fsynced before the method that records it returns. Replaying the
log gives the state. Compaction (every ``QUEUE_COMPACT_EVERY`` finished items, at open
when the log holds finished items, and on ``clear``) atomically rewrites the file with the
live items only. Items that crash the process twice go to ``state/dead.jsonl``.

Damage (a torn last line, unreadable lines) is repaired at open, but never in silence: the
file is copied aside first and the finding reported through :attr:`DurableQueue.damage`.

An item and its ids are :mod:`ateam.agent.state.queue_item`. The JSON-lines helpers and
the append descriptor live in :mod:`ateam._jsonl`, shared with
:mod:`ateam.agent.state.history`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ateam._fs import (
    DamageLog,
    Problem,
    append_durably,
    atomic_write,
    fsync_dir,
    keep_aside,
    open_append,
)
from ateam._jsonl import AppendLog, decode_line, encode_line, storage_error, truncate_torn_tail
from ateam.agent.state.fence import Fenced, unfenced
from ateam.agent.state.queue_item import QueueItem, is_int, max_id, next_queue_id
from ateam.constants import QUEUE_COMPACT_EVERY, QUEUE_TAIL_SCAN
from ateam.paths import private_dir

__all__ = [
    "DEAD_FILE",
    "DEAD_REASON",
    "KILLED_REASON",
    "KILLS_LIMIT",
    "QUEUE_FILE",
    "DurableQueue",
    "RecoveryReport",
]

log = logging.getLogger(__name__)

QUEUE_FILE = "queue.jsonl"
DEAD_FILE = "dead.jsonl"
DEAD_REASON = "crashed twice while processing"
KILLED_REASON = "killed from outside too often while processing"
KILLS_LIMIT = 10
"""Kills from outside an item may be in progress at before it is dead-lettered all the
same: a kill -9 is not the item's fault, but an item that makes the kernel's OOM killer
strike again and again must not block the queue for ever."""

_RECENT_RIDS = 1024
"""Finished items remembered for :meth:`DurableQueue.find_rid`, newest kept."""


@dataclass
class RecoveryReport:
    """What :meth:`DurableQueue.open` found and repaired.

    Damaged files are reported through :attr:`DurableQueue.damage` as well, each with
    the copy kept aside; :meth:`messages` words what recovery did to the items.
    """

    torn_bytes: int = 0
    """Bytes truncated from a torn last line of ``queue.jsonl`` (0 if none)."""
    requeued: list[str] = field(default_factory=list)
    """Ids that were in progress when the process died, put back at the head."""
    dead: list[str] = field(default_factory=list)
    """Ids moved to ``dead.jsonl``: the process died twice while processing them."""
    skipped: int = 0
    """Unreadable lines inside ``queue.jsonl`` that were ignored (and compacted away)."""
    dead_torn_bytes: int = 0
    """Bytes truncated from a torn last line of ``dead.jsonl``."""
    dead_unreadable: int = 0
    """Unreadable lines of ``dead.jsonl`` found at open (left in place for a person;
    ``queue retry`` drops them)."""
    dead_reasons: dict[str, str] = field(default_factory=dict)
    """Why each of :attr:`dead` was moved (crashed, or killed too often)."""

    def messages(self) -> list[str]:
        """One line per item recovery moved, for people (agent log and console banner).

        The damage found (torn or unreadable lines) is not here: it is reported through
        :attr:`DurableQueue.damage`, with the copy of the file that was kept.
        """
        lines: list[str] = []
        lines.extend(
            f"queue: {item_id} was in progress when the agent stopped; put back at the head"
            for item_id in self.requeued
        )
        lines.extend(
            f"queue: {item_id} {self.dead_reasons.get(item_id, DEAD_REASON)}; moved to "
            f"{DEAD_FILE} (`queue retry` re-enqueues)"
            for item_id in self.dead
        )
        return lines


# --- replay ------------------------------------------------------------------------------


class _Replay:
    """The queue's state rebuilt from its op log, before crash recovery."""

    def __init__(self) -> None:
        self.items: dict[str, QueueItem] = {}  # live items, in file (= FIFO) order
        self.head: set[str] = set()
        self.current: str | None = None
        self.finished: list[QueueItem] = []
        self.seen: list[QueueItem] = []  # finished before the last compaction
        self.last_id: str | None = None
        self.skipped = 0
        self.garbage = 0  # lines a compaction would drop
        self._ops: dict[str, Callable[[dict[str, Any]], None]] = {
            "add": self._add,
            "start": self._start,
            "done": self._done,
            "requeue": self._requeue,
            "last": self._last,
            "seen": self._seen,
        }

    def feed(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            if not line.strip():
                self.garbage += bool(line)
                continue
            obj = decode_line(line)
            op = obj.get("op") if obj is not None else None
            handler = self._ops.get(op) if isinstance(op, str) else None
            if obj is None or handler is None:
                self.skipped += 1
                continue
            try:
                handler(obj)
            except (KeyError, TypeError, ValueError):
                self.skipped += 1

    def _add(self, obj: dict[str, Any]) -> None:
        item = QueueItem.from_dict(obj)
        if item.id in self.items:
            raise ValueError(f"duplicate id {item.id}")
        self.items[item.id] = item
        self.last_id = max_id(self.last_id, item.id)

    def _start(self, obj: dict[str, Any]) -> None:
        item = self.items.get(obj["id"])
        if item is None:
            self.garbage += 1
            return
        attempts = obj.get("attempts")
        item.attempts = attempts if is_int(attempts) else item.attempts + 1
        self.head.discard(item.id)
        self.current = item.id

    def _done(self, obj: dict[str, Any]) -> None:
        self.garbage += 1
        item = self.items.pop(obj["id"], None)
        if item is None:
            return
        self.finished.append(item)
        self.head.discard(item.id)
        if self.current == item.id:
            self.current = None

    def _requeue(self, obj: dict[str, Any]) -> None:
        item_id = obj["id"]
        if item_id not in self.items:
            self.garbage += 1
            return
        attempts = obj.get("attempts")
        if is_int(attempts):
            self.items[item_id].attempts = attempts
        self.head.add(item_id)
        if self.current == item_id:
            self.current = None

    def _seen(self, obj: dict[str, Any]) -> None:
        rid, item_id, trace = obj["rid"], obj["id"], obj.get("trace_id")
        if not (isinstance(rid, str) and isinstance(item_id, str)):
            raise ValueError("seen: rid and id must be strings")
        # Only what an acknowledgement repeats is kept: the text may be large.
        trace_id = trace if isinstance(trace, str) else None
        self.seen.append(QueueItem(item_id, "", "", 0.0, rid=rid, trace_id=trace_id))

    def _last(self, obj: dict[str, Any]) -> None:
        last_id = obj["last_id"]
        if not isinstance(last_id, str):
            raise ValueError("last_id must be a string")
        self.last_id = max_id(self.last_id, last_id)


# --- the queue ---------------------------------------------------------------------------

_HeapEntry = tuple[int, int, int, QueueItem]
"""(0 for a requeued item else 1, -priority, file order, item): the order of take()."""


class DurableQueue:
    """The agent's prompt queue, durable across kill -9 (SPEC §5.2).

    Not thread-safe: one asyncio loop owns it. Every mutating method returns only after
    its op is on disk, so a caller may acknowledge as soon as it returns.

    Args:
        state_dir: the agent's ``state/`` directory; created (0700) by :meth:`open`.
    """

    def __init__(self, state_dir: Path, *, fence: Fenced = unfenced) -> None:
        self.state_dir = Path(state_dir)
        self._fence = fence
        """Called before every write: refuses it once this process may have lost its lock."""
        self.path = self.state_dir / QUEUE_FILE
        self.dead_path = self.state_dir / DEAD_FILE
        self._log = AppendLog(self.path, label="queue")
        self.damage = DamageLog("queue")
        """Damaged queue files found: each copied aside before it is repaired."""
        # Finished items by rid; kept across close() and open() for the process's life.
        self._recent: OrderedDict[str, QueueItem] = OrderedDict()
        self._reset()

    def _reset(self) -> None:
        self._heap: list[_HeapEntry] = []
        self._order: dict[str, int] = {}  # pending and current ids -> file order
        self._next_order = 0
        self._head: set[str] = set()
        self._current: QueueItem | None = None
        self._by_rid: dict[str, QueueItem] = {}  # pending and current
        self._last_id: str | None = None
        self._finished_since_compact = 0

    # -- lifecycle

    def open(self, *, killed: bool = False) -> RecoveryReport:
        """Load the queue, repair a torn tail and recover an item a crash interrupted.

        Args:
            killed: the previous process was killed from outside (its supervisor saw
                SIGKILL or SIGTERM), not crashed: an item it had in progress goes back
                to the head without using up an attempt.

        Returns:
            What was repaired; :meth:`RecoveryReport.messages` words it for people.

        Raises:
            StorageError: the files cannot be read or written, or are damaged beyond repair.
        """
        if self._log.is_open:
            raise RuntimeError("DurableQueue.open() called twice")
        self._reset()  # the file is the truth, also when reopening after close()
        report = RecoveryReport()
        replay = _Replay()
        # A file's copy is made before its first change and serves every finding in it.
        kept: dict[Path, Path] = {}

        def keep(path: Path) -> Callable[[int], None]:
            def before_change(_dropped: int) -> None:
                if path not in kept:
                    kept[path] = keep_aside(path)

            return before_change

        try:
            if not self.state_dir.exists():
                private_dir(self.state_dir)
                fsync_dir(self.state_dir.parent)
            report.torn_bytes = truncate_torn_tail(
                self.path, max_scan=QUEUE_TAIL_SCAN, before_cut=keep(self.path)
            )
            report.dead_torn_bytes = truncate_torn_tail(
                self.dead_path, max_scan=QUEUE_TAIL_SCAN, before_cut=keep(self.dead_path)
            )
            with contextlib.suppress(FileNotFoundError):
                replay.feed(self.path.read_bytes())
            if replay.skipped:
                keep(self.path)(0)  # the compaction below drops those lines
        except OSError as exc:
            raise storage_error("queue", "cannot read or keep a copy of", self.path, exc) from exc
        report.skipped = replay.skipped
        self._report_damage(report, kept)
        # Read now, not only when a retry needs it: damage there is news at start too.
        report.dead_unreadable = self._report_dead_damage(kept.get(self.dead_path))
        self._load(replay)
        self._recover(report, killed=killed)
        needed = bool(replay.skipped or report.requeued or report.dead)
        try:
            if needed or replay.garbage:
                try:
                    self._rewrite(self._render(self._pending_unordered()))
                except OSError:
                    if needed:
                        raise
                    # Only finished items to compact away: that can wait for room, and
                    # an agent restarted on a full disk still starts (and shows blocked).
                    log.warning("queue: not compacted at start (no room); the log is kept")
                    self._log.reopen()
            else:
                self._log.reopen()
        except OSError as exc:
            raise storage_error("queue", "cannot write", self.path, exc) from exc
        return report

    def close(self) -> None:
        """Release the file; safe to call twice."""
        self._log.close()

    # -- the worker's side

    def append(
        self,
        text: str,
        *,
        source: str,
        rid: str | None = None,
        caller: str | None = None,
        trace_id: str | None = None,
        priority: int = 0,
        hops: int = 0,
        reply_to: str | None = None,
    ) -> QueueItem:
        """Enqueue ``text``; returns only once the item is written and fsynced.

        Raises:
            StorageError: the write failed; nothing was enqueued.
        """
        now = time.time()
        item = QueueItem(
            id=next_queue_id(self._last_id, now),
            text=text,
            source=source,
            enqueued_at=now,
            priority=priority,
            rid=rid,
            caller=caller,
            trace_id=trace_id,
            hops=hops,
            reply_to=reply_to,
        )
        # Advanced before the write: an id that may have reached the disk is never reissued.
        self._last_id = item.id
        self._write(encode_line({"op": "add", **item.to_dict()}))
        self._admit(item)
        return item

    def take(self) -> QueueItem | None:
        """Start processing the next item (highest priority, then oldest).

        The start is on disk before this returns, so a crash from here on is detected.

        Returns:
            The item, now :attr:`current`; ``None`` if the queue is empty or an item is
            already in progress.
        """
        if self._current is not None or not self._heap:
            return None
        item = self._heap[0][3]
        attempts = item.attempts + 1
        self._write(encode_line({"op": "start", "id": item.id, "attempts": attempts}))
        heapq.heappop(self._heap)
        item.attempts = attempts
        self._head.discard(item.id)
        self._current = item
        return item

    def done(self, item_id: str, *, ok: bool = True, error: str | None = None) -> None:
        """Record that the item in progress finished (``ok`` or with ``error``).

        Raises:
            ValueError: ``item_id`` is not the item in progress.
            StorageError: the write failed; the item is still in progress.
        """
        item = self._current
        if item is None or item.id != item_id:
            raise ValueError(f"queue: {item_id} is not the item in progress")
        self._write(encode_line({"op": "done", "id": item_id, "ok": ok, "error": error}))
        self._current = None
        self._retire(item)
        self._finished_since_compact += 1
        if self._finished_since_compact >= QUEUE_COMPACT_EVERY:
            try:
                self._rewrite(self._render(self._pending_unordered()))
            except OSError as exc:
                # The done is already durable; a failed compaction only costs disk space
                # and is tried again at the next done.
                log.warning("queue: compaction of %s failed: %s", self.path, exc)

    def release(self, item_id: str) -> None:
        """Put the item in progress back at the head, unfinished (a graceful stop).

        Unlike a crash, a release does not use up one of the item's attempts.

        Raises:
            ValueError: ``item_id`` is not the item in progress.
        """
        item = self._current
        if item is None or item.id != item_id:
            raise ValueError(f"queue: {item_id} is not the item in progress")
        attempts = max(item.attempts - 1, 0)
        self._write(encode_line({"op": "requeue", "id": item_id, "attempts": attempts}))
        self._current = None
        item.attempts = attempts
        self._admit(item, head=True)

    # -- inspection

    def pending(self) -> list[QueueItem]:
        """Waiting items in the order :meth:`take` returns them (not the current one)."""
        return [entry[3] for entry in sorted(self._heap)]

    @property
    def current(self) -> QueueItem | None:
        """The item in progress, if any."""
        return self._current

    def find_rid(self, rid: str) -> QueueItem | None:
        """The item a request id created: pending, current or recently finished.

        Finished (done, cleared or dead-lettered) items are remembered, the newest 1024
        of them, across compactions and restarts (``seen`` ops); for those only the id
        and trace id are kept.
        """
        return self._by_rid.get(rid) or self._recent.get(rid)

    def __len__(self) -> int:
        """How many items are waiting (the current one excluded)."""
        return len(self._heap)

    # -- maintenance

    def clear(self) -> int:
        """Drop every waiting item, durably; the item in progress stays.

        Returns:
            How many items were dropped.
        """
        dropped = [entry[3] for entry in self._heap]
        if not dropped:
            return 0
        try:
            self._rewrite(self._render([]))
        except OSError as exc:
            raise storage_error("queue", "cannot write", self.path, exc) from exc
        self._heap = []
        self._head.clear()
        for item in dropped:
            self._retire(item)
        return len(dropped)

    def dead_items(self) -> list[dict[str, Any]]:
        """The dead-lettered items, oldest first, each with its ``reason``."""
        return self._read_dead()[0]

    def _read_dead(self) -> tuple[list[dict[str, Any]], int]:
        """The readable entries of ``dead.jsonl`` and how many lines were not."""
        try:
            data = self.dead_path.read_bytes()
        except FileNotFoundError:
            return [], 0
        except OSError as exc:
            raise storage_error("queue", "cannot read", self.dead_path, exc) from exc
        entries = [decode_line(line) for line in data.split(b"\n") if line.strip()]
        readable = [entry for entry in entries if entry is not None]
        return readable, len(entries) - len(readable)

    def retry_dead(self) -> list[QueueItem]:
        """Re-enqueue the dead-lettered items under new ids and empty ``dead.jsonl``.

        The items are enqueued (one fsync) before ``dead.jsonl`` is emptied, so a crash in
        between can only duplicate them, never lose them. Entries that are not items stay.

        Returns:
            The new items, in their former order.
        """
        entries, unreadable = self._read_dead()
        if not entries:
            return []
        if unreadable:
            # The rewrite below keeps only what can be read: keep the rest for a person.
            try:
                self.damage.report(
                    self.dead_path,
                    Problem.UNREADABLE_LINES,
                    f"dropped {unreadable} unreadable line(s) of {DEAD_FILE} on retry",
                    count=unreadable,
                    required=True,
                )
            except OSError as exc:
                raise storage_error("queue", "cannot keep a copy of", self.dead_path, exc) from exc
        now = time.time()
        items: list[QueueItem] = []
        unusable: list[dict[str, Any]] = []
        last_id = self._last_id
        for entry in entries:
            try:
                old = QueueItem.from_dict(entry)
            except (TypeError, ValueError):
                unusable.append(entry)
                continue
            last_id = next_queue_id(last_id, now)
            items.append(dataclasses.replace(old, id=last_id, enqueued_at=now, attempts=0))
        if items:
            self._last_id = last_id
            self._write(b"".join(encode_line({"op": "add", **it.to_dict()}) for it in items))
            for item in items:
                self._admit(item)
        self._fence("the dead letters")
        try:
            atomic_write(self.dead_path, b"".join(map(encode_line, unusable)), mode=0o600)
        except OSError as exc:
            raise storage_error("queue", "cannot write", self.dead_path, exc) from exc
        return items

    # -- internals

    def _report_damage(self, report: RecoveryReport, kept: dict[Path, Path]) -> None:
        for path, dropped in (
            (self.path, report.torn_bytes),
            (self.dead_path, report.dead_torn_bytes),
        ):
            if dropped:
                self.damage.report(
                    path,
                    Problem.TORN_TAIL,
                    f"repaired torn last line of {path.name} ({dropped} bytes dropped)",
                    dropped_bytes=dropped,
                    kept=kept[path],
                )
        if report.skipped:
            self.damage.report(
                self.path,
                Problem.UNREADABLE_LINES,
                f"skipped {report.skipped} unreadable line(s) of {QUEUE_FILE}",
                count=report.skipped,
                kept=kept[self.path],
            )

    def _report_dead_damage(self, kept: Path | None) -> int:
        """Report unreadable lines of ``dead.jsonl`` not reported before; how many there are.

        The lines stay where they are (nothing rewrites the file until a retry), so each
        is remembered by inode and offset: a later start does not report it again.
        """
        try:
            st = os.stat(self.dead_path)
            data = self.dead_path.read_bytes()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise storage_error("queue", "cannot read", self.dead_path, exc) from exc
        offsets: list[str] = []
        offset = 0
        for line in data.split(b"\n"):
            if line.strip() and decode_line(line) is None:
                offsets.append(f"{st.st_dev}:{st.st_ino}:{offset}")
            offset += len(line) + 1
        memory, scope = self.damage.memory, str(self.dead_path)
        new = [key for key in offsets if not (memory and memory.knows(scope, key))]
        if new:
            damage = self.damage.report(
                self.dead_path,
                Problem.UNREADABLE_LINES,
                f"found {len(new)} unreadable line(s) of {DEAD_FILE} (`queue retry` drops them)",
                count=len(new),
                kept=kept,
                data=data,
            )
            if memory is not None and damage.kept is not None:
                memory.remember(scope, new)
        return len(offsets)

    def _load(self, replay: _Replay) -> None:
        self._last_id = replay.last_id
        for item in [*replay.seen, *replay.finished]:
            self._retire(item)
        for item in replay.items.values():
            if item.id == replay.current:
                self._order[item.id] = self._next_order
                self._next_order += 1
                self._current = item
                self._by_rid_add(item)
            else:
                self._admit(item, head=item.id in replay.head)

    def _recover(self, report: RecoveryReport, *, killed: bool) -> None:
        item = self._current
        if item is None:
            return
        self._current = None
        if killed:
            # Not the item's doing: the attempt is given back, as for a release.
            item.kills += 1
            item.attempts = max(item.attempts - 1, 0)
        if item.attempts < 2 and item.kills < KILLS_LIMIT:
            self._admit(item, head=True)
            report.requeued.append(item.id)
            return
        reason = DEAD_REASON if item.attempts >= 2 else KILLED_REASON
        # A crash between this write and the compaction that follows would find the item
        # in progress again; the id check keeps dead.jsonl free of the duplicate. Compared,
        # not hashed: a damaged entry's id may be a list.
        if not any(entry.get("id") == item.id for entry in self.dead_items()):
            entry = {**item.to_dict(), "reason": reason, "dead_at": time.time()}
            self._fence("the dead letters")
            try:
                fd = open_append(self.dead_path)
                try:
                    append_durably(fd, encode_line(entry))
                finally:
                    os.close(fd)
                fsync_dir(self.state_dir)
            except OSError as exc:
                raise storage_error("queue", "cannot write", self.dead_path, exc) from exc
        self._retire(item)
        report.dead.append(item.id)
        report.dead_reasons[item.id] = reason

    def _admit(self, item: QueueItem, *, head: bool = False) -> None:
        order = self._order.setdefault(item.id, self._next_order)
        self._next_order = max(self._next_order, order + 1)
        if head:
            self._head.add(item.id)
        heapq.heappush(self._heap, (0 if head else 1, -item.priority, order, item))
        self._by_rid_add(item)

    def _by_rid_add(self, item: QueueItem) -> None:
        if item.rid is not None:
            self._by_rid[item.rid] = item

    def _retire(self, item: QueueItem) -> None:
        self._order.pop(item.id, None)
        self._head.discard(item.id)
        if item.rid is None:
            return
        if self._by_rid.get(item.rid) is item:
            del self._by_rid[item.rid]
        self._recent[item.rid] = item
        self._recent.move_to_end(item.rid)
        while len(self._recent) > _RECENT_RIDS:
            self._recent.popitem(last=False)

    def _pending_unordered(self) -> list[QueueItem]:
        return [entry[3] for entry in self._heap]

    def _render(self, pending: Iterable[QueueItem]) -> bytes:
        """The compacted log holding ``pending`` plus the current item."""
        live = list(pending)
        if self._current is not None:
            live.append(self._current)
        live.sort(key=lambda it: self._order[it.id])
        lines: list[bytes] = []
        if self._last_id is not None:
            lines.append(encode_line({"op": "last", "last_id": self._last_id}))
        for rid, done in self._recent.items():
            seen = {"op": "seen", "rid": rid, "id": done.id, "trace_id": done.trace_id}
            lines.append(encode_line(seen))
        for item in live:
            lines.append(encode_line({"op": "add", **item.to_dict()}))
            if item.id in self._head:
                lines.append(encode_line({"op": "requeue", "id": item.id}))
            if item is self._current:
                lines.append(encode_line({"op": "start", "id": item.id, "attempts": item.attempts}))
        return b"".join(lines)

    def _rewrite(self, data: bytes) -> None:
        self._fence("the queue")
        atomic_write(self.path, data, mode=0o600)
        # The old descriptor points at the replaced inode: appends through it would vanish.
        self._log.reopen()
        self._finished_since_compact = 0

    def _write(self, data: bytes) -> None:
        if not self._log.is_open:
            raise RuntimeError("DurableQueue.open() was not called")
        self._fence("the queue")
        self._log.write(data)
