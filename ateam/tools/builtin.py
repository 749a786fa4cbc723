"""The built-in workspace tools (SPEC §5.5): ``os.exec`` and ``fs.*``.

Each is a thin typed function over a component that does the real work — the PTY runner
(:mod:`ateam.tools.pty`), the file sandbox (:mod:`ateam.tools.fs`) — so the schema the
model sees is generated from these signatures and their ``Args:`` sections. The tools
over the agent's own state (plan, memory, context items, knowledge bases, the team) live
with the agent, in :mod:`ateam.agent.native.tools`, which also assembles the full built-in list.
What a tool returns is what the model reads, so results are small JSON-able values and
failures are typed :class:`~ateam.errors.AteamError` subclasses the task loop reports
with their stable code.
"""

from __future__ import annotations

import asyncio
import dataclasses

from ateam._json import JsonObject
from ateam.config.schema import Approval
from ateam.errors import BadRequest, FsDenied
from ateam.tools.approvals import Decision
from ateam.tools.exec_values import ExecLimits, ExecResult
from ateam.tools.fs import DEFAULT_LIST_ENTRIES, DEFAULT_READ_BYTES, Sandbox
from ateam.tools.registry import Tool, ToolContext, default_timeout_for, tool

__all__ = ["WORKSPACE_TOOLS", "fs_list", "fs_patch", "fs_read", "fs_write", "os_exec"]

# The PTY runner enforces the command's own wall-clock limit and kills the process
# group itself; the registry's timeout is only a backstop far beyond any exec limit.
_EXEC_BACKSTOP_S = 7 * 24 * 3600.0
_FS_LIMIT_S = default_timeout_for("fs.patch")


def _sandbox(ctx: ToolContext) -> Sandbox:
    return ctx.sandbox if ctx.sandbox is not None else Sandbox(ctx.cwd)


@tool("os.exec", timeout_s=_EXEC_BACKSTOP_S)
async def os_exec(
    ctx: ToolContext, cmd: str, timeout: float | None = None, cwd: str | None = None
) -> ExecResult:
    """Run a shell command in a pseudo-terminal and return its exit status and output.

    The command runs with /bin/sh in its own process group; output streams live to the
    console, and the last part of it (64 KiB by default) is returned.

    Args:
        cmd: The shell command line.
        timeout: Wall-clock limit in seconds (at most the agent's configured limit).
        cwd: Working directory, relative to the agent's working directory.
    """
    base = ctx.exec_limits or ExecLimits()
    limits = base
    if timeout is not None:
        if timeout <= 0:
            raise BadRequest("timeout must be positive")
        limits = dataclasses.replace(base, timeout_s=min(timeout, base.timeout_s))
    workdir = ctx.cwd
    if cwd is not None:
        workdir = _sandbox(ctx).resolve(cwd)
        if not workdir.is_relative_to(ctx.cwd.resolve()):
            raise FsDenied(f"cwd {cwd!r} is outside the agent's working directory")
    # Imported at the first command: the PTY machinery is most of what os.exec costs an
    # agent's start, and many agents never run one.
    from ateam.tools.pty import ExecProcess

    process = await ExecProcess.start(
        cmd,
        cwd=workdir,
        limits=limits,
        on_output=ctx.on_output or _discard,
        room=ctx.output_room,  # held while the owning console is too far behind
    )
    if ctx.track is not None:
        ctx.track(process)
    try:
        result = await process.wait()
    except BaseException:
        process.kill()  # cancelled (hard cancel, shutdown): nothing of the group survives
        raise
    finally:
        if ctx.track is not None:
            ctx.track(None)
    return result  # the loop reports exit_code and hands text_for_model() to the model


def _discard(_: bytes) -> None:
    pass


@tool("fs.read")
def fs_read(ctx: ToolContext, path: str, max_bytes: int = DEFAULT_READ_BYTES) -> JsonObject:
    """Read a file inside the sandbox; returns its content and the sha256 fs.patch needs.

    Args:
        path: File path, relative to the working directory.
        max_bytes: Return at most this many bytes of the file.
    """
    return dataclasses.asdict(_sandbox(ctx).read(path, max_bytes=max_bytes))


@tool("fs.list")
def fs_list(
    ctx: ToolContext, path: str = ".", max_entries: int = DEFAULT_LIST_ENTRIES
) -> JsonObject:
    """List a directory inside the sandbox (name, type and size of each entry).

    Args:
        path: Directory path, relative to the working directory.
        max_entries: Return at most this many entries.
    """
    return dataclasses.asdict(_sandbox(ctx).list(path, max_entries=max_entries))


@tool("fs.write")
def fs_write(ctx: ToolContext, path: str, content: str) -> JsonObject:
    """Create or replace a file inside the sandbox, atomically.

    Args:
        path: File path, relative to the working directory.
        content: The whole new content.
    """
    return {"path": path, "sha256": _sandbox(ctx).write(path, content)}


# The owner may take minutes over a diff; the file work itself keeps the fs.* limit.
@tool("fs.patch", self_approving=True, timeout_s=_EXEC_BACKSTOP_S)
async def fs_patch(ctx: ToolContext, path: str, content: str, base_sha256: str) -> JsonObject:
    """Propose new content for an existing text file; the owner sees a diff and decides.

    The change is applied only if the file still has the sha256 returned by fs.read.

    Args:
        path: File path, relative to the working directory.
        content: The whole proposed new content of the file.
        base_sha256: The sha256 fs.read returned for the version this change is based on.
    """
    sandbox = _sandbox(ctx)
    async with asyncio.timeout(_FS_LIMIT_S):
        proposal = await asyncio.to_thread(
            sandbox.propose_patch, path, content, based_on_sha=base_sha256
        )
    decision, edited = Decision.APPROVE, None
    if ctx.approval is Approval.ASK:
        if ctx.ask is None:
            raise BadRequest("fs.patch needs an owner's approval, and nobody can be asked")
        answer = await ctx.ask(
            "diff",
            {
                "path": proposal.path,
                "diff": proposal.diff,
                "patch_id": proposal.id,
                "new_content": proposal.new_content,
            },
        )
        decision, edited = answer.decision, answer.content
        if decision is Decision.REJECT:
            why = f" ({answer.reason})" if answer.reason else ""
            who = "the owner rejected the change" if answer.by else "not applied"
            return {
                "path": proposal.path,
                "applied": False,
                "rejected": True,
                "result": f"{who}{why}; the file is unchanged",
            }
    if decision is Decision.EDIT and edited is not None:
        sha = await asyncio.to_thread(sandbox.apply_edited, proposal, edited)
        return {
            "path": proposal.path,
            "applied": True,
            "decision": "edited by owner",
            "sha256": sha,
        }
    sha = await asyncio.to_thread(sandbox.apply_patch, proposal)
    return {"path": proposal.path, "applied": True, "decision": "applied", "sha256": sha}


WORKSPACE_TOOLS: tuple[Tool, ...] = (os_exec, fs_read, fs_list, fs_write, fs_patch)
"""The tools over the agent's workspace: its commands and its files."""
