"""The tools ``ateam mcp`` offers, each a thin face on :class:`~ateam.mcp.bridge.TeamBridge`.

Argument names follow SPEC §9 (``title``, ``content``, ``type``, ``urgency``, ``scope``,
``tags``); an agent is `agent` (``project/name``), queued text is ``text``. Every
tool answers a JSON object. The SDK builds each tool's input schema from its
signature, so the annotations here are what a client sees (and what is checked
before a call reaches the bridge).

Two sets of faces for the tools that act: an external runtime's (the client is
``mcp:RUNTIME``), and, with ``--as``, an agent's (:class:`~ateam.mcp.acting.AgentBridge`:
the client is agent ``P/NAME``, and each description says so). The names and their
order (:data:`TOOL_NAMES`) are the same either way.

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
from ateam.mcp.acting import AgentBridge
from ateam.mcp.bridge import CONTEXT_LIMIT_MAX, TAIL_LIMIT_MAX, TeamBridge, runtime_name
from ateam.mcp.diff import DiffBytes, WorkTarget, agent_diff_of

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
_PLAN_HELP = "The agent that takes it works read-only until its plan is approved."
TaskId = Annotated[str, Field(description="A task id from tasks_list or task_add (t-…).")]
TypeArg = Literal["discovery", "decision", "status", "request", "alert"]
UrgencyArg = Literal["background", "attention", "blocking"]
ScopeArg = Literal["task", "project", "global"]
KbScopeArg = Literal["agent", "project", "user"]
StatusArg = Literal["open", "claimed", "done", "failed"]
RetryArg = Annotated[
    bool,
    Field(
        description="false: open to anyone at once; true: offered first (for a while) to "
        "the agent that failed it, if it is running."
    ),
]
Tags = Annotated[list[str], Field(description="Short labels (letters, digits, . _ -).")]
Teammate = Annotated[
    str, Field(description="A teammate: NAME or PROJECT/NAME, an agent of this project.")
]
Myself = Annotated[
    str | None,
    Field(description="Leave out: this server acts as one agent only (see the description)."),
]
KbAgent = Annotated[
    str | None,
    Field(description="Another agent's knowledge base, PROJECT/NAME; default: your own."),
]
Face = tuple[Callable[..., Awaitable[Any]], ToolAnnotations, str]
"""A tool: its function (named as the tool), its hints and its description."""

TOOL_NAMES = (
    "agents_list",
    "agent_status",
    "agent_send",
    "agent_tail",
    "agent_diff",
    "context_read",
    "context_post",
    "context_search",
    "tasks_list",
    "task_add",
    "task_claim",
    "task_done",
    "task_fail",
    "task_reopen",
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


class _Faces(dict[str, Face]):
    """Called as ``@tool(hints)``: collects a function as a tool; its docstring (without its
    indentation, with ``{me}``/``{project}`` filled in) is what the client's model reads."""

    def __init__(self, **fill: str) -> None:
        super().__init__()
        self._fill = fill

    def __call__(self, hints: ToolAnnotations) -> Callable[[F], F]:
        def collect(fn: F) -> F:
            text = inspect.cleandoc(fn.__doc__ or "")
            self[fn.__name__] = (fn, hints, text.format(**self._fill) if self._fill else text)
            return fn

        return collect


def register_tools(
    app: MCPServer[Any], bridge: TeamBridge, acting: AgentBridge | None = None
) -> None:
    """Add every tool of :data:`TOOL_NAMES` to ``app``, in that order.

    The tools that act do so as ``acting``'s agent when given, else as the client.
    """
    faces = _runtime_faces(bridge)
    if acting is not None:
        faces.update(_agent_faces(acting))
    for name in TOOL_NAMES:
        fn, hints, description = faces[name]
        app.add_tool(fn, description=description, annotations=hints)


def _runtime_faces(bridge: TeamBridge) -> _Faces:
    """Every tool, the client acting as an external runtime (``mcp:RUNTIME``).

    One flat list of short closures: each is the tool's schema and description.
    """
    tool = _Faces()

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
        """The team's context items ranked by similarity to the query, best first, with the
        embedder models.yaml configures (embeddings:); the offline default matches words,
        not meaning."""
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
        require_plan: Annotated[bool, Field(description=_PLAN_HELP)] = False,
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
                require_plan=require_plan,
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

    _runtime_board_faces(bridge, tool)
    _work_faces(bridge, tool)
    return tool


def _work_faces(bridge: TeamBridge, tool: _Faces) -> None:
    """An agent's or a task's branch (issue 27), added to :func:`_runtime_faces`'s list."""

    @tool(_READ)
    async def agent_diff(
        target: WorkTarget, project: Project = None, max_bytes: DiffBytes = None
    ) -> Json:
        """What an agent or a board task changed on its own git branch against its base,
        committed and not: files (path, status, insertions, deletions), stat, and the
        unified diff, cut at max_bytes (note and omitted_bytes say what was left out)."""
        return await agent_diff_of(target, project or bridge.default_project, max_bytes)


def _runtime_board_faces(bridge: TeamBridge, tool: _Faces) -> None:
    """The board's failure tools (issue 26), added to :func:`_runtime_faces`'s list."""

    @tool(_WRITE)
    async def task_fail(
        task_id: TaskId,
        agent: AgentId,
        reason: Annotated[str, Field(description="Why it could not be done.")],
        project: Project = None,
    ) -> Json:
        """Mark a task failed, saying why; only its assignee (agent) may. task_reopen
        puts it back."""
        return await _run(bridge.task_fail(project, task_id, agent, reason))

    @tool(_WRITE)
    async def task_reopen(
        task_id: TaskId, ctx: Ctx, retry: RetryArg = False, project: Project = None
    ) -> Json:
        """Put a failed task back on the board; why it failed is kept as last_error.
        A task that is not failed gives task.claimed."""
        return await _run(bridge.task_reopen(project, task_id, retry, runtime_of(ctx)))


def _agent_faces(acting: AgentBridge) -> _Faces:
    """The tools that act, as agent ``acting.me`` (``--as``): its claims, posts and sends.

    The descriptions name the agent and its project, so the model reads who it is here.
    """
    tool = _Faces(me=acting.me, project=acting.project)

    @tool(_WRITE)
    async def agent_send(
        agent: Teammate,
        text: Annotated[str, Field(description="The task, complete enough to do alone.")],
        reply: Annotated[
            bool, Field(description="Have its final answer sent back to you as an input.")
        ] = False,
    ) -> Json:
        """Give a teammate (another agent of project {project}) work, as {me}: queue text
        as its next task, like {me}'s own team.send. It arrives marked as from {me}. Hand
        off a piece of work, not a chat: a thread may pass between agents only a few times
        (team.max_hops, else team.hop_limit). Returns the task id; follow it with
        agent_tail. A teammate that is not running gets it when it starts (mailbox:
        true)."""
        return await _run(acting.agent_send(agent, text, reply))

    @tool(_WRITE)
    async def context_post(
        type: TypeArg,
        title: Annotated[str, Field(description="One line.")],
        content: Annotated[str, Field(description="The details.")] = "",
        summary: Annotated[str, Field(description="A short summary of long content.")] = "",
        urgency: UrgencyArg = "background",
        scope: ScopeArg = "project",
        tags: Tags | None = None,
    ) -> Json:
        """Tell the team of project {project} something, as {me} (recorded as its source):
        subscribed agents get it in their next turn, consoles show attention and blocking
        items as banners. Secrets are masked first; `redacted` says how many were
        replaced."""
        return await _run(
            acting.context_post(
                type=type,
                title=title,
                content=content,
                summary=summary,
                urgency=urgency,
                scope=scope,
                tags=tags or [],
            )
        )

    @tool(_WRITE)
    async def task_add(
        title: Annotated[str, Field(description="One line.")],
        detail: str = "",
        priority: Annotated[int, Field(description="Higher first.")] = 0,
        depends_on: Annotated[
            list[str] | None, Field(description="Task ids that must be done first.")
        ] = None,
        require_plan: Annotated[bool, Field(description=_PLAN_HELP)] = False,
    ) -> Json:
        """Put an open task on project {project}'s board, created by {me}, for any
        teammate (or {me}) to claim. Secrets are masked first; `redacted` says how many
        were replaced."""
        return await _run(
            acting.task_add(
                title=title,
                detail=detail,
                priority=priority,
                depends_on=depends_on or [],
                require_plan=require_plan,
            )
        )

    @tool(_WRITE)
    async def task_claim(task_id: TaskId, agent: Myself = None) -> Json:
        """Claim an open task of project {project}'s board as {me}: {me} becomes its one
        assignee. Of racing claims exactly one wins; the others get task.claimed, and an
        unfinished dependency gives task.blocked. Finish it with task_done."""
        return await _run(acting.task_claim(task_id, agent))

    @tool(_WRITE)
    async def task_done(
        task_id: TaskId,
        result: Annotated[str, Field(description="What came of it, where to find it.")] = "",
        agent: Myself = None,
    ) -> Json:
        """Mark a task {me} holds as done, with what came of it; only its assignee may."""
        return await _run(acting.task_done(task_id, agent, result))

    @tool(_WRITE)
    async def task_fail(
        task_id: TaskId,
        reason: Annotated[str, Field(description="Why it could not be done.")],
        agent: Myself = None,
    ) -> Json:
        """Mark a task {me} holds as failed, saying why, so the team can plan around it;
        only its assignee may."""
        return await _run(acting.task_fail(task_id, agent, reason))

    @tool(_WRITE)
    async def task_reopen(task_id: TaskId, retry: RetryArg = False) -> Json:
        """Put a failed task of project {project}'s board back, as {me}; why it failed is
        kept as last_error. A task that is not failed gives task.claimed."""
        return await _run(acting.task_reopen(task_id, retry))

    @tool(_READ)
    async def kb_search(
        query: Annotated[str, Field(description="What to look for, in words.")],
        scope: KbScopeArg = "agent",
        k: Annotated[int, Field(description="At most this many passages.")] = 8,
        agent: KbAgent = None,
    ) -> Json:
        """Search {me}'s knowledge base (scope agent: its own notes; project: project
        {project}'s; user: the user's) for passages about the query, best first."""
        return await _run(acting.kb_search(agent, query, scope, k))

    return tool
