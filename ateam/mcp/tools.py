"""The tools ``ateam mcp`` offers, each a thin face on :class:`~ateam.mcp.bridge.TeamBridge`.

Argument names follow SPEC §9 (``title``, ``content``, ``type``, ``urgency``, ``scope``,
``tags``); an agent is `agent` (``project/name``), queued text is ``text``. Every
tool answers a JSON object. The SDK builds each tool's input schema from its
signature, so the annotations here are what a client sees (and what is checked
before a call reaches the bridge).

The annotations must name module-level objects: the SDK resolves them with
``typing.get_type_hints`` against this module's globals.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from pydantic import Field

from ateam.client import bus_errors
from ateam.mcp.bridge import CONTEXT_LIMIT_MAX, TAIL_LIMIT_MAX, TeamBridge, runtime_name

__all__ = ["TOOL_NAMES", "register_tools", "runtime_of"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
Ctx = Context[Any, Any]
Json = dict[str, Any]

AgentId = Annotated[str, Field(description="An agent id, PROJECT/NAME (see agents_list).")]
Project = Annotated[
    str | None,
    Field(description="The project; default: the one `ateam mcp` was started with."),
]
TaskId = Annotated[str, Field(description="A task id from tasks_list or task_add (t-…).")]
TypeArg = Literal["discovery", "decision", "status", "request", "alert"]
UrgencyArg = Literal["background", "attention", "blocking"]
ScopeArg = Literal["task", "project", "global"]
KbScopeArg = Literal["agent", "project", "user"]
StatusArg = Literal["open", "claimed", "done", "failed"]
Tags = Annotated[list[str], Field(description="Short labels (letters, digits, . _ -).")]

TOOL_NAMES = (
    "agents_list",
    "agent_status",
    "agent_send",
    "agent_tail",
    "context_read",
    "context_post",
    "context_search",
    "tasks_list",
    "task_add",
    "task_claim",
    "task_done",
    "kb_search",
)
"""Every tool, in the order ``tools/list`` shows them."""

_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


def runtime_of(ctx: Ctx) -> str:
    """The calling client's runtime name, from its ``initialize`` ``clientInfo``."""
    params = ctx.request_context.session.client_params
    return runtime_name(params.client_info.name if params is not None else None)


async def _run(work: Awaitable[T]) -> T:
    """The bridge's call, a Redis failure turned into ``redis.unavailable``."""
    with bus_errors():
        return await work


def _registrar(app: MCPServer[Any]) -> Callable[[ToolAnnotations], Callable[[F], F]]:
    """``@tool(hints)``: add the function as a tool of ``app``."""

    def tool(hints: ToolAnnotations) -> Callable[[F], F]:
        def register(fn: F) -> F:
            # The docstring is what the client's model reads: without its indentation.
            app.add_tool(fn, description=inspect.cleandoc(fn.__doc__ or ""), annotations=hints)
            return fn

        return register

    return tool


def register_tools(app: MCPServer[Any], bridge: TeamBridge) -> None:
    """Add every tool of :data:`TOOL_NAMES` to ``app``, each calling ``bridge``.

    One flat list of short closures: each is the tool's schema and description.
    """
    tool = _registrar(app)

    @tool(_READ)
    async def agents_list(project: Project = None) -> Json:
        """List the team's agents: id, state (idle, busy, waiting, disconnected…), model,
        current task, queue length, host. Project "*" lists every project."""
        return await _run(bridge.agents_list(project))

    @tool(_READ)
    async def agent_status(agent: AgentId) -> Json:
        """One agent's state, model, current task, queue length and last error."""
        return await _run(bridge.agent_status(agent))

    @tool(_WRITE)
    async def agent_send(
        agent: AgentId,
        text: Annotated[str, Field(description="What to ask the agent to do.")],
        ctx: Ctx,
    ) -> Json:
        """Queue text for an agent as a task (durably, like ateam send). An agent held by
        a console accepts it only if its owner allowed external input (else
        ownership.denied). Returns the task id; follow it with agent_tail."""
        return await _run(bridge.agent_send(agent, text, runtime_of(ctx)))

    @tool(_READ)
    async def agent_tail(
        agent: AgentId,
        from_offset: Annotated[
            int | None,
            Field(description="The first event's offset; default: the newest `limit` events."),
        ] = None,
        limit: Annotated[int, Field(description=f"At most this many (≤ {TAIL_LIMIT_MAX}).")] = 50,
    ) -> Json:
        """An agent's events (model text, tool calls and output, task start and end) from
        an offset on. Pass the answer's next_offset as from_offset to read on."""
        return await _run(bridge.agent_tail(agent, from_offset, limit))

    @tool(_READ)
    async def context_read(
        project: Project = None,
        type: TypeArg | None = None,
        scope: ScopeArg | None = None,
        tags: Tags | None = None,
        min_urgency: UrgencyArg | None = None,
        limit: Annotated[int, Field(description=f"At most (≤ {CONTEXT_LIMIT_MAX}).")] = 20,
    ) -> Json:
        """The team's live context items (discoveries, decisions, status, requests,
        alerts), newest first, optionally filtered."""
        return await _run(
            bridge.context_read(
                project,
                type=type,
                scope=scope,
                tags=tags,
                min_urgency=min_urgency,
                limit=limit,
            )
        )

    @tool(_WRITE)
    async def context_post(
        type: TypeArg,
        title: Annotated[str, Field(description="One line.")],
        ctx: Ctx,
        content: Annotated[str, Field(description="The details.")] = "",
        summary: Annotated[str, Field(description="A short summary of long content.")] = "",
        urgency: UrgencyArg = "background",
        scope: ScopeArg = "project",
        tags: Tags | None = None,
        project: Project = None,
    ) -> Json:
        """Tell the team something: subscribed agents get it in their next turn, consoles
        show attention and blocking items as banners. Recorded as from this client.
        Secrets are masked first; `redacted` says how many were replaced."""
        return await _run(
            bridge.context_post(
                project,
                type=type,
                title=title,
                content=content,
                summary=summary,
                urgency=urgency,
                scope=scope,
                tags=tags or [],
                runtime=runtime_of(ctx),
            )
        )

    @tool(_READ)
    async def context_search(
        query: Annotated[str, Field(description="What to look for, in a few words.")],
        project: Project = None,
        limit: Annotated[int, Field(description=f"At most (≤ {CONTEXT_LIMIT_MAX}).")] = 20,
    ) -> Json:
        """The team's context items ranked by meaning (ateam's offline embedder), best first."""
        return await _run(bridge.context_search(project, query, limit))

    @tool(_READ)
    async def tasks_list(project: Project = None, status: StatusArg | None = None) -> Json:
        """The project's task board, highest priority first, then oldest first."""
        return await _run(bridge.tasks_list(project, status))

    @tool(_WRITE)
    async def task_add(
        title: Annotated[str, Field(description="One line.")],
        ctx: Ctx,
        detail: str = "",
        priority: Annotated[int, Field(description="Higher first.")] = 0,
        depends_on: Annotated[
            list[str] | None, Field(description="Task ids that must be done first.")
        ] = None,
        project: Project = None,
    ) -> Json:
        """Put an open task on the project's board for an agent to claim. Secrets are
        masked first; `redacted` says how many were replaced."""
        return await _run(
            bridge.task_add(
                project,
                title=title,
                detail=detail,
                priority=priority,
                depends_on=depends_on or [],
                runtime=runtime_of(ctx),
            )
        )

    @tool(_WRITE)
    async def task_claim(task_id: TaskId, agent: AgentId, project: Project = None) -> Json:
        """Claim an open task as agent (whose project is the default). Of racing claims
        exactly one wins; the others get task.claimed, and an unfinished dependency
        gives task.blocked."""
        return await _run(bridge.task_claim(project, task_id, agent))

    @tool(_WRITE)
    async def task_done(
        task_id: TaskId,
        agent: AgentId,
        result: Annotated[str, Field(description="What came of it.")] = "",
        project: Project = None,
    ) -> Json:
        """Mark a task done; only its assignee (agent) may."""
        return await _run(bridge.task_done(project, task_id, agent, result))

    @tool(_READ)
    async def kb_search(
        agent: AgentId,
        query: Annotated[str, Field(description="What to look for, in words.")],
        scope: KbScopeArg = "agent",
        k: Annotated[int, Field(description="At most this many passages.")] = 8,
    ) -> Json:
        """Search an agent's knowledge base (its own notes, the project's or the user's)
        for passages about the query, best first."""
        return await _run(bridge.kb_search(agent, query, scope, k))
