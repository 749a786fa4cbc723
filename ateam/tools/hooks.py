"""Quality-gate hooks (issue 26): one shell command that judges one step of the team's work.

A hook is a command string from ``hooks:`` in ``project.yaml`` or ``agent.yaml``. It is
run with ``/bin/sh -c`` in the agent's working directory, the event as one JSON object on
its stdin, and says what it thinks by its exit status:

======  ==========================================================================
0       accepted: the step goes on
2       refused: the step does not happen; the hook's stderr is the feedback, and it
        goes back to the model (or the person) as it is
other   failed: the hook could not judge (a crash, a command not found, a timeout);
        reported, never a refusal, so a broken gate does not hold the work hostage
======  ==========================================================================

Design choices, each with its reason:

* **The environment of ``os.exec``.** A hook gets :func:`~ateam.tools.exec_values.minimal_env`
  of the agent's exec limits: the same policy as the commands the model runs, so a
  secret the agent keeps from its tools is kept from its hooks too, and one setting
  (``exec.inherit_env``, ``exec.env_allow``) governs both.
* **Its own process group.** A timeout kills the whole group, so a test runner's
  children do not outlive the hook that started them.
* **Bounded output.** Only the last :data:`FEEDBACK_LIMIT` characters of stderr are kept:
  a refusal is read by a model, whose context is not a log file. Stderr is read as it
  comes and only its tail held, so a hook that writes megabytes costs the agent a few
  kilobytes. Stdout is not read for the verdict and is dropped, so a chatty test suite
  costs nothing.
* **Bounded input.** Each string of the event longer than :data:`EVENT_STRING_LIMIT`
  characters is clipped (its head kept, and how much was cut said): a ``before_tool``
  event carries the tool's arguments, and a file written whole is no gate's business
  in full.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from ateam.config.schema import ExecSpec, HooksSpec
from ateam.errors import GateRefused, HookFailed
from ateam.tools.exec_values import ExecLimits, minimal_env

__all__ = [
    "EVENT_STRING_LIMIT",
    "FEEDBACK_LIMIT",
    "REFUSE_EXIT",
    "Hook",
    "HookRun",
    "HookRunner",
    "Verdict",
    "hook_limits",
    "run_command",
]

REFUSE_EXIT: Final = 2
"""The exit status that refuses (the convention of git's and Claude Code's hooks)."""
FEEDBACK_LIMIT: Final = 4000
"""Characters of a hook's stderr kept as its feedback (the last ones)."""
EVENT_STRING_LIMIT: Final = 16_000
"""Characters of one string of the event on a hook's stdin (the first ones)."""
_SHELL: Final = "/bin/sh"
_KEPT_BYTES: Final = 4 * FEEDBACK_LIMIT + 4
"""Bytes of stderr held: enough for :data:`FEEDBACK_LIMIT` characters of any UTF-8."""
_READ_BYTES: Final = 64 * 1024


class Hook(StrEnum):
    """The steps a hook can judge, named as ``hooks:`` names them."""

    TASK_CREATED = "task_created"
    TASK_DONE = "task_done"
    AGENT_IDLE = "agent_idle"
    BEFORE_TOOL = "before_tool"


class Verdict(StrEnum):
    """What a hook run said."""

    ACCEPTED = "accepted"
    REFUSED = "refused"
    FAILED = "failed"


@dataclass(frozen=True)
class HookRun:
    """One run of one hook: its verdict and what it said."""

    hook: Hook
    verdict: Verdict
    exit_code: int | None
    """The exit status; ``None`` when it did not exit on its own (a timeout, no start)."""
    ms: int
    """Wall-clock milliseconds, start to end."""
    feedback: str
    """The tail of its stderr (a refusal's reason); for a failure without any, why it failed."""

    @property
    def refused(self) -> bool:
        return self.verdict is Verdict.REFUSED

    @property
    def failed(self) -> bool:
        return self.verdict is Verdict.FAILED

    def refusal(self) -> GateRefused:
        """The error a refused step raises, the feedback as its message."""
        return GateRefused(
            f"{self.hook} hook refused: {self.feedback}",
            detail={"hook": str(self.hook), "feedback": self.feedback},
        )

    def failure(self) -> HookFailed:
        """The error a failed run is reported as (a ``warn``, never raised at the step)."""
        return HookFailed(
            f"{self.hook} hook failed ({self.feedback}); the step goes on",
            detail={"hook": str(self.hook), "exit": self.exit_code},
        )

    def to_wire(self) -> dict[str, Any]:
        """The fields of its ``hook.run`` event."""
        return {
            "hook": str(self.hook),
            "exit": self.exit_code,
            "ms": self.ms,
            "refused": self.refused,
            "failed": self.failed,
            "feedback": self.feedback,
        }


def hook_limits(spec: ExecSpec, passthrough: tuple[str, ...] = ()) -> ExecLimits:
    """The environment policy of ``spec`` (``exec`` of the configuration), as hooks get it."""
    return ExecLimits(inherit_env=spec.inherit_env, env_allow=(*spec.env_allow, *passthrough))


class HookRunner:
    """Runs the configured hooks of one agent (or one project) in one directory.

    Args:
        spec: The effective ``hooks`` section.
        cwd: Where each hook runs: the agent's working directory, or the project root.
        limits: The environment policy (and only that) of the agent's ``os.exec``.
    """

    def __init__(self, spec: HooksSpec, *, cwd: Path, limits: ExecLimits) -> None:
        self.spec = spec
        self._cwd = cwd
        self._limits = limits

    def command(self, hook: Hook) -> str | None:
        """The command configured for ``hook``; ``None`` (or empty) when there is none."""
        value: str | None = getattr(self.spec, hook.value)
        return value if value and value.strip() else None

    async def run(
        self, hook: Hook, event: Mapping[str, Any], *, cwd: Path | None = None
    ) -> HookRun | None:
        """Run ``hook`` on ``event``; ``None`` when it is not configured (nothing ran).

        ``cwd``: where to run it instead of the runner's directory (a task's worktree).
        """
        command = self.command(hook)
        if command is None:
            return None
        payload = _clipped({"hook": str(hook), **event})
        data = (json.dumps(payload, ensure_ascii=False, default=str) + "\n").encode()
        return await run_command(
            hook,
            command,
            data,
            cwd=cwd or self._cwd,
            env=minimal_env(self._limits),
            timeout_s=self.spec.timeout_s,
        )


async def run_command(
    hook: Hook,
    command: str,
    stdin: bytes,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
) -> HookRun:
    """Run one hook command to its verdict; never raises for what the command does."""
    started = time.monotonic()

    def ended(verdict: Verdict, code: int | None, feedback: str) -> HookRun:
        ms = int((time.monotonic() - started) * 1000)
        return HookRun(hook, verdict, code, ms, feedback)

    try:
        proc = await asyncio.create_subprocess_exec(
            _SHELL,
            "-c",
            command,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own group: a timeout ends its children too
        )
    except OSError as exc:  # the working directory is gone, or no shell: cannot judge
        return ended(Verdict.FAILED, None, f"could not start: {exc.strerror or exc}")
    try:
        async with asyncio.timeout(timeout_s):
            # Both at once: a hook that writes stderr before reading stdin must not wait
            # on us while we wait on it.
            _, err, _ = await asyncio.gather(_feed(proc, stdin), _read_tail(proc), proc.wait())
    except TimeoutError:
        _kill_group(proc.pid)
        await proc.wait()
        return ended(Verdict.FAILED, None, f"timed out after {timeout_s:g} s and was killed")
    except asyncio.CancelledError:
        _kill_group(proc.pid)
        raise
    code = proc.returncode
    feedback = _tail(err)
    if code == 0:
        return ended(Verdict.ACCEPTED, code, feedback)
    if code == REFUSE_EXIT:
        return ended(Verdict.REFUSED, code, feedback or f"refused by the {hook} hook")
    why = f"exit {code}" if code is not None and code >= 0 else f"signal {-(code or 0)}"
    return ended(Verdict.FAILED, code, f"{why}: {feedback}" if feedback else why)


def _kill_group(pid: int) -> None:
    # Gone already (it ended as the timer fired) is fine: nothing is left to end.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    # A hook that does not read its stdin (or exits early) is fine: it needs no event.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data)
        await proc.stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.close()
        await proc.stdin.wait_closed()


async def _read_tail(proc: asyncio.subprocess.Process) -> bytes:
    """All of stderr read, its last :data:`_KEPT_BYTES` held."""
    assert proc.stderr is not None
    kept = b""
    while chunk := await proc.stderr.read(_READ_BYTES):
        kept = (kept + chunk)[-_KEPT_BYTES:]
    return kept


def _clipped(value: Any) -> Any:
    """``value`` with every string longer than :data:`EVENT_STRING_LIMIT` clipped."""
    if isinstance(value, str) and len(value) > EVENT_STRING_LIMIT:
        cut = len(value) - EVENT_STRING_LIMIT
        return f"{value[:EVENT_STRING_LIMIT]}… [{cut} more characters clipped]"
    if isinstance(value, Mapping):
        return {key: _clipped(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clipped(item) for item in value]
    return value


def _tail(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= FEEDBACK_LIMIT else "…" + text[-FEEDBACK_LIMIT:]
