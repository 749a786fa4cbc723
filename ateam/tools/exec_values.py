"""The values of one command run (``os.exec``): its limits, how it ended, what the model
is told of it, and the environment it gets (SPEC §5.5).

:mod:`ateam.tools.pty` runs the command; these are what it is given and gives back, so
the agent's configuration and the tool loop read them without the process machinery.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

__all__ = [
    "DEFAULT_LANG",
    "DEFAULT_TERM",
    "KEY_END",
    "EndReason",
    "ExecLimits",
    "ExecResult",
    "OutputRoom",
    "minimal_env",
]

DEFAULT_TERM: Final = "xterm-256color"
DEFAULT_LANG: Final = "C.UTF-8"
DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
_TERMINAL_VARS: Final = frozenset({"TERM", "COLUMNS", "LINES"})
KEY_END: Final = b"-----END"
"""The armour line that closes a private key block (PEM)."""


class OutputRoom(Protocol):
    """Whether a command's output may be read on (issue 28 §3): the agent's owner keeps up.

    The reader asks :meth:`ready` before each read; on False it stops reading the
    terminal (the command then blocks on its write, as in a terminal whose reader is
    behind) and reads on once :meth:`wait` returns. A command that has ended is drained
    without asking.
    """

    def ready(self) -> bool:
        """Whether reading may go on now; never blocks."""
        ...

    async def wait(self) -> None:
        """Return once reading may go on."""
        ...


class EndReason(StrEnum):
    """Why a command ended; the first cause wins."""

    EXITED = "exited"
    """It ended on its own: an exit status, or a signal nobody here sent (a crash)."""
    TIMEOUT = "timeout"
    """The wall-clock limit passed and the group was killed."""
    CPU_LIMIT = "cpu_limit"
    """A process exceeded the CPU-time limit (``SIGXCPU``)."""
    INTERRUPTED = "interrupted"
    """:meth:`ExecProcess.interrupt` was called."""
    KILLED = "killed"
    """:meth:`ExecProcess.kill` was called (or the awaiting task was cancelled)."""


@dataclass(frozen=True)
class ExecLimits:
    """How long and how much a command may run and what it sees (``exec`` in the config)."""

    timeout_s: float = 300.0
    """Wall-clock limit; when it passes the whole process group is killed."""
    cpu_s: float | None = None
    """CPU-time limit per process (``RLIMIT_CPU``), or ``None`` for none."""
    output_limit: int = 64 * 1024
    """How many of the last output bytes are kept for the model."""
    inherit_env: bool = False
    """Pass the agent's whole environment instead of the minimal one."""
    env_allow: tuple[str, ...] = ()
    """Names of variables passed through from the agent's environment."""

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, not {self.timeout_s}")
        if self.cpu_s is not None and not self.cpu_s > 0:
            raise ValueError(f"cpu_s must be positive, not {self.cpu_s}")
        if self.output_limit < 0:
            raise ValueError(f"output_limit must not be negative, not {self.output_limit}")


@dataclass(frozen=True)
class ExecResult:
    """How a command ended and the tail of what it printed."""

    exit_code: int | None
    """The shell's exit status; ``None`` when it was ended by a signal."""
    signal: int | None
    """The signal that ended the shell, if one did."""
    reason: EndReason
    """Why it ended: ``exited``, ``timeout``, ``cpu_limit``, ``interrupted`` or ``killed``."""
    duration_s: float
    """Wall-clock seconds from start until the shell ended."""
    total_bytes: int
    """Every byte of output, including those no longer in :attr:`tail`."""
    tail: bytes
    """The last ``output_limit`` bytes of output, exactly as written."""
    truncated: bool
    """Whether output was dropped from the front of :attr:`tail`."""
    opens_in_key: bool = False
    """Whether :attr:`tail` begins inside a private key block whose BEGIN line was
    dropped: its body up to its END line is masked in :meth:`text_for_model`."""

    @property
    def status_text(self) -> str:
        """``exit code N`` or ``terminated by signal SIGX``."""
        if self.signal is not None:
            return f"terminated by signal {_signal_name(self.signal)}"
        if self.exit_code is not None:
            return f"exit code {self.exit_code}"
        return "exit status unknown"

    def text_for_model(self) -> str:
        """The tail as text, with a truncation note first and how it ended last.

        Bytes that are not UTF-8 become U+FFFD; a character cut in two by the truncation
        is dropped rather than shown as garbage, and the body of a private key block
        whose BEGIN line was dropped is masked up to its END line.
        """
        tail = self.tail
        if self.truncated and self.opens_in_key:
            end = tail.find(KEY_END)
            tail = b"****\n" + (tail[end:] if end >= 0 else b"")
        elif self.truncated:
            cut = 0
            while cut < min(3, len(tail)) and 0x80 <= tail[cut] < 0xC0:  # continuation bytes
                cut += 1
            tail = tail[cut:]
        body = tail.decode("utf-8", errors="replace")
        lines = []
        if self.truncated:
            lines.append(
                f"[output truncated: showing the last {len(self.tail)} "
                f"of {self.total_bytes} bytes]\n"
            )
        if body:
            lines.append(body if body.endswith("\n") else body + "\n")
        lines.append(
            _END_LINES[self.reason].format(status=self.status_text, duration=self.duration_s)
        )
        return "".join(lines)


_END_LINES: Final[dict[EndReason, str]] = {
    EndReason.EXITED: "[{status}]",
    EndReason.TIMEOUT: "[timed out after {duration:.1f} s; process group killed; {status}]",
    EndReason.CPU_LIMIT: "[CPU time limit exceeded; {status}]",
    EndReason.INTERRUPTED: "[interrupted; {status}]",
    EndReason.KILLED: "[killed; {status}]",
}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def minimal_env(limits: ExecLimits, base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment a command gets (SPEC §5.5).

    ``PATH`` and ``HOME`` from ``base``, ``LANG`` from ``base`` or ``C.UTF-8``, ``TERM``,
    then every variable named in ``limits.env_allow`` that ``base`` has. With
    ``inherit_env`` it is all of ``base``, ``PATH`` and ``LANG`` filled in when missing.

    Either way ``TERM`` is ``xterm-256color`` and ``COLUMNS``/``LINES`` are dropped: they
    describe the terminal, and the terminal is the one made for the command (its size is
    set on the PTY), not the one the agent may have been started from.
    """
    if limits.inherit_env:
        env = {k: v for k, v in base.items() if k not in _TERMINAL_VARS}
        env.setdefault("PATH", DEFAULT_PATH)
        env.setdefault("LANG", DEFAULT_LANG)
        env["TERM"] = DEFAULT_TERM
        return env
    env = {"PATH": base.get("PATH") or DEFAULT_PATH}
    if "HOME" in base:
        env["HOME"] = base["HOME"]
    env["LANG"] = base.get("LANG") or DEFAULT_LANG
    env["TERM"] = DEFAULT_TERM
    for name in limits.env_allow:
        if name in base and name not in _TERMINAL_VARS:
            env[name] = base[name]
    return env
