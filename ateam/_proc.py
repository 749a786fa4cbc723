"""Process liveness, shared by the lock takeover, the embedded server and the supervisor."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pid_is_running", "pid_is_stopped"]


def pid_is_running(pid: int) -> bool:
    """Whether ``pid`` is a live process on this host (zombies count as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        # Field 3 is the state; a zombie has exited and only awaits its parent's wait().
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def pid_is_stopped(pid: int) -> bool:
    """Whether ``pid`` is frozen: stopped by a signal (SIGSTOP, ^Z) or by a debugger.

    Where ``/proc`` does not say (not Linux), ``False``: the process counts as running.
    """
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in {"T", "t"}
