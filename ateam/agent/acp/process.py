"""The runtime's process: started in its own process group, tied to the agent, never leaked.

A coding agent is a tree of processes (a node wrapper, its CLI, the commands it runs),
so it gets a session and process group of its own: one signal to the group stops all of
it, whether the agent stops it, restarts it after a hang or kills it on ``cancel
--hard``. Three things make sure none of it outlives the agent: the kernel kills the
leader when the agent dies (``PR_SET_PDEATHSIG``); a guard — a ``sh`` outside the group
reading a pipe only the agent writes — kills the whole group when that pipe ends, which
the agent's death ends too, so the leader's children go with it; and the group id is
written to the agent's ``state/``, so that the next start of the agent kills whatever
is left of the old group (after a ``kill -9`` of the guard too) before it starts anew.

The runtime's stderr is its log: each line goes to the agent's log with the runtime's
name in front, masked, and bounded in length, so a runtime that prints a key or a
megabyte on one line harms neither.

Its stdout, where every message comes, is a pipe of ateam's own making rather than
asyncio's: widened to :data:`PIPE_BYTES`, so a runtime streaming a command's output runs
ahead of the agent by a megabyte instead of stopping at every 64 KiB, and read into
one buffer that is kept (:class:`_PipeReader`, which says why not asyncio's transport).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ateam.errors import RuntimeMissing

__all__ = ["PGID_FILE", "RuntimeProcess", "kill_leftover"]

log = logging.getLogger(__name__)

PGID_FILE = "runtime.pgid"
"""In the agent's ``state/``: the process group of the runtime it started last."""

STDERR_LINE_MAX = 4096
"""Characters of one stderr line that reach the log."""

MESSAGE_BYTES = 2**20
"""The longest message read from the runtime's stdout in one piece (longer ones are
joined from pieces, up to :data:`~ateam.agent.acp.channel.MAX_MESSAGE_BYTES`)."""

PIPE_BYTES = 2**20
"""The runtime's stdout pipe is widened to this (Linux; the default is 64 KiB, and a
user may widen a pipe up to ``/proc/sys/fs/pipe-max-size``, 1 MiB by default)."""

_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux; named in fcntl from 3.10

_STOP_GRACE_S = 2.0
_PR_SET_PDEATHSIG = 1

_GUARD = 'read _ignored; kill -KILL "-$1" 2>/dev/null'
"""The guard's script: wait for the end of its stdin, then kill the group ``$1``."""


# Looked up once, here: the child between fork and exec must not load libraries.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def _tie_to_parent() -> None:
    """In the child before ``exec``: the kernel kills it when the agent dies (Linux)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def kill_leftover(state_dir: Path) -> int | None:
    """Kill the group a previous instance of the agent left running; returns its id."""
    path = state_dir / PGID_FILE
    try:
        pgid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    with contextlib.suppress(OSError):
        path.unlink()
    if pgid <= 1 or pgid == os.getpgid(0):
        return None  # never our own group, whatever the file says
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        return None  # long gone
    log.warning("killed the runtime process group %d a previous instance left", pgid)
    return pgid


class RuntimeProcess:
    """One running runtime: its pipes, its group, its stderr relayed to the log.

    Args:
        name: The entry id, for log lines.
        argv: The command line; ``argv[0]`` resolved already.
        env: Its complete environment.
        cwd: The agent's working directory.
        state_dir: Where the group id is recorded (``None``: nowhere, for probes).
        scrub: Masks secrets in what is logged.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        state_dir: Path | None,
        scrub: Callable[[str], str] = str,
    ) -> None:
        self.name = name
        self.argv = tuple(argv)
        self._env = dict(env)
        self._cwd = cwd
        self._state_dir = state_dir
        self._scrub = scrub
        self.proc: asyncio.subprocess.Process | None = None
        self._guard: subprocess.Popen[bytes] | None = None
        self._guard_pipe: int | None = None
        """The write end of the guard's stdin: held by this process only."""
        self._stderr_task: asyncio.Task[None] | None = None
        self._stdout: _PipeReader | None = None
        self.stderr_tail: list[str] = []
        """The last lines it wrote to stderr: an exit is explained with them."""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> tuple[asyncio.StreamWriter, asyncio.StreamReader]:
        """Start it; returns its stdin and stdout. :class:`RuntimeMissing` if it cannot run."""
        read_end, write_end = os.pipe()
        with contextlib.suppress(OSError):  # not Linux, or a lower limit: the default size
            fcntl.fcntl(read_end, _F_SETPIPE_SZ, PIPE_BYTES)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=write_end,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
                preexec_fn=_tie_to_parent,
                limit=MESSAGE_BYTES,
            )
        except BaseException as exc:
            os.close(read_end)
            if isinstance(exc, FileNotFoundError | PermissionError):
                raise RuntimeMissing(
                    f"runtime {self.name}: cannot run {self.argv[0]}: {exc.strerror}",
                    provider="acp",
                    model=self.name,
                ) from None
            raise
        finally:
            os.close(write_end)  # the runtime holds it now: its end is the runtime's end
        stdout = await self._open_stdout(read_end)
        if self._state_dir is not None:
            with contextlib.suppress(OSError):
                (self._state_dir / PGID_FILE).write_text(f"{self.proc.pid}\n")
        self._start_guard(self.proc.pid)
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self._stderr_task = asyncio.create_task(self._relay(self.proc.stderr))
        return self.proc.stdin, stdout

    async def _open_stdout(self, fd: int) -> asyncio.StreamReader:
        reader = asyncio.StreamReader(limit=MESSAGE_BYTES)
        self._stdout = _PipeReader(fd, reader)
        return reader

    def _start_guard(self, pgid: int) -> None:
        """The guard that kills group ``pgid`` once this process is gone (or lets go)."""
        read_end, write_end = os.pipe()
        try:
            self._guard = subprocess.Popen(
                ["/bin/sh", "-c", _GUARD, "ateam-runtime-guard", str(pgid)],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # outside the group it kills, and out of the tty's
                close_fds=True,
            )
        except OSError as exc:  # no guard: the leader still dies with the agent
            os.close(write_end)
            log.warning("runtime %s: no guard for its process group: %s", self.name, exc)
            return
        finally:
            os.close(read_end)
        os.set_inheritable(write_end, False)  # a runtime started later must not hold it
        self._guard_pipe = write_end

    def _end_guard(self) -> None:
        if self._guard_pipe is not None:
            os.close(self._guard_pipe)  # the guard kills what is left of the group, and ends
            self._guard_pipe = None
        if self._guard is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._guard.wait(1.0)
            self._guard = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def reaped(self, within_s: float) -> None:
        """Wait a moment for the process to end (its stdout closing comes first)."""
        if self.proc is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), within_s)

    def exit_text(self) -> str:
        """How it ended, with its last words on stderr: for the task's error."""
        code = self.proc.returncode if self.proc is not None else None
        how = (
            f"killed by {_signal_name(-code)}"
            if code is not None and code < 0
            else f"exited with status {code}"
        )
        tail = " | ".join(self.stderr_tail[-3:])
        return f"{how}: {tail}" if tail else how

    async def _relay(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await stream.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                line = exc.partial
                if not line:
                    return
            except asyncio.LimitOverrunError as exc:
                line = await stream.readexactly(exc.consumed)
            except (OSError, ValueError):
                return
            text = self._scrub(line.decode("utf-8", "replace").rstrip()[:STDERR_LINE_MAX])
            if text:
                self.stderr_tail = [*self.stderr_tail[-9:], text]
                log.info("runtime %s: %s", self.name, text)

    def signal_group(self, sig: signal.Signals) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, sig)

    async def stop(self, *, grace_s: float = _STOP_GRACE_S) -> None:
        """End it and everything it started: stdin closed, SIGTERM to the group, then SIGKILL."""
        proc = self.proc
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.close()
        if proc.returncode is None:
            self.signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                pass
        # The leader may be gone while what it started lives on in the group.
        self.signal_group(signal.SIGKILL)
        self._end_guard()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), grace_s)
        await self._end_relay()
        if self._stdout is not None:  # a child of the runtime may still hold the pipe
            self._stdout.close()
            self._stdout = None
        if self._state_dir is not None:
            with contextlib.suppress(OSError):
                (self._state_dir / PGID_FILE).unlink()

    def kill_now(self) -> None:
        """SIGKILL to the whole group at once (``cancel --hard``, a hung runtime)."""
        self.signal_group(signal.SIGKILL)

    async def _end_relay(self) -> None:
        task, self._stderr_task = self._stderr_task, None
        if task is None:
            return
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, 1.0)
        task.cancel()


class _PipeReader:
    """Feeds a :class:`asyncio.StreamReader` from a pipe, read into one buffer reused.

    asyncio's own pipe transport reads into a new 256 KiB buffer each time, above
    glibc's mmap threshold: every read maps fresh pages and faults each one in as the
    kernel fills it. Reading into a buffer that stays mapped costs the copy alone, and
    a read takes all the widened pipe holds (up to a megabyte) in one call. The reader
    pauses and resumes it as it does a transport: reading stops while a megabyte or
    two waits unread, so a runtime that writes faster than the agent reads is held up
    by the pipe, never by the agent's memory.
    """

    def __init__(self, fd: int, reader: asyncio.StreamReader) -> None:
        self._fd = fd
        self._reader = reader
        self._loop = asyncio.get_running_loop()
        self._buffer = bytearray(PIPE_BYTES)
        self._view = memoryview(self._buffer)
        self._reading = False
        self._closed = False
        os.set_blocking(fd, False)
        reader.set_transport(self)  # type: ignore[arg-type]  # it calls pause/resume only
        self.resume_reading()

    def pause_reading(self) -> None:
        if self._reading and not self._closed:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def resume_reading(self) -> None:
        if not self._reading and not self._closed:
            self._loop.add_reader(self._fd, self._ready)
            self._reading = True

    def _ready(self) -> None:
        try:
            size = os.readv(self._fd, [self._buffer])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._reader.set_exception(exc)
            self.close()
            return
        if size == 0:
            self._reader.feed_eof()
            self.close()
            return
        self._reader.feed_data(self._view[:size])  # copied into the reader's buffer

    def close(self) -> None:
        if self._closed:
            return
        self.pause_reading()
        self._closed = True
        os.close(self._fd)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
