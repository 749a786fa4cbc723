"""Conversation history and rolling summaries on disk (SPEC §5.3, storage only).

``state/history.jsonl`` holds one JSON object per turn (a
:class:`~ateam.wire.turns.Turn`, the model clients read too), fsynced before the turn is
reported done, rotated to ``history.jsonl.1`` ... ``history.jsonl.{keep}`` when it would
grow past ``rotate_bytes``. ``state/summary.jsonl`` holds the newest summaries. What goes
into a turn, and how the context is rebuilt from both, is the runner's business.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from ateam._fs import (
    DamageLog,
    Problem,
    append_durably,
    atomic_write,
    fsync_dir,
    open_append,
)
from ateam._json import JsonObject
from ateam._jsonl import (
    AppendLog,
    decode_line,
    encode_line,
    repair_torn_tail,
    storage_error,
)
from ateam.agent.state.fence import Fenced, unfenced
from ateam.constants import HISTORY_KEEP, HISTORY_ROTATE_BYTES, SUMMARY_KEEP
from ateam.paths import private_dir
from ateam.wire.turns import Turn, parse_turn

__all__ = ["HISTORY_FILE", "SUMMARY_FILE", "History", "Summary", "SummaryLog"]

log = logging.getLogger(__name__)

HISTORY_FILE = "history.jsonl"
SUMMARY_FILE = "summary.jsonl"

_BLOCK = 64 * 1024
"""Read size when scanning a file backwards or counting its lines."""
_MEMORY_SCOPE = "history"
"""The history's scope in the damage memory: by store, since its files rotate."""


class History:
    """The append-only turn log, rotated by size.

    Not thread-safe: one asyncio loop owns it.

    Args:
        state_dir: the agent's ``state/`` directory; created (0700) by :meth:`open`.
        rotate_bytes: rotate before a write would take the file past this size.
        keep: how many rotated files to keep (``history.jsonl.1`` is the newest).
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        rotate_bytes: int = HISTORY_ROTATE_BYTES,
        keep: int = HISTORY_KEEP,
        fence: Fenced = unfenced,
    ) -> None:
        if rotate_bytes <= 0:
            raise ValueError("rotate_bytes must be positive")
        if keep < 0:
            raise ValueError("keep must not be negative")
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / HISTORY_FILE
        self._fence = fence
        self.rotate_bytes = rotate_bytes
        self.keep = keep
        self._log = AppendLog(self.path, label="history")
        self._count = 0
        self.damage = DamageLog("history")
        """Torn and unreadable lines found: reported once each, the file copied aside."""
        self._unreadable: dict[tuple[int, int], set[int]] = {}
        """Offsets of the unreadable lines reported so far, by file (device, inode)."""

    def open(self) -> int:
        """Repair a torn last line and get ready to append.

        Returns:
            The number of bytes dropped from a torn last line (0 if none).

        Raises:
            StorageError: the file cannot be read, repaired or opened.
        """
        if self._log.is_open:
            raise RuntimeError("History.open() called twice")
        try:
            if not self.state_dir.exists():
                private_dir(self.state_dir)
                fsync_dir(self.state_dir.parent)
            # No scan limit: a turn can be larger than the queue's window, and refusing
            # to start over one torn turn would cost more than reading back to its start.
            dropped = repair_torn_tail(self.path, self.damage)
            self._count = _count_lines(self.path)
            self._log.open()
        except OSError as exc:
            raise storage_error("history", "cannot open", self.path, exc) from exc
        return dropped

    def close(self) -> None:
        """Release the file; safe to call twice."""
        self._log.close()

    def append(self, turn: Turn) -> None:
        """Write one turn and fsync it; adds ``ts`` (unix time) when it was not given.

        Raises:
            TypeError: ``turn`` is not a :class:`Turn`.
            StorageError: the write failed; the turn is not in the history.
        """
        self.append_many([turn])

    def append_many(self, turns: Sequence[Turn]) -> None:
        """Write several turns with one write and one fsync.

        Raises:
            TypeError: a turn is not a :class:`Turn`.
            StorageError: the write failed; none of the turns is in the history.
        """
        if not turns:
            return
        self._fence("the history")  # before a rotation too: renaming is a write
        data = b"".join(encode_line(_stamped(turn).line()) for turn in turns)
        if self._log.size > 0 and self._log.size + len(data) > self.rotate_bytes:
            self._rotate()
        self._write(data)
        self._count += len(turns)

    def has_input(self, task_id: str, within: int) -> bool:
        """Whether the input of task ``task_id`` is among the newest ``within`` turns: a
        task run again (after a crash, a shutdown) goes on rather than asks again."""
        return any(t.task_id == task_id and t.role == "user" for t in self.turns(within))

    def turns(self, n: int) -> list[Turn]:
        """The newest ``n`` lines that are turns, oldest first, as :meth:`tail` finds them.

        A line that is JSON but fits no turn (hand-edited, say) is left out, as a context
        never had a use for it.
        """
        return [turn for turn in map(parse_turn, self.tail(n)) if turn is not None]

    def tail(self, n: int) -> list[JsonObject]:
        """The newest ``n`` lines, oldest first, across rotated files if needed, as stored.

        This is what ``history.tail`` sends: every field a line holds, read by the
        client's own :class:`Turn`; the agent reads :meth:`turns`. Files are read
        backwards in blocks, so the cost follows ``n``, not the file size. Unreadable
        lines are skipped, and reported through :attr:`damage` the first time a read comes
        across them.
        """
        if n <= 0:
            return []
        newest_first: list[JsonObject] = []
        for path in [self.path, *self._rotated_files().values()]:
            try:
                found, unreadable = _read_tail(path, n - len(newest_first), _BLOCK)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise storage_error("history", "cannot read", path, exc) from exc
            newest_first.extend(found)
            if unreadable:
                self._report_unreadable(path, unreadable)
            if len(newest_first) >= n:
                break
        newest_first.reverse()
        return newest_first

    def final_answer(self, task_id: str, *, within: int) -> Turn | None:
        """The task's final answer, if the newest of its turns among the newest ``within``
        is one; else ``None`` (the task has no turn there, or did not reach its end).

        A final answer is an assistant turn the runner marked ``final``: the model
        answered without tool calls, without an error and without being interrupted. It
        is written before the queue hears that the task is done, so after a crash in
        between this is how the worker knows the task ran to its end.
        """
        for turn in reversed(self.turns(within)):
            if turn.task_id == task_id:
                return turn if turn.role == "assistant" and turn.final else None
        return None

    def count(self) -> int:
        """How many lines (turns) the current file holds; rotated files not included."""
        return self._count

    def clear(self) -> None:
        """Delete the current and all rotated files, durably; the history stays usable."""
        self._fence("the history")
        was_open = self._log.is_open
        self.close()
        try:
            for path in [self.path, *self._rotated_files().values()]:
                path.unlink(missing_ok=True)
            if self.state_dir.exists():
                fsync_dir(self.state_dir)
            self._count = 0
            self._log.size = 0
            self._unreadable.clear()  # a new file may get an old one's inode
            if self.damage.memory is not None:
                self.damage.memory.forget(_MEMORY_SCOPE)
            if was_open:
                self._log.open()
        except OSError as exc:
            raise storage_error("history", "cannot clear", self.path, exc) from exc

    # -- internals

    def _report_unreadable(self, path: Path, offsets: list[int]) -> None:
        """Report the unreadable lines at ``offsets`` of ``path`` not reported before.

        Keyed by inode and offset, so a rotation (a rename) does not make old damage news
        again; and remembered across restarts (:class:`~ateam._fs.DamageMemory`): the
        line stays where it is, and a later start reading back over it must neither
        report it again nor copy the (by then longer) file aside once more.
        """
        try:
            st = path.stat()
        except OSError:
            return
        seen = self._unreadable.setdefault((st.st_dev, st.st_ino), set())
        memory = self.damage.memory

        def key(offset: int) -> str:
            return f"{st.st_dev}:{st.st_ino}:{offset}"

        new = [
            offset
            for offset in offsets
            if offset not in seen and not (memory and memory.knows(_MEMORY_SCOPE, key(offset)))
        ]
        seen.update(offsets)
        if not new:
            return
        damage = self.damage.report(
            path,
            Problem.UNREADABLE_LINES,
            f"skipped {len(new)} unreadable line(s) of {path.name}",
            count=len(new),
        )
        if memory is not None and damage.kept is not None:
            memory.remember(_MEMORY_SCOPE, [key(offset) for offset in new])

    def _rotated_files(self) -> dict[int, Path]:
        """Rotated files by index, newest (1) first."""
        found: dict[int, Path] = {}
        prefix = f"{HISTORY_FILE}."
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.state_dir):
                suffix = entry.name.removeprefix(prefix)
                if entry.name.startswith(prefix) and suffix.isdigit() and int(suffix) > 0:
                    found[int(suffix)] = Path(entry.path)
        return dict(sorted(found.items()))

    def _rotate(self) -> None:
        self.close()
        try:
            # Oldest first, so each rename lands on a name already moved away (or on the
            # file that falls off the end). A crash in between leaves a gap, which tail()
            # tolerates.
            for index, path in reversed(self._rotated_files().items()):
                if index >= self.keep:
                    with contextlib.suppress(OSError):  # its inode may be reused
                        st = path.stat()
                        self._unreadable.pop((st.st_dev, st.st_ino), None)
                    path.unlink()
                else:
                    os.replace(path, self.path.with_name(f"{HISTORY_FILE}.{index + 1}"))
            if self.keep > 0:
                os.replace(self.path, self.path.with_name(f"{HISTORY_FILE}.1"))
            else:
                self.path.unlink()
            fsync_dir(self.state_dir)
        except OSError as exc:
            # Losing a turn would be worse than an oversized file; the next append retries.
            log.warning("history: rotation of %s failed: %s", self.path, exc)
        try:
            self._log.open()
        except OSError as exc:
            raise storage_error("history", "cannot open", self.path, exc) from exc
        if self._log.size == 0:
            self._count = 0

    def _write(self, data: bytes) -> None:
        if not self._log.is_open:
            raise RuntimeError("History.open() was not called")
        self._log.write(data)


class Summary(BaseModel):
    """One line of ``summary.jsonl``; fields a newer agent adds are kept as extra."""

    # defer_build: its validator is built at its first use, not at import (issue 28 §2).
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    ts: float = 0.0
    summary: str = ""
    window: tuple[float, float] | None = None
    """The ``ts`` of the first and the last turn the summary covers."""
    model: str = ""


class SummaryLog:
    """Rolling :class:`Summary` lines, ``{ts, summary, window: [first, last], model}`` each.

    A turn is named by its ``ts`` (history turns carry no other stable number: rotation
    renumbers lines), so ``window`` holds the timestamps of the first and the last turn
    the summary covers.

    Args:
        state_dir: the agent's ``state/`` directory.
        keep: the most entries kept; older ones are dropped on append.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        keep: int = SUMMARY_KEEP,
        fence: Fenced = unfenced,
        scrub: Callable[[str], str] = str,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / SUMMARY_FILE
        self._fence = fence
        self._scrub = scrub
        """Masks secrets in a summary before it is written."""
        self.keep = keep
        self._count: int | None = None  # lines on disk; None until the file was checked
        self.damage = DamageLog("summaries")
        """Torn and unreadable lines found: reported once each, the file copied aside."""

    def append(self, summary: str, *, window: tuple[float, float], model: str) -> None:
        """Add a summary, fsynced before return; beyond ``keep``, rewrite atomically.

        Raises:
            StorageError: the write failed.
        """
        entry: JsonObject = {
            "ts": time.time(),
            "summary": self._scrub(summary),
            "window": [window[0], window[1]],
            "model": model,
        }
        self._fence("the summaries")
        try:
            if self._count is None:
                if not self.state_dir.exists():
                    private_dir(self.state_dir)
                    fsync_dir(self.state_dir.parent)
                repair_torn_tail(self.path, self.damage)
                self._count = _count_lines(self.path)
            if self._count >= self.keep:
                # The rewrite drops unreadable lines: their copy must exist first.
                entries = [*self._entries(required=True), entry][-self.keep :]
                atomic_write(self.path, b"".join(map(encode_line, entries)), mode=0o600)
                self._count = len(entries)
                return
            created = not self.path.exists()
            fd = open_append(self.path)
            try:
                append_durably(fd, encode_line(entry))
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.state_dir)
            self._count += 1
        except OSError as exc:
            # The file may now end in a torn line: check it again before the next append.
            self._count = None
            raise storage_error("history", "cannot write", self.path, exc) from exc

    def all(self) -> list[Summary]:
        """Every kept summary, oldest first; unreadable lines are skipped (and reported).

        A line that is JSON but no summary (hand-edited, say) is left out here, but kept
        in the file by the rewrite that drops the oldest.
        """
        try:
            entries = self._entries(required=False)
        except OSError as exc:  # only a required copy raises, and this one is not
            raise storage_error("history", "cannot read", self.path, exc) from exc
        summaries: list[Summary] = []
        for entry in entries:
            try:
                summaries.append(Summary.model_validate(entry))
            except ValidationError:
                continue
        return summaries

    def _entries(self, *, required: bool) -> list[JsonObject]:
        """The readable entries; unreadable lines are reported through :attr:`damage`.

        Args:
            required: the caller rewrites the file next, so the copy of a damaged file
                must be made (``OSError`` if it cannot), not merely attempted.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        entries: list[JsonObject] = []
        unreadable: list[int] = []
        offset = 0
        for line in data.split(b"\n"):
            if line.strip():
                entry = decode_line(line)
                if entry is None:
                    unreadable.append(offset)
                else:
                    entries.append(entry)
            offset += len(line) + 1
        if unreadable:
            # Appends leave the damaged lines where they are: the same offsets in the
            # same file are the same damage, reported once.
            st = os.stat(self.path)
            key = (st.st_dev, st.st_ino, tuple(unreadable))
            if not self.damage.already(self.path, key, kept=required):
                self.damage.report(
                    self.path,
                    Problem.UNREADABLE_LINES,
                    f"skipped {len(unreadable)} unreadable line(s) of {SUMMARY_FILE}",
                    count=len(unreadable),
                    required=required,
                    key=key,
                )
        return entries


def _stamped(turn: Turn) -> Turn:
    if not isinstance(turn, Turn):
        raise TypeError(f"a history turn must be a Turn, not {type(turn).__name__}")
    return turn if "ts" in turn.model_fields_set else turn.with_fields(ts=time.time())


def _count_lines(path: Path) -> int:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return 0
    with handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(_BLOCK), b""))


def _read_tail(path: Path, n: int, block: int) -> tuple[list[JsonObject], list[int]]:
    """Up to ``n`` readable lines from the end of ``path``, newest first, and the offsets
    of the unreadable lines met on the way."""
    found: list[JsonObject] = []
    unreadable: list[int] = []
    # Pieces of the line whose start is not read yet, newest piece first; joined only
    # once its start turns up, so a huge line costs linear time.
    partial: list[bytes] = []
    with path.open("rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        while end > 0 and len(found) < n:
            start = max(0, end - block)
            handle.seek(start)
            chunk = handle.read(end - start)
            end = start
            parts = chunk.split(b"\n")
            if len(parts) == 1:
                partial.append(chunk)
                continue
            partial.append(parts[-1])
            starts = [start]  # where each part begins in the file
            for part in parts[:-1]:
                starts.append(starts[-1] + len(part) + 1)
            lines = [(b"".join(reversed(partial)), starts[-1])]
            lines.extend((parts[i], starts[i]) for i in range(len(parts) - 2, 0, -1))
            partial = [parts[0]]
            _collect(lines, found, unreadable, n)
        if end == 0 and len(found) < n:
            _collect([(b"".join(reversed(partial)), 0)], found, unreadable, n)
    return found, unreadable


def _collect(
    lines: list[tuple[bytes, int]], found: list[JsonObject], unreadable: list[int], n: int
) -> None:
    for line, offset in lines:
        if len(found) >= n:
            return
        if line.strip():
            entry = decode_line(line)
            if entry is None:
                unreadable.append(offset)
            else:
                found.append(entry)
