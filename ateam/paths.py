"""Where ateam keeps per-user files: ``~/.ateam`` (or ``$ATEAM_HOME``) and a runtime dir."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def ateam_home() -> Path:
    """The per-user ateam directory; ``ATEAM_HOME`` overrides ``~/.ateam``."""
    override = os.environ.get("ATEAM_HOME")
    return Path(override).expanduser() if override else Path.home() / ".ateam"


def runtime_dir() -> Path:
    """A private (0700) per-user directory for sockets; kept short for AF_UNIX limits."""
    override = os.environ.get("ATEAM_RUNTIME_DIR")
    if override:
        base = Path(override)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        base = Path(os.environ["XDG_RUNTIME_DIR"]) / "ateam"
    else:
        base = Path(tempfile.gettempdir()) / f"ateam-{os.getuid()}"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(base, 0o700)
    return base


def runtime_dir_source() -> str:
    """What decides :func:`runtime_dir` in this environment, for ``ateam server status``."""
    for name in ("ATEAM_RUNTIME_DIR", "XDG_RUNTIME_DIR"):
        if os.environ.get(name):
            return name
    return tempfile.gettempdir()


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) readable only by the user."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path
