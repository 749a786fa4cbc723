"""The built-in tools (SPEC §5.5): ``os.exec``, ``fs.*``, ``plan.*`` and ``agents.list``.

Each is a thin typed function over a component that does the real work — the PTY runner
(:mod:`ateam.tools.pty`), the file sandbox (:mod:`ateam.tools.fs`), the registry — so the
schema the model sees is generated from these signatures and their ``Args:`` sections.
What a tool returns is what the model reads, so results are small JSON-able values and
failures are typed :class:`~ateam.errors.AteamError` subclasses the task loop reports
with their stable code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ateam.agent.kb import check_scope
from ateam.agent.plan import append_plan, read_plan, write_plan
from ateam.agent.workctx import WorkingContext
from ateam.bus.context import ContextStore
from ateam.config.schema import Approval
from ateam.errors import BadRequest, FsDenied
from ateam.tools.approvals import Decision
from ateam.tools.fs import DEFAULT_LIST_ENTRIES, DEFAULT_READ_BYTES, Sandbox
from ateam.tools.pty import ExecLimits, ExecProcess, ExecResult
from ateam.tools.registry import Tool, ToolContext, ToolRegistry, default_timeout_for, tool

# The PTY runner enforces the command's own wall-clock limit and kills the process
# group itself; the registry's timeout is only a backstop far beyond any exec limit.
_EXEC_BACKSTOP_S = 7 * 24 * 3600.0
_FS_LIMIT_S = default_timeout_for("fs.patch")


def _sandbox(ctx: ToolContext) -> Sandbox:
    return ctx.sandbox if ctx.sandbox is not None else Sandbox(ctx.cwd)


def _plan_path(ctx: ToolContext) -> Path:
    if ctx.plan_path is None:
        raise BadRequest("this agent has no plan file")
    return ctx.plan_path


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
    process = await ExecProcess.start(
        cmd, cwd=workdir, limits=limits, on_output=ctx.on_output or _discard
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
def fs_read(ctx: ToolContext, path: str, max_bytes: int = DEFAULT_READ_BYTES) -> dict[str, Any]:
    """Read a file inside the sandbox; returns its content and the sha256 fs.patch needs.

    Args:
        path: File path, relative to the working directory.
        max_bytes: Return at most this many bytes of the file.
    """
    return dataclasses.asdict(_sandbox(ctx).read(path, max_bytes=max_bytes))


@tool("fs.list")
def fs_list(
    ctx: ToolContext, path: str = ".", max_entries: int = DEFAULT_LIST_ENTRIES
) -> dict[str, Any]:
    """List a directory inside the sandbox (name, type and size of each entry).

    Args:
        path: Directory path, relative to the working directory.
        max_entries: Return at most this many entries.
    """
    return dataclasses.asdict(_sandbox(ctx).list(path, max_entries=max_entries))


@tool("fs.write")
def fs_write(ctx: ToolContext, path: str, content: str) -> dict[str, Any]:
    """Create or replace a file inside the sandbox, atomically.

    Args:
        path: File path, relative to the working directory.
        content: The whole new content.
    """
    return {"path": path, "sha256": _sandbox(ctx).write(path, content)}


# The owner may take minutes over a diff; the file work itself keeps the fs.* limit.
@tool("fs.patch", self_approving=True, timeout_s=_EXEC_BACKSTOP_S)
async def fs_patch(ctx: ToolContext, path: str, content: str, base_sha256: str) -> dict[str, Any]:
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


@tool("plan.read")
def plan_read(ctx: ToolContext) -> str:
    """Read the agent's plan (plan.md); empty when there is none yet."""
    return read_plan(_plan_path(ctx))


@tool("plan.write")
def plan_write(ctx: ToolContext, content: str) -> dict[str, Any]:
    """Replace the agent's plan (plan.md) with new content.

    Args:
        content: The whole plan, Markdown.
    """
    return {"bytes": _plan_op(write_plan, ctx, content)}


@tool("plan.append")
def plan_append(ctx: ToolContext, text: str) -> dict[str, Any]:
    """Append text (a step, a note) to the agent's plan (plan.md).

    Args:
        text: What to add; a newline is added when missing.
    """
    return {"bytes": _plan_op(append_plan, ctx, text)}


def _plan_op(op: Callable[[Path, str], int], ctx: ToolContext, text: str) -> int:
    try:
        return op(_plan_path(ctx), ctx.redact(text))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


@tool("agents.list", timeout_s=5.0)
async def agents_list(ctx: ToolContext) -> list[dict[str, Any]]:
    """List the running agents of the team: id, state, model, working directory, queue."""
    if ctx.list_agents is None:
        raise BadRequest("the agent registry is not available")
    return await ctx.list_agents()


def _memory(ctx: ToolContext) -> WorkingContext:
    if ctx.memory is None:
        raise BadRequest("this agent keeps no working context")
    return ctx.memory


def _context_items(ctx: ToolContext) -> tuple[ContextStore, str]:
    if ctx.context_items is None:
        raise BadRequest("the team's context items are not available")
    return ctx.context_items, ctx.agent_id.split("/", 1)[0]


@tool("context.post", timeout_s=5.0)
async def context_post(
    ctx: ToolContext,
    type: str,
    title: str,
    content: str = "",
    urgency: str = "background",
    scope: str = "project",
    tags: list[str] | None = None,
) -> dict[str, Any]:
    """Share something with the team: a discovery, decision, status, request or alert.

    Args:
        type: discovery, decision, status, request or alert.
        title: One line.
        content: The details.
        urgency: background, attention (consoles show a banner) or blocking (a banner and
            a bell: someone must act).
        scope: task, project or global (every project).
        tags: Short labels others can filter on.
    """
    store, project = _context_items(ctx)
    item = await store.post(
        project,
        type=type,
        title=title,
        content=content,
        urgency=urgency,
        scope=scope,
        tags=tuple(tags or ()),
        source_agent=ctx.agent_id,
    )
    return {"id": item.id, "expires_at": item.expires_at}


@tool("context.read", timeout_s=5.0)
async def context_read(ctx: ToolContext, query: str = "", limit: int = 10) -> list[dict[str, Any]]:
    """Read the team's recent context items, newest first; with a query, only matching ones.

    Args:
        query: Words that must all appear (title, summary, content or tags).
        limit: At most this many items.
    """
    store, project = _context_items(ctx)
    limit = max(1, min(limit, 50))
    items = (
        await store.search(project, query, limit=limit)
        if query.strip()
        else await store.list(project, limit=limit)
    )
    return [item.to_wire() for item in items]


@tool("kb.search")
async def kb_search(
    ctx: ToolContext, query: str, scope: str = "agent", k: int = 8
) -> list[dict[str, Any]]:
    """Search a knowledge base for passages about the query, best first.

    Args:
        query: What to look for, in words.
        scope: agent (this agent's notes), project (shared by the project) or user.
        k: At most this many passages.
    """
    if ctx.kb is None:
        raise BadRequest("this agent has no knowledge base")
    return await ctx.kb.search(check_scope(scope), query, k=max(1, min(k, 20)))


@tool("kb.ingest")
async def kb_ingest(ctx: ToolContext, paths: list[str], scope: str = "agent") -> dict[str, Any]:
    """Add files and directories to a knowledge base, so kb.search can find them later.

    Directories expand to their text and source files; a file whose content is already
    stored is skipped, and one ingested before with other content replaces its old
    version. Only paths inside the working directory and fs.whitelist are accepted.

    Args:
        paths: Files or directories (at most 512 files in all), relative to the working
            directory.
        scope: agent (this agent's notes), project (shared by the project) or user.
    """
    if ctx.kb is None:
        raise BadRequest("this agent has no knowledge base")
    if not paths:
        raise BadRequest("name at least one file or directory to ingest")
    # AgentKb.ingest confines every path to the sandbox (kb.ingest.denied otherwise).
    return await ctx.kb.ingest(check_scope(scope), paths)


@tool("memory.decide")
def memory_decide(
    ctx: ToolContext, decision: str, rationale: str = "", impact: str = ""
) -> dict[str, Any]:
    """Record a key decision so it survives summaries, restarts and model switches.

    Args:
        decision: What was decided, in one sentence.
        rationale: Why.
        impact: What it changes or constrains.
    """
    memory = _memory(ctx)
    try:
        memory.add_decision(decision, rationale=rationale, impact=impact, task=ctx.task_id)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return {"decisions": len(memory.decisions())}


@tool("memory.failure")
def memory_failure(
    ctx: ToolContext,
    description: str,
    root_cause: str = "",
    resolution: str = "",
    prevention: str = "",
    severity: str = "medium",
) -> dict[str, Any]:
    """Record a failure and what it taught, so the next model (after a switch) knows.

    Args:
        description: What went wrong.
        root_cause: Why, when known.
        resolution: How it was fixed, when it was.
        prevention: How to avoid it next time.
        severity: low, medium, high or critical.
    """
    memory = _memory(ctx)
    try:
        memory.add_failure(
            description,
            root_cause=root_cause,
            resolution=resolution,
            prevention=prevention,
            severity=severity,
            task=ctx.task_id,
        )
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return {"failures": len(memory.failures())}


@tool("memory.constrain")
def memory_constrain(
    ctx: ToolContext, text: str, expires_in_s: float | None = None
) -> dict[str, Any]:
    """Record a constraint every later turn must respect (e.g. "do not touch api/v1").

    Args:
        text: The constraint.
        expires_in_s: Forget it after this many seconds; it stays until removed if unset.
    """
    memory = _memory(ctx)
    expires = time.time() + expires_in_s if expires_in_s is not None else None
    try:
        memory.add_constraint(text, expires=expires)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return {"constraints": len(memory.constraints())}


BUILTIN_TOOLS: tuple[Tool, ...] = (
    os_exec,
    fs_read,
    fs_list,
    fs_write,
    fs_patch,
    plan_read,
    plan_write,
    plan_append,
    agents_list,
    memory_decide,
    memory_failure,
    memory_constrain,
    context_post,
    context_read,
    kb_search,
    kb_ingest,
)


def default_registry(*, plugins: bool = True) -> tuple[ToolRegistry, list[str]]:
    """The built-ins plus, unless ``plugins`` is false, the ``ateam.tools`` entry points."""
    registry = ToolRegistry(BUILTIN_TOOLS)
    warnings = registry.load_entry_points() if plugins else []
    return registry, warnings
