"""Fencing of the agent's own files: only the instance that holds the identity writes them.

The Redis lock (:class:`~ateam.bus.lock.InstanceLock`) fences what the agent writes to
Redis; these two fence what it writes to ``state/``:

* :class:`StateDirLock` — an OS lock (``flock``) on ``state/instance.lock``, held for the
  whole life of the process. A process that is frozen (SIGSTOP, a debugger, a swapped-out
  VM) keeps it, so a second instance on the same host cannot start on the same files
  until the first has exited; the kernel drops it when the holder dies, even by kill -9.
  It is checked before the Redis lock, too: while a *running* process holds it, a new
  instance refuses to start even if Redis lost (evicted) the lock key (issue 13).
* :class:`WriteFence` — checked before every write to ``state/``. While this process may
  have lost its Redis lock — no confirmation for the TTL minus a margin, on a clock that
  also counts time spent frozen or suspended (``CLOCK_BOOTTIME`` on Linux) — every write
  is refused with :class:`~ateam.errors.LockLost`. A thawed instance therefore cannot
  append a half-finished turn after its successor took over, whichever host the
  successor runs on.

  Not being able to confirm is not proof of a loss (issue 13): the fence opens again
  once Redis confirms the lock (refreshed, or re-taken because Redis lost it). It
  closes for good only on evidence — another process holds the lock
  (:meth:`WriteFence.mark_lost`).

What the agent writes in ``state/``, and what fences it (issue 22):

* behind the :class:`WriteFence`: ``queue.jsonl``, ``dead.jsonl``, ``history.jsonl`` (and
  its rotations), ``summary.jsonl``, ``handoff.json`` (and its lock file),
  ``context/*.json``, ``usage``, the compaction marker, the scratch file that probes for
  room after a full disk, and ``offset``, the event publisher's record of its offsets: a
  thawed instance's record counts events the stream refused, and its successor would
  number after them, a gap every reader is told of;
* ``fence``, the high-water mark of fences (:mod:`ateam.bus.lock`): written only when
  Redis has just issued this process a fence, i.e. while it holds the lock; it is what
  opens the write fence, so it cannot wait behind it;
* ``instance.lock``: the holder's pid, written only by the process that just took it.

Not state: ``agent.log`` is the process's output, which its supervisor appends there, and
a fenced-off instance rightly says in it why it stops; a damaged file's ``.corrupt-*``
copy is for people and never read back as state.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from ateam._proc import pid_is_running, pid_is_stopped
from ateam.errors import DuplicateInstance, LockLost

__all__ = [
    "STATE_LOCK_FILE",
    "STATE_LOCK_GRACE_S",
    "STATE_LOCK_WAIT_S",
    "Fenced",
    "StateDirLock",
    "WriteFence",
    "unfenced",
]

STATE_LOCK_FILE = "instance.lock"
STATE_LOCK_GRACE_S = 3.0
"""How long a new instance gives a running holder of the state directory to exit (one
on its way out) before it refuses to start as a duplicate."""
STATE_LOCK_WAIT_S = 20.0
"""How long a new instance waits for a predecessor still holding the state directory:
twice the lock TTL, time enough for a thawed one to notice its loss and exit. Past it
the new instance exits 14, so a supervisor tries again later rather than giving up."""

Fenced = Callable[[str], None]
"""What a store calls before a durable write, naming what it writes; raises LockLost."""


def unfenced(what: str) -> None:
    """The fence of a store used outside a running agent (tools, tests): never refuses."""


class LeaseHolder(Protocol):
    """The part of the instance lock the write fence reads."""

    fence: int

    def expired_locally(self) -> bool: ...


class WriteFence:
    """Refuses durable writes while the instance lock is unconfirmed, and once it is lost."""

    def __init__(self, lock: LeaseHolder, agent: str) -> None:
        self._lock = lock
        self._agent = agent
        self.lost = False
        """Set once the agent learnt that another process holds its lock: final."""
        self.refused = 0

    def mark_lost(self) -> None:
        self.lost = True

    @property
    def open(self) -> bool:
        """Whether a write would go through now (the lock is held and confirmed)."""
        return not self.lost and not self._lock.expired_locally()

    def __call__(self, what: str) -> None:
        if self.open:
            return
        self.refused += 1
        why = "has lost" if self.lost else "could not confirm for too long"
        raise LockLost(
            f"refusing to write {what}: {self._agent} {why} its instance lock "
            f"(fence {self._lock.fence})",
            detail={"agent": self._agent, "fence": self._lock.fence, "write": what},
        )


class StateDirLock:
    """``flock`` on ``state/instance.lock``, held from start to exit.

    Args:
        state_dir: the agent's ``state/`` directory (created if missing).
        agent: the identity, for messages.
    """

    def __init__(self, state_dir: Path, agent: str) -> None:
        self.path = Path(state_dir) / STATE_LOCK_FILE
        self.agent = agent
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; ``True`` once this process holds it."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        try:
            # The holder's pid, for the message a waiting successor prints.
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except BaseException:
            os.close(fd)  # a full disk: let go rather than hold a lock nobody tracks
            raise
        self._fd = fd
        return True

    def holder(self) -> int | None:
        """The pid recorded by the current holder, if readable."""
        with contextlib.suppress(OSError, ValueError):
            return int(self.path.read_text(encoding="ascii").strip())
        return None

    async def refuse_a_running_holder(self, *, grace_s: float) -> None:
        """Before the Redis lock: take the directory, or refuse a running holder.

        A process of this host that holds the directory and is running is the agent,
        whatever Redis says: its lock key may have been evicted or lost, and taking the
        identity over would stop the real agent for a second instance. One that is
        frozen (stopped) is left for :meth:`acquire`, which replaces it through the
        Redis lock. ``grace_s`` gives a holder on its way out time to exit.

        Raises:
            DuplicateInstance: a running process still holds the directory after
                ``grace_s`` (exit 11, as when Redis's lock names another instance).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while not self.try_acquire():
            pid = self.holder()
            if pid is None or pid_is_stopped(pid):
                return
            if loop.time() >= deadline:
                raise DuplicateInstance(
                    # The SPEC's wording, which scripts match, then the local evidence.
                    f"Another instance of {self.agent} is already registered on this Redis "
                    f"(pid {pid} on this host holds {self.path.parent})",
                    detail={"agent": self.agent, "pid": pid},
                )
            await asyncio.sleep(0.1)

    async def acquire(
        self, *, wait_s: float, keep_alive: Callable[[], Awaitable[object]] | None = None
    ) -> None:
        """Take the lock, waiting up to ``wait_s`` for a holder that is still alive.

        A frozen predecessor holds the lock until it runs again, notices it lost the
        identity and exits; ``keep_alive`` (the Redis lock refresh) runs while waiting so
        the identity this process already won does not lapse meanwhile.

        Raises:
            LockLost: another process still holds the directory after ``wait_s`` (exit
                14: a supervisor tries again later, by when a thawed holder has gone).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while not self.try_acquire():
            if loop.time() >= deadline:
                pid = self.holder()
                alive = pid is not None and pid_is_running(pid)
                who = f"pid {pid}" if alive else "another process"
                raise LockLost(
                    f"Another instance of {self.agent} ({who}) still holds its state "
                    f"directory {self.path.parent}",
                    detail={"agent": self.agent, "pid": pid},
                )
            if keep_alive is not None:
                await keep_alive()
            await asyncio.sleep(0.2)

    def release(self) -> None:
        if self._fd is not None:
            # Closing the descriptor drops the flock; the file stays for the next holder.
            os.close(self._fd)
            self._fd = None
