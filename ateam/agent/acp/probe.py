"""What ``ateam runtimes`` says of each configured runtime: found or not, and what it is.

For a runtime whose command is on ``PATH`` the probe starts it once, with the agent's
environment policy, asks ``initialize`` (its name, version, protocol and the logins it
offers) and stops it: the same start an agent makes, so what the probe says is what an
agent would meet. No session is opened and nothing is sent to a model.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ateam.agent.acp.catalog import find_command, install_hint, known_for, login_hint, runtime_env
from ateam.agent.acp.provider import probe_client
from ateam.agent.acp.session import RuntimeSession
from ateam.config.schema import ModelEntry
from ateam.errors import AteamError
from ateam.tools.exec_values import ExecLimits

__all__ = ["RuntimeReport", "probe_runtime", "probe_runtimes"]

PROBE_TIMEOUT_S = 15.0


@dataclass
class RuntimeReport:
    """One runtime, as ``ateam runtimes`` prints it (``--json``: :meth:`to_wire`)."""

    id: str
    command: list[str]
    found: str | None
    """The executable, or ``None`` when the command is not on ``PATH``."""
    install: str
    login: str
    known: bool
    version: str | None = None
    name: str | None = None
    protocol_version: int | None = None
    auth_methods: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    """Why it could not be asked (it is missing, it hung, it crashed ...)."""

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "command": self.command,
            "found": self.found is not None,
            "path": self.found,
            "version": self.version,
            "name": self.name,
            "protocol_version": self.protocol_version,
            "auth_methods": self.auth_methods,
            "install": self.install,
            "login": self.login,
            "known": self.known,
            "error": self.error,
        }


async def probe_runtime(
    entry: ModelEntry, *, cwd: Path, limits: ExecLimits, timeout_s: float = PROBE_TIMEOUT_S
) -> RuntimeReport:
    env = runtime_env(entry, limits)
    report = RuntimeReport(
        id=entry.id,
        command=list(entry.command or ()),
        found=find_command(entry, env),
        install=install_hint(entry),
        login=login_hint(entry),
        known=known_for(entry) is not None,
    )
    if report.found is None:
        report.error = "runtime.missing: not on PATH"
        return report
    session = RuntimeSession(
        entry, probe_client(entry.id, cwd, limits), env=env, cwd=cwd, state_dir=None
    )
    session.init_timeout_s = min(session.init_timeout_s, timeout_s)
    try:
        info = await session.start()
    except AteamError as exc:
        report.error = f"{exc.code}: {exc.message}"
        return report
    finally:
        await session.stop()
    report.version, report.name = info.version, info.name
    report.protocol_version = info.protocol_version
    report.auth_methods = info.auth_methods
    return report


async def probe_runtimes(
    entries: list[ModelEntry], *, cwd: Path, limits: ExecLimits
) -> list[RuntimeReport]:
    """Every entry probed at once (each a process of its own)."""
    return list(await asyncio.gather(*(probe_runtime(e, cwd=cwd, limits=limits) for e in entries)))
