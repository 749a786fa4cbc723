"""The built-in tools over the agent's own state (SPEC §5.5): plan, memory, context, kb, agents.

``plan.*`` edits the agent's ``plan.md``; ``memory.*`` writes its working context (SPEC
§8); ``context.*`` posts and reads the team's context items (SPEC §9); ``tasks.*`` adds,
claims and finishes tasks of the team's board (issue 12); ``kb.*`` searches
and fills its knowledge bases (SPEC §10); ``agents.list`` reads the live registry and
``team.send`` queues work at a teammate. Each
reaches that state through the :class:`~ateam.tools.registry.ToolContext` the agent fills
in, whose fields are the protocols of :mod:`ateam.tools.services`, so the tools package never
imports the agent. :data:`BUILTIN_TOOLS` is every built-in tool, the workspace ones of
:mod:`ateam.tools.builtin` included: the list the configuration and the wizard check
tool names against, and :func:`default_registry` the registry an agent starts from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ateam._json import JsonObject
from ateam.agent.native.plan_tools import PLAN_REVIEW_TOOLS
from ateam.agent.state.knowledge import check_scope
from ateam.agent.state.plan import append_plan, read_plan, write_plan
from ateam.errors import BadRequest
from ateam.tools.builtin import WORKSPACE_TOOLS
from ateam.tools.registry import Tool, ToolContext, ToolRegistry, tool
from ateam.tools.services import ContextItems, Memory, TaskBoardPort

__all__ = ["BUILTIN_TOOLS", "STATE_TOOLS", "default_registry"]


def _plan_path(ctx: ToolContext) -> Path:
    if ctx.plan_path is None:
        raise BadRequest("this agent has no plan file")
    return ctx.plan_path


@tool("plan.read")
def plan_read(ctx: ToolContext) -> str:
    """Read the agent's plan (plan.md); empty when there is none yet."""
    return read_plan(_plan_path(ctx))


@tool("plan.write")
def plan_write(ctx: ToolContext, content: str) -> JsonObject:
    """Replace the agent's plan (plan.md) with new content.

    Args:
        content: The whole plan, Markdown.
    """
    return {"bytes": _plan_op(write_plan, ctx, content)}


@tool("plan.append")
def plan_append(ctx: ToolContext, text: str) -> JsonObject:
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
async def agents_list(ctx: ToolContext) -> list[JsonObject]:
    """List the running agents of the team: id, state, model, working directory, queue."""
    if ctx.list_agents is None:
        raise BadRequest("the agent registry is not available")
    return await ctx.list_agents()


@tool("team.send", timeout_s=15.0)
async def team_send(ctx: ToolContext, to: str, text: str, reply: bool = False) -> JsonObject:
    """Give a teammate (another agent of this project) work: queue text as its next task.

    It arrives in the teammate's durable queue marked as coming from you. Use it to
    hand off a piece of work, not to chat: each thread may pass between agents only a
    few times (team.max_hops). A teammate that is not running gets it when it starts
    (the result says mailbox: true).

    Args:
        to: The teammate's name (or project/name), as agents.list shows it.
        text: The task, complete enough to do without asking back.
        reply: Have the teammate's final answer sent back to you as a new input, so you
            can go on meanwhile.
    """
    if ctx.teammates is None:
        raise BadRequest("this agent cannot reach its teammates (no bus)")
    return await ctx.teammates.send(
        to, ctx.redact(text), hops=ctx.hops + 1, trace_id=ctx.trace_id, reply=reply
    )


@tool("team.broadcast", timeout_s=20.0)
async def team_broadcast(ctx: ToolContext, text: str) -> JsonObject:
    """Queue the same text at every running teammate (not you); each answers for itself.

    Args:
        text: What every teammate should read or do.
    """
    if ctx.teammates is None:
        raise BadRequest("this agent cannot reach its teammates (no bus)")
    return await ctx.teammates.broadcast(ctx.redact(text), hops=ctx.hops + 1, trace_id=ctx.trace_id)


def _memory(ctx: ToolContext) -> Memory:
    if ctx.memory is None:
        raise BadRequest("this agent keeps no working context")
    return ctx.memory


def _context_items(ctx: ToolContext) -> tuple[ContextItems, str]:
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
) -> JsonObject:
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


@tool("context.search", timeout_s=10.0)
async def context_search(ctx: ToolContext, query: str, limit: int = 10) -> list[JsonObject]:
    """Find what the team shared about something: context items ranked by meaning.

    Args:
        query: What you are looking for, in a few words.
        limit: At most this many items, best match first.
    """
    store, project = _context_items(ctx)
    items = await store.search(project, query, limit=max(1, min(limit, 50)))
    return [item.to_wire() for item in items]


@tool("context.read", timeout_s=5.0)
async def context_read(ctx: ToolContext, query: str = "", limit: int = 10) -> list[JsonObject]:
    """Read the team's recent context items, newest first; with a query, the best matches.

    Args:
        query: What to look for; items are then ranked by meaning, as context.search does.
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


def _board(ctx: ToolContext) -> tuple[TaskBoardPort, str]:
    if ctx.board is None:
        raise BadRequest("the team's task board is not available")
    return ctx.board, ctx.agent_id.split("/", 1)[0]


@tool("tasks.list", timeout_s=5.0)
async def tasks_list(ctx: ToolContext, status: str = "", limit: int = 50) -> list[JsonObject]:
    """List the project's task board, highest priority first, then oldest first. An open
    task's blocked_by names its dependencies not done yet (failed ones marked).

    Args:
        status: open, claimed, done or failed; every task when empty.
        limit: At most this many tasks.
    """
    board, project = _board(ctx)
    tasks = await board.list(project, status=status or None)
    rows = [task.to_wire() for task in tasks[: max(1, min(limit, 200))]]
    # An open task says what it waits for, judged from the whole board, whatever is shown.
    state = {row["id"]: row["status"] for row in (t.to_wire() for t in await board.list(project))}
    for row in rows:
        depends = row["depends_on"]
        if row["status"] == "open" and isinstance(depends, list):
            pending = [d for d in depends if isinstance(d, str) and state.get(d) != "done"]
            row["blocked_by"] = [{"id": d, "failed": state.get(d) == "failed"} for d in pending]
    return rows


# Bounded by the task_created hook it may run (hooks.timeout_s, at most 3600 s).
@tool("tasks.add", timeout_s=3605.0)
async def tasks_add(
    ctx: ToolContext,
    title: str,
    detail: str = "",
    priority: int = 0,
    depends_on: list[str] | None = None,
    require_plan: bool = False,
) -> JsonObject:
    """Put a task on the project's board for any teammate (or you) to claim.

    Args:
        title: One line saying what is to be done.
        detail: What a teammate needs to do it without asking back.
        priority: Higher is taken first.
        depends_on: Ids of tasks that must be done before this one can be claimed.
        require_plan: The teammate must have its plan approved before editing or running
            anything (you approve it with plan.approve).
    """
    board, project = _board(ctx)
    task = await board.add(
        project,
        title=title,
        detail=detail,
        priority=priority,
        depends_on=depends_on or (),
        created_by=ctx.agent_id,
        require_plan=require_plan,
    )
    return task.to_wire()


@tool("tasks.claim", timeout_s=5.0)
async def tasks_claim(ctx: ToolContext, id: str) -> JsonObject:
    """Take an open task from the board: you become its one assignee, or you are told who is.

    Finish it with tasks.done, or give it up with tasks.fail. A task whose dependencies
    are not done yet cannot be claimed.

    Args:
        id: The task's id, as tasks.list shows it.
    """
    board, project = _board(ctx)
    return (await board.claim(project, id, agent=ctx.agent_id)).to_wire()


# Bounded by the task_done hook it may run (hooks.timeout_s, at most 3600 s).
@tool("tasks.done", timeout_s=3605.0)
async def tasks_done(ctx: ToolContext, id: str, result: str = "") -> JsonObject:
    """Mark a task you hold as done, with what came of it.

    Args:
        id: The task's id.
        result: What was done, where to find it.
    """
    board, project = _board(ctx)
    return (await board.done(project, id, agent=ctx.agent_id, result=result)).to_wire()


@tool("tasks.fail", timeout_s=5.0)
async def tasks_fail(ctx: ToolContext, id: str, reason: str) -> JsonObject:
    """Mark a task you hold as failed, saying why, so the team can plan around it.

    Args:
        id: The task's id.
        reason: Why it could not be done.
    """
    board, project = _board(ctx)
    return (await board.fail(project, id, agent=ctx.agent_id, reason=reason)).to_wire()


@tool("tasks.reopen", timeout_s=5.0)
async def tasks_reopen(ctx: ToolContext, id: str) -> JsonObject:
    """Put a failed task back on the board for anyone to claim; why it failed is kept
    (last_error) for whoever takes it next.

    Args:
        id: The failed task's id.
    """
    board, project = _board(ctx)
    return (await board.reopen(project, id, by=ctx.agent_id)).to_wire()


@tool("tasks.retry", timeout_s=5.0)
async def tasks_retry(ctx: ToolContext, id: str) -> JsonObject:
    """Ask the agent that failed a task to try it again: it goes back on the board offered
    to that agent first while it runs (then to anyone); why it failed is kept.

    Args:
        id: The failed task's id.
    """
    board, project = _board(ctx)
    return (await board.retry(project, id, by=ctx.agent_id)).to_wire()


@tool("kb.search")
async def kb_search(
    ctx: ToolContext, query: str, scope: str = "agent", k: int = 8
) -> list[JsonObject]:
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
async def kb_ingest(ctx: ToolContext, paths: list[str], scope: str = "agent") -> JsonObject:
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
) -> JsonObject:
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
) -> JsonObject:
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
def memory_constrain(ctx: ToolContext, text: str, expires_in_s: float | None = None) -> JsonObject:
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


STATE_TOOLS: tuple[Tool, ...] = (
    plan_read,
    plan_write,
    plan_append,
    *PLAN_REVIEW_TOOLS,
    agents_list,
    team_send,
    team_broadcast,
    memory_decide,
    memory_failure,
    memory_constrain,
    context_post,
    context_read,
    context_search,
    tasks_list,
    tasks_add,
    tasks_claim,
    tasks_done,
    tasks_fail,
    tasks_reopen,
    tasks_retry,
    kb_search,
    kb_ingest,
)
"""The tools over the agent's own state."""

BUILTIN_TOOLS: tuple[Tool, ...] = (*WORKSPACE_TOOLS, *STATE_TOOLS)
"""Every built-in tool, in the order the wizard lists them."""


def default_registry(*, plugins: bool = True) -> tuple[ToolRegistry, list[str]]:
    """The built-ins plus, unless ``plugins`` is false, the ``ateam.tools`` entry points."""
    registry = ToolRegistry(BUILTIN_TOOLS)
    warnings = registry.load_entry_points() if plugins else []
    return registry, warnings
