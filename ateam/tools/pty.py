"""The engine behind ``os.exec`` (SPEC §5.5): one shell command in its own pseudo-terminal.

One module, over the usual size on purpose: the fork, the reader, the leader watch and
the group kill are one protocol whose ordering is the whole point (see below).

:class:`ExecProcess` runs ``/bin/sh -c CMD`` through :mod:`ptyprocess`, which forks with
``forkpty``: the child starts a new session, so its pid is also its process-group and
session id, and the PTY is its controlling terminal (``test -t 1`` holds, programs colour
their output and line-buffer it). :func:`run_command` is the start-and-wait shortcut.

Design choices, and why:

* **A relay drains the terminal; no thread per command.** A Linux PTY buffers only 20
  KiB and hands it out 4 KiB a read, each read waiting for the kernel's worker to move
  the next 4 KiB: a command writing fast stops as soon as its reader pauses to frame,
  check and queue what it read. So a ``cat`` (started in a session of its own, so that
  neither the command's group kill nor a terminal's ^C reaches it) reads the master and
  writes into a pipe of 1 MiB, which the agent reads with ``loop.add_reader`` and
  non-blocking ``os.read`` calls of up to 256 KiB: the command writes on while the agent
  works, and the agent's reads are a few large ones instead of one per 4 KiB. (A relay
  thread would not do: each of its 4 KiB reads waits for the GIL.) Once the pipe ends
  (the terminal ended, or the relay died), the master itself is read until it reports
  EOF too, so the command is never left writing into a terminal nobody reads (a relay
  killed from outside loses at most the one read it held); without a ``cat`` the master
  is read directly from the start. Every chunk goes to ``on_output`` unchanged. Bytes
  stay bytes (binary data, invalid UTF-8 and ANSI escapes pass through); framing and
  coalescing (SPEC §4.5) are the caller's job. The callback runs on the event loop and
  must not block.
* **Held while the owner lags (issue 28 §3).** With a ``room``
  (:class:`~ateam.tools.exec_values.OutputRoom`), each read first asks it; on no, the
  reader is removed until the room says yes, so the pipe and the terminal fill and the
  command blocks on its write, as under a terminal that stopped reading. Once the shell
  has exited the rest is drained without asking: it is bounded, and the call must end.
* **Leader exit is watched separately from end of output.** A ``pidfd`` (Linux ≥ 5.3)
  becomes readable when the shell exits; elsewhere ``waitid(..., WNOWAIT)`` is polled with
  a back-off. End of output alone cannot be trusted: ``cmd &`` leaves a process holding
  the PTY open and the master would never report EOF, hanging the tool call.
* **The whole group is killed when the command ends, whatever the reason.** As soon as
  the shell has exited — while it is still an unreaped zombie, so its pid, which is the
  group id, cannot have been recycled — the group gets ``SIGKILL``; only then is the
  shell reaped. Nothing a command started in the background outlives the tool call
  (``sleep 1000 & echo hi`` returns at once and leaves nothing behind), and the last
  output is still drained: the kernel keeps what was written before the writers died,
  and the master reports EOF (``EIO`` on Linux) once the buffer is empty and every slave
  descriptor is closed. If EOF has not come ``_DRAIN_GRACE_S`` later, something outside
  the group still holds the terminal: on Linux every process of the command's *session*
  (a job that moved to a group of its own, e.g. under ``set -m``) is killed too, and after
  another grace period the master is closed regardless. A process that started a
  session of its own (``setsid``, daemons) has left the command's control, as it would in
  a terminal; it is not hunted down, but it cannot hold the call either.
* **Timeouts and stops act on the group.** The wall-clock timeout and :meth:`kill` send
  ``SIGKILL`` to the group; :meth:`interrupt` sends ``SIGINT``, then ``SIGTERM`` after
  ``_TERM_AFTER_S`` and ``SIGKILL`` ``_KILL_AFTER_S`` later if the shell still runs. The
  first cause wins and becomes :attr:`ExecResult.reason`.
* **CPU limit.** ``RLIMIT_CPU`` is set in the child before ``exec`` (soft = ``cpu_s``
  rounded up to whole seconds, hard one second later): the kernel sends ``SIGXCPU`` at the
  soft limit and ``SIGKILL`` at the hard one. The limit is inherited, but the kernel
  counts it per process, so it caps each process of the command, not their sum. The end
  is reported as ``cpu_limit`` when the shell died of ``SIGXCPU``, reported a child that
  did (exit status 128 + ``SIGXCPU``), or was killed after using its whole budget.
* **No output post-processing: ``ONLCR`` is off.** A terminal normally turns ``\\n`` into
  ``\\r\\n``. We clear that flag on the slave before ``exec``, so what reaches
  ``on_output`` and the model is exactly what the program wrote: ``cat`` of a binary file
  is byte-exact and the model reads plain ``\\n`` line ends. Line-based and coloured
  output still looks right where it is shown: the plain console writes it to a real
  terminal, whose own ``ONLCR`` adds the carriage returns, and the Textual panes render
  ``\\n`` as a new line. (A consumer that feeds the stream to a VT emulator should set its
  newline mode.) Programs that draw the screen themselves set their own modes anyway.
* **Bounded memory.** Only the last ``output_limit`` bytes are kept, in a ``bytearray``
  trimmed from the front once it holds twice that (CPython drops a bytearray's head
  without moving the rest), so each byte is copied O(1) times and 50 MB of output costs
  ~128 KiB; :attr:`ExecResult.total_bytes` still counts everything. What is trimmed is
  looked at for the armour lines of a private key block, so that a tail that begins
  inside one is known to (:attr:`ExecResult.opens_in_key`): the redactor would not
  know its body without the BEGIN line trimmed away.
* **A clean child.** The environment is minimal (:func:`minimal_env`) unless the agent
  inherits its own; signal dispositions the agent may have set to "ignore" (``SIGPIPE``,
  which Python ignores, above all) and the signal mask are reset, core dumps are off,
  and the working directory is checked first so a missing one is a
  :class:`~ateam.errors.BadRequest`, not a traceback from a forked child.

Everything here runs on the event loop's thread: call :meth:`ExecProcess.interrupt` and
:meth:`ExecProcess.kill` from it. Cleanup (kill, reap, close) happens in loop callbacks,
so a process is cleaned up even when nobody awaits :meth:`ExecProcess.wait`.

Windows: this module is the POSIX backend. A ConPTY backend (pywinpty) would sit beside
it with the same public surface — ``ExecProcess.start`` / ``wait`` / ``interrupt`` /
``kill`` and the same :class:`ExecResult` — reading in a thread (a ConPTY pipe is not
selectable) and using a Job Object in place of the process group; ``start`` would pick
the backend by platform.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import termios
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from ptyprocess import PtyProcess

from ateam.errors import AteamError, BadRequest
from ateam.tools.exec_values import (
    DEFAULT_PATH,
    KEY_END,
    EndReason,
    ExecLimits,
    ExecResult,
    OutputRoom,
    minimal_env,
)

__all__ = ["DEFAULT_COLS", "DEFAULT_ROWS", "ExecProcess", "OutputCallback", "run_command"]

log = logging.getLogger(__name__)

OutputCallback = Callable[[bytes], None]
"""Receives each chunk of output as it is read, on the event loop's thread."""

SHELL: Final = "/bin/sh"
DEFAULT_COLS: Final = 120
DEFAULT_ROWS: Final = 40

_CHUNK: Final = 1 << 18
"""Bytes asked for per ``os.read``: a pipe hands out what it holds, a Linux PTY 4 KiB."""
_READ_BUDGET: Final = 1 << 18
"""Bytes read per readiness callback before the loop gets a turn (fairness): 256 KiB is
about a millisecond of framing, checking and queueing, so the publisher, whose appends
wait for the loop, keeps up with a flood instead of trailing it."""
_RELAY_PIPE_BYTES: Final = 1 << 20
"""The relay's pipe: how far a command may write ahead of the agent (Linux lets anyone
ask for up to 1 MiB; elsewhere the system's size stays)."""
_TERM_AFTER_S: Final = 1.0
_KILL_AFTER_S: Final = 2.0
_DRAIN_GRACE_S: Final = 0.5
_CANCEL_CLEANUP_S: Final = 5.0
_POLL_FIRST_S: Final = 0.005
_POLL_MAX_S: Final = 0.1

# Dispositions that survive exec when set to SIG_IGN, and that a command expects at
# their defaults (Python itself ignores SIGPIPE; a detached agent may ignore SIGINT/HUP).
_RESET_SIGNALS: Final = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGXCPU,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
)


def _check_args(cmd: str, workdir: Path, env: Mapping[str, str], rows: int, cols: int) -> None:
    """Refuse, in the parent, what would otherwise blow up inside the forked child."""
    if "\0" in cmd:
        raise BadRequest("the command contains a NUL byte")
    if "\0" in str(workdir):
        raise BadRequest("the working directory contains a NUL byte")
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise BadRequest(f"invalid environment variable {name!r}")
    if not (0 < rows < 1 << 16 and 0 < cols < 1 << 16):
        raise BadRequest(f"invalid terminal size {cols}x{rows}")
    _check_cwd(workdir)


def _check_cwd(workdir: Path) -> None:
    detail = {"cwd": str(workdir)}
    if not workdir.exists():
        raise BadRequest(f"working directory {workdir} does not exist", detail=detail)
    if not workdir.is_dir():
        raise BadRequest(f"working directory {workdir} is not a directory", detail=detail)
    if not os.access(workdir, os.X_OK):
        raise BadRequest(f"working directory {workdir} is not accessible", detail=detail)


def _child_setup(workdir: str, cpu_s: float | None) -> Callable[[], None]:
    """What the forked child does before ``exec``; runs after fork, so no imports here.

    ptyprocess reports an exception raised here back to the parent as the same builtin
    exception type, so a directory removed since :func:`_check_cwd` still fails cleanly.
    """

    def setup() -> None:
        os.chdir(workdir)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        for sig in _RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        attrs = termios.tcgetattr(1)  # fd 1 is the slave side of the PTY
        attrs[1] &= ~termios.ONLCR  # see the module docstring
        termios.tcsetattr(1, termios.TCSANOW, attrs)
        _, core_hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (0, core_hard))
        if cpu_s is not None:
            soft = max(1, math.ceil(cpu_s))
            hard = soft + 1
            _, cur_hard = resource.getrlimit(resource.RLIMIT_CPU)
            if cur_hard != resource.RLIM_INFINITY:
                hard = min(hard, cur_hard)
                soft = min(soft, hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))

    return setup


class ExecProcess:
    """One running command in its own PTY and session / process group.

    Create it with :meth:`start`; :meth:`wait` returns the :class:`ExecResult` once the
    command has ended, its group is dead and its output fully read.
    """

    pid: int
    """The shell's pid."""
    pgid: int
    """The command's process group (and session) id: the same as :attr:`pid`."""

    def __init__(
        self,
        child: PtyProcess,
        *,
        limits: ExecLimits,
        on_output: OutputCallback,
        loop: asyncio.AbstractEventLoop,
        started: float,
        room: OutputRoom | None = None,
    ) -> None:
        """Take over a freshly spawned child; use :meth:`start` rather than this."""
        self._child = child
        self._limits = limits
        self._on_output = on_output
        self._room = room
        self._held: asyncio.Task[None] | None = None
        """Waiting for room to read on (the owner is behind); reading is stopped meanwhile."""
        self._loop = loop
        self._started = started
        self.pid = child.pid
        self.pgid = child.pid
        self._master: int = child.fd
        self._fd: int = child.fd
        """What output is read from: the relay's pipe, else (and at the end) the master."""
        self._relay: subprocess.Popen[bytes] | None = None
        self._pidfd: int | None = None
        self._tail = bytearray()
        self._in_key = False
        """Whether the output trimmed from ``_tail`` ends inside a private key block."""
        self._total = 0
        self._eof = False
        self._reading = False
        self._status: int | None = None
        self._reaped = False
        self._cpu_used = 0.0
        self._ended_at: float | None = None
        self._cause: EndReason | None = None
        self._interrupting = False
        self._drain_stage = 0
        self._handles: list[asyncio.TimerHandle] = []
        self._done: asyncio.Future[ExecResult] = loop.create_future()

    @classmethod
    async def start(
        cls,
        cmd: str,
        *,
        cwd: Path,
        limits: ExecLimits,
        on_output: OutputCallback,
        env: Mapping[str, str] | None = None,
        cols: int = DEFAULT_COLS,
        rows: int = DEFAULT_ROWS,
        room: OutputRoom | None = None,
    ) -> ExecProcess:
        """Start ``/bin/sh -c cmd`` in a new PTY, session and process group.

        Args:
            cmd: The shell command line.
            cwd: Working directory; it must exist (else :class:`~ateam.errors.BadRequest`).
            limits: Timeout, CPU limit, output limit and environment policy.
            on_output: Called on the loop's thread with each chunk of output as read.
            env: The complete environment; :func:`minimal_env` of ``limits`` by default.
            cols: Terminal width.
            rows: Terminal height.
            room: Asked before each read; while it says no, the terminal is not read.
        """
        loop = asyncio.get_running_loop()
        workdir = Path(cwd)
        environ = dict(env) if env is not None else minimal_env(limits)
        _check_args(cmd, workdir, environ, rows, cols)
        started = time.monotonic()
        try:
            with warnings.catch_warnings():
                # Python >= 3.12 warns about forking a multi-threaded process. The child
                # only makes a few system calls (no locks) before exec, which is safe.
                warnings.filterwarnings("ignore", r".*multi-threaded", DeprecationWarning)
                child = PtyProcess.spawn(
                    [SHELL, "-c", cmd],
                    env=environ,
                    dimensions=(rows, cols),
                    preexec_fn=_child_setup(str(workdir), limits.cpu_s),
                )
        except Exception as exc:  # fork, exec or the child's setup failed
            _check_cwd(workdir)  # the directory vanished between the check and the fork
            raise AteamError(f"could not start {SHELL}: {exc}") from exc
        proc = cls(child, limits=limits, on_output=on_output, loop=loop, started=started, room=room)
        proc._begin()
        return proc

    def _begin(self) -> None:
        try:
            pgid, sid = os.getpgid(self.pid), os.getsid(self.pid)
        except ProcessLookupError:  # pragma: no cover - a zombie still has both
            pgid = sid = self.pid
        if pgid != self.pid or sid != self.pid:  # pragma: no cover - forkpty guarantees it
            os.kill(self.pid, signal.SIGKILL)
            self._on_leader_exit()
            raise AteamError(f"{SHELL} did not start its own session (pgid {pgid}, sid {sid})")
        self._fd = self._start_relay()
        self._read_from(self._fd)
        self._watch_leader()
        self._handles.append(self._loop.call_later(self._limits.timeout_s, self._on_timeout))

    def _start_relay(self) -> int:
        """Start ``cat`` from the master into a large pipe; the pipe's read end, or the
        master if no relay could start (output is then read from it directly)."""
        cat = shutil.which("cat", path=DEFAULT_PATH)
        if cat is None:
            return self._master
        read_end, write_end = os.pipe()
        try:
            with contextlib.suppress(OSError, AttributeError):  # Linux only; best effort
                fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _RELAY_PIPE_BYTES)
            self._relay = subprocess.Popen(
                [cat],
                stdin=self._master,
                stdout=write_end,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            log.warning("exec %d: no output relay (%s); reading the terminal", self.pid, exc)
            os.close(read_end)
            return self._master
        finally:
            os.close(write_end)
        return read_end

    def _read_from(self, fd: int) -> None:
        self._fd = fd
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._on_readable)
        self._reading = True

    # -- public control ---------------------------------------------------------------

    async def wait(self) -> ExecResult:
        """Wait until the command ended, its group is dead and its output drained.

        Cancelling this wait does not stop the command (see :func:`run_command`).
        """
        return await asyncio.shield(self._done)

    @property
    def relay_pid(self) -> int | None:
        """The pid of the ``cat`` relaying the output, until the command is done."""
        return self._relay.pid if self._relay is not None else None

    @property
    def done(self) -> bool:
        """Whether the result is ready."""
        return self._done.done()

    def interrupt(self) -> None:
        """Ask the command to stop: ``SIGINT`` to the group, then ``SIGTERM``, ``SIGKILL``.

        ``SIGTERM`` follows after ~1 s and ``SIGKILL`` ~2 s after that, each only if the
        shell is still running. Calling it again changes nothing.
        """
        if self._ended_at is not None or self._interrupting:
            return
        self._interrupting = True
        self._cause = self._cause or EndReason.INTERRUPTED
        self._signal_group(signal.SIGINT)
        later = self._loop.call_later
        self._handles.append(later(_TERM_AFTER_S, self._escalate, signal.SIGTERM))
        self._handles.append(later(_TERM_AFTER_S + _KILL_AFTER_S, self._escalate, signal.SIGKILL))

    def kill(self) -> None:
        """Stop the command now: ``SIGKILL`` to the whole group at once."""
        if self._done.done():
            return
        if self._ended_at is None:
            self._cause = self._cause or EndReason.KILLED
            self._signal_group(signal.SIGKILL)
        else:  # the group is dead; something outside it holds the terminal: stop waiting
            self._drain_now()
            self._finish()

    # -- the leader ---------------------------------------------------------------------

    def _watch_leader(self) -> None:
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            try:
                self._pidfd = int(pidfd_open(self.pid))
            except OSError:
                self._pidfd = None
        if self._pidfd is not None:
            self._loop.add_reader(self._pidfd, self._on_leader_exit)
        else:
            self._poll_leader(_POLL_FIRST_S)

    def _poll_leader(self, delay: float) -> None:
        if self._leader_has_exited():
            self._on_leader_exit()
            return
        self._handles.append(
            self._loop.call_later(delay, self._poll_leader, min(delay * 2, _POLL_MAX_S))
        )

    def _leader_has_exited(self) -> bool:
        if hasattr(os, "waitid"):  # look without reaping, so the group id stays reserved
            try:
                return (
                    os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
                )
            except ChildProcessError:
                return True
        return self._reap(os.WNOHANG)

    def _reap(self, options: int) -> bool:
        """``wait4`` the shell; whether it has been reaped (now or before)."""
        if self._reaped:
            return True
        try:
            pid, status, usage = os.wait4(self.pid, options)
        except ChildProcessError:  # someone else reaped it; its status is lost
            self._reaped = True
            return True
        if pid == 0:
            return False
        self._status = status
        self._cpu_used = usage.ru_utime + usage.ru_stime
        self._reaped = True
        return True

    def _on_leader_exit(self) -> None:
        if self._ended_at is not None:
            return
        self._ended_at = time.monotonic()
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._cancel_handles()
        # The shell is a zombie at worst, so its pid is still the group's and cannot be
        # reused: killing the group now cannot hit a stranger.
        self._signal_group(signal.SIGKILL)
        self._reap(0)
        self._child.terminated = True  # tell ptyprocess not to waitpid() it again
        # What an ended command left is drained whatever the owner's lag: it is bounded
        # (the pipe and the terminal's buffer), and the call must end, not wait on it.
        self._room = None
        self._let_go()
        if self._eof:
            self._finish()
        else:
            self._handles.append(self._loop.call_later(_DRAIN_GRACE_S, self._drain_stalled))

    def _drain_stalled(self) -> None:
        """EOF is late after the group died: something else holds the terminal."""
        self._drain_stage += 1
        if self._drain_stage == 1:
            _kill_session(self.pgid)
            self._handles.append(self._loop.call_later(_DRAIN_GRACE_S, self._drain_stalled))
            return
        log.warning("exec %d: the terminal is still held open; closing it", self.pid)
        self._drain_now()
        self._finish()

    # -- stops --------------------------------------------------------------------------

    def _on_timeout(self) -> None:
        if self._ended_at is None:
            self._cause = self._cause or EndReason.TIMEOUT
            self._signal_group(signal.SIGKILL)

    def _escalate(self, sig: signal.Signals) -> None:
        if self._ended_at is None:
            self._signal_group(sig)

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    # -- output -------------------------------------------------------------------------

    def _on_readable(self) -> None:
        # What is ready (up to the budget) is handed on (framed, checked, queued) in one
        # piece: from the master that can be several 4 KiB reads, and the per-call work
        # is paid once per emptying rather than per read.
        budget, ended = _READ_BUDGET, False
        while budget > 0 and not ended:
            if self._room is not None and not self._room.ready():
                self._hold(self._room)
                return
            chunks, ended = self._read_available(budget)
            if not chunks:
                break
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            budget -= len(data)
            self._take(data)
        if ended:
            self._at_eof()

    def _read_available(self, budget: int) -> tuple[list[bytes], bool]:
        """What the terminal holds now (up to about ``budget`` bytes), and whether it ended."""
        fd, chunks = self._fd, list[bytes]()
        while budget > 0:
            try:
                data = os.read(fd, _CHUNK)
            except BlockingIOError:
                return chunks, False
            except OSError as exc:  # EIO: the buffer is empty and every slave fd is closed
                if exc.errno != errno.EIO:
                    log.warning("exec %d: reading the terminal failed: %s", self.pid, exc)
                return chunks, True
            if not data:
                return chunks, True
            chunks.append(data)
            budget -= len(data)
        return chunks, False

    def _take(self, data: bytes) -> None:
        self._total += len(data)
        limit = self._limits.output_limit
        if limit:
            tail = self._tail
            tail += data
            if len(tail) > 2 * limit:
                drop = len(tail) - limit
                self._in_key = _in_key_after(tail, drop, self._in_key)
                del tail[:drop]
        try:
            self._on_output(data)
        except Exception:
            # A broken consumer must neither stall the command nor lose the result.
            log.exception("exec %d: the output callback failed; live output stops", self.pid)
            self._on_output = _discard

    def _hold(self, room: OutputRoom) -> None:
        """Stop reading until ``room`` says so: the command fills the pipe and the
        terminal, then blocks on its write, as under a terminal that stopped reading."""
        self._stop_reading()
        self._held = self._loop.create_task(self._read_on(room))

    async def _read_on(self, room: OutputRoom) -> None:
        try:
            await room.wait()
        except Exception:  # a broken room must not leave the command blocked for good
            log.exception("exec %d: waiting for room to read failed; reading on", self.pid)
            # Asked again, it would say "no room" again and hold at once: a spin.
            self._room = None
        self._let_go()

    def _let_go(self) -> None:
        """Read again (at once, if the terminal holds something) after a hold."""
        held, self._held = self._held, None
        if held is None or self._done.done():
            return
        if held is not asyncio.current_task():
            held.cancel()
        self._read_from(self._fd)
        self._on_readable()

    def _drain_now(self) -> None:
        """Read what the terminal holds right now, without waiting for more."""
        if self._reading:
            self._on_readable()

    def _at_eof(self) -> None:
        self._stop_reading()
        if self._fd != self._master:
            # The relay's pipe ended: the terminal did, or the relay died. The master
            # says which (EOF at once, or what is still to come).
            os.close(self._fd)
            self._read_from(self._master)
            self._on_readable()
            return
        self._eof = True
        if self._ended_at is not None:
            self._finish()

    def _stop_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    # -- the end ------------------------------------------------------------------------

    def _finish(self) -> None:
        if self._done.done():
            return
        if self._held is not None:
            self._held.cancel()
            self._held = None
        self._cancel_handles()
        self._stop_reading()
        if self._fd != self._master:  # given up on: the terminal is held open elsewhere
            os.close(self._fd)
            self._fd = self._master
        self._stop_relay()
        # Close through ptyprocess's file object, which owns the descriptor, and mark it
        # closed so its __del__ neither closes a recycled fd number nor sleeps.
        self._child.fileobj.close()
        self._child.closed = True
        self._done.set_result(self._result())

    def _result(self) -> ExecResult:
        exit_code: int | None = None
        sig: int | None = None
        if self._status is not None:
            if os.WIFSIGNALED(self._status):
                sig = os.WTERMSIG(self._status)
            else:
                exit_code = os.waitstatus_to_exitcode(self._status)
        self._child.exitstatus, self._child.signalstatus = exit_code, sig
        reason = self._cause
        if reason is None:
            reason = (
                EndReason.CPU_LIMIT if self._hit_cpu_limit(exit_code, sig) else EndReason.EXITED
            )
        limit = self._limits.output_limit
        tail = bytes(self._tail[-limit:]) if limit else b""
        dropped = len(self._tail) - len(tail)
        in_key = _in_key_after(self._tail, dropped, self._in_key) if dropped else self._in_key
        ended = self._ended_at if self._ended_at is not None else time.monotonic()
        return ExecResult(
            exit_code=exit_code,
            signal=sig,
            reason=reason,
            duration_s=ended - self._started,
            total_bytes=self._total,
            tail=tail,
            truncated=self._total > len(tail),
            opens_in_key=in_key,
        )

    def _hit_cpu_limit(self, exit_code: int | None, sig: int | None) -> bool:
        cpu_s = self._limits.cpu_s
        if cpu_s is None:
            return False
        return (
            sig == signal.SIGXCPU
            or exit_code == 128 + signal.SIGXCPU  # the shell reporting a child's death
            or (sig == signal.SIGKILL and self._cpu_used >= math.ceil(cpu_s))
        )

    def _stop_relay(self) -> None:
        """Reap the relay, killing it first if it still reads (a terminal held open)."""
        relay, self._relay = self._relay, None
        if relay is None:
            return
        if relay.poll() is None:
            relay.kill()
        relay.wait()

    def _cancel_handles(self) -> None:
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()


_KEY_BEGIN = b"-----BEGIN"


def _in_key_after(buf: bytearray, end: int, was: bool) -> bool:
    """Whether output that was inside a private key block (``was``) or not, followed by
    ``buf[:end]``, ends inside one. An armour line cut at ``end`` counts as before it."""
    begin = buf.rfind(_KEY_BEGIN, 0, end + len(_KEY_BEGIN) - 1)
    close = buf.rfind(KEY_END, 0, end + len(KEY_END) - 1)
    if begin < 0 and close < 0:
        return was
    return begin > close and b"PRIVATE KEY" in buf[begin : begin + 64]


def _discard(_: bytes) -> None:
    pass


def _kill_session(sid: int) -> None:
    """``SIGKILL`` every process of session ``sid`` (Linux ``/proc``; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
            # After the command name: state, ppid, pgrp, session, ...
            session = int(stat.rsplit(b")", 1)[1].split()[3])
        except (OSError, IndexError, ValueError):
            continue
        if session == sid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


async def run_command(
    cmd: str,
    *,
    cwd: Path,
    limits: ExecLimits,
    on_output: OutputCallback,
    env: Mapping[str, str] | None = None,
) -> ExecResult:
    """Run ``cmd`` to its end (see :meth:`ExecProcess.start` for the arguments).

    If the awaiting task is cancelled, the command's whole group is killed and, within a
    few seconds at most, reaped and closed before the cancellation propagates.
    """
    proc = await ExecProcess.start(cmd, cwd=cwd, limits=limits, on_output=on_output, env=env)
    try:
        return await proc.wait()
    except asyncio.CancelledError:
        proc.kill()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(proc.wait(), _CANCEL_CLEANUP_S)
        raise
