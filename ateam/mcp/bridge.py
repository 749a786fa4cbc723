"""The team as ``ateam mcp`` offers it: one method per tool or resource, on ``ateam.client``.

The MCP layer (:mod:`ateam.mcp.server`) names the tools, reads the caller's runtime
name and turns errors into MCP errors; the work is here, returning plain JSON values
and raising :class:`~ateam.errors.AteamError` with its stable code. Nothing here
speaks MCP, so a test can drive it directly too.

An MCP client is an *external runtime*: what it posts carries ``source_runtime`` (its
name), the tasks it adds are ``created_by`` ``mcp:NAME``, and its input to an agent is
relayed as ``mcp:NAME``, which the agent accepts only where its owner allows it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from ateam._json import JsonObject
from ateam.client import (
    LOCAL_RUNTIMES,
    AgentStatus,
    BoardTask,
    ContextItem,
    ContextType,
    Event,
    Gap,
    TaskStatus,
    Team,
    blocked_by,
)
from ateam.client.tail import event_json, json_ready
from ateam.config.schema import check_name, checked_name
from ateam.errors import AgentNotFound, BadRequest

__all__ = [
    "CONTEXT_LIMIT_MAX",
    "DECISIONS_SHOWN",
    "FIELD_MAX_CHARS",
    "TAIL_BUDGET_CHARS",
    "TAIL_LIMIT_MAX",
    "TeamBridge",
    "runtime_name",
]

TAIL_LIMIT_MAX = 500
"""Most events one ``agent_tail`` call returns; a client pages on with ``next_offset``."""
TAIL_BUDGET_CHARS = 64 * 1024
"""Rough size of one ``agent_tail`` answer in JSON: a model's context is not a log file."""
FIELD_MAX_CHARS = 4000
"""A longer string inside an event is cut, saying how much was left out."""
CONTEXT_LIMIT_MAX = 100
"""Most context items one read or search returns over MCP."""
DECISIONS_SHOWN = 20
"""Decisions in the ``decisions`` resource, newest first."""
ACTIVE = (TaskStatus.OPEN, TaskStatus.CLAIMED)
"""Board tasks still to do: the ``tasks`` resource."""
RUNTIME_FALLBACK = "mcp"

_RUNTIME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RUNTIME_MAX_CHARS = 60


def runtime_name(client_name: str | None) -> str:
    """The external runtime's name as ateam records it, from the client's ``clientInfo``.

    Only letters, digits, ``.``, ``_`` and ``-`` survive (spaces become ``-``), so the
    name fits ``source_runtime``, ``created_by`` and the agent's ``mcp:NAME`` source; the
    team's own names (``ateam``, ``console``, ``cli``) get an ``mcp-`` prefix.
    """
    name = _RUNTIME_UNSAFE.sub("-", client_name or "").strip("-._")[:_RUNTIME_MAX_CHARS]
    if name.lower() in LOCAL_RUNTIMES:
        # Those names are the team's own (agents, consoles, verbs): an outsider may not
        # pass for one and get what only the team gets (a blocking item waking an agent).
        return f"{RUNTIME_FALLBACK}-{name}"
    return name or RUNTIME_FALLBACK


def _agent_id(value: str) -> str:
    """``project/name``, both parts valid names; else ``bad_request``."""
    project, slash, name = value.partition("/")
    try:
        if not slash:
            raise ValueError(f"agent must be an agent id PROJECT/NAME; got {value!r}")
        check_name(project, "project")
        check_name(name, "agent")
    except ValueError as exc:
        raise BadRequest(f"agent: {exc}", detail={"agent": value}) from None
    return value


def _bounded(name: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}; got {value}")
    return value


def _plain(value: object) -> object:
    """``value`` as JSON can carry it, each string cut at :data:`FIELD_MAX_CHARS`."""
    return json_ready(value, FIELD_MAX_CHARS)


def event_row(event: Event) -> dict[str, object]:
    """One event as ``agent_tail`` returns it; chunks of text come as ``text``."""
    return event_json(event, FIELD_MAX_CHARS)


def _agent_row(view: AgentStatus) -> dict[str, object]:
    row = view.to_json()
    row["connected"] = view.connected
    return row


def _task_rows(
    tasks: Iterable[BoardTask], board: Iterable[BoardTask] | None = None
) -> list[dict[str, object]]:
    """Each task, and for an open one what it waits for (``blocked_by``: ids, ``failed``),
    judged from the whole ``board`` (``tasks`` by default)."""
    listed = list(tasks)
    waits = blocked_by(listed if board is None else board)
    return [
        {
            **task.to_wire(),
            "blocked_by": [{"id": d, "failed": f} for d, f in waits.get(task.id, ())],
        }
        for task in listed
    ]


def _item_rows(items: Iterable[ContextItem]) -> list[JsonObject]:
    return [item.to_wire() for item in items]


class TeamBridge:
    """Every ``ateam mcp`` tool and resource as one call on a :class:`Team` session.

    Args:
        team: the session every call runs on.
        project: the project a call means when it names none (``--project``); None
            means a call must name one (or an agent of one).
    """

    def __init__(self, team: Team, project: str | None) -> None:
        self.team = team
        self.default_project = project

    def project(self, given: str | None, agent: str | None = None) -> str:
        """The project a call is about: its ``project``, the default, else its agent's."""
        chosen = given or self.default_project or (agent.partition("/")[0] if agent else None)
        if not chosen:
            raise BadRequest(
                "project: none given and `ateam mcp` was started without --project; pass project"
            )
        return checked_name(chosen)

    async def _known(self, agent: str) -> AgentStatus | None:
        """The agent's registry entry; ``agent.not_found`` if it has neither one nor events."""
        view = await self.team.status(_agent_id(agent))
        if view is None and not await self.team.has_events(agent):
            raise AgentNotFound(f"no agent {agent!r} on this bus", detail={"agent": agent})
        return view

    # agents --------------------------------------------------------------------------

    async def agents_list(self, project: str | None) -> dict[str, object]:
        """The agents of ``project`` (``*``: every project), sorted by id."""
        views = await self.team.agents()
        if project != "*":
            chosen = self.project(project) if project or self.default_project else None
            views = [view for view in views if chosen is None or view.entry.project == chosen]
        return {"agents": [_agent_row(view) for view in views]}

    async def agent_status(self, agent: str) -> dict[str, object]:
        view = await self._known(agent)
        if view is None:
            return {"id": agent, "state": "stopped", "connected": False}
        return _agent_row(view)

    async def agent_send(self, agent: str, text: str, runtime: str) -> dict[str, object]:
        """Queue ``text`` for ``agent`` as the external runtime, by its ownership rules."""
        handle = self.team.agent(_agent_id(agent))
        sent = await handle.relay(text, source=f"mcp:{runtime}")
        return {
            "agent": agent,
            "id": sent.id,
            "queued": sent.queued,
            "created": sent.created,
            "redacted": sent.redacted,
        }

    async def agent_tail(
        self, agent: str, from_offset: int | None, limit: int
    ) -> dict[str, object]:
        """At most ``limit`` events from ``from_offset`` on (the newest without one).

        The answer is also cut at about :data:`TAIL_BUDGET_CHARS`; ``next_offset`` is where
        the next call goes on, and ``gaps`` names ranges no longer kept.
        """
        _bounded("limit", limit, 1, TAIL_LIMIT_MAX)
        if from_offset is not None:
            _bounded("from_offset", from_offset, 1, 2**62)
        await self._known(agent)
        tail = self.team.tail()
        tail.add(agent, None if from_offset is None else from_offset - 1, backlog=limit)
        events: list[dict[str, object]] = []
        gaps: list[dict[str, int]] = []
        next_offset = from_offset or 1
        size = 0
        full = False
        while not full and (batch := await tail.poll(wait=False)):
            for item in batch:
                if isinstance(item, Gap):
                    gaps.append({"first": item.first, "last": item.last})
                    next_offset = max(next_offset, item.last + 1)
                    continue
                row = event_row(item)
                size += len(json.dumps(row))
                if events and (len(events) >= limit or size > TAIL_BUDGET_CHARS):
                    full = True
                    break
                events.append(row)
                next_offset = item.offset + 1
        return {"agent": agent, "events": events, "gaps": gaps, "next_offset": next_offset}

    async def kb_search(self, agent: str, query: str, scope: str, k: int) -> dict[str, object]:
        _bounded("k", k, 1, 50)
        hits = await self.team.agent(_agent_id(agent)).kb.search(scope, query, k)
        return {"agent": agent, "scope": scope, "hits": _plain(hits)}

    # context ---------------------------------------------------------------------------

    async def context_read(
        self,
        project: str | None,
        *,
        type: str | None,
        scope: str | None,
        tags: list[str] | None,
        min_urgency: str | None,
        limit: int,
    ) -> dict[str, object]:
        _bounded("limit", limit, 1, CONTEXT_LIMIT_MAX)
        items = await self.team.context.ls(
            self.project(project),
            types=None if type is None else [type],
            scopes=None if scope is None else [scope],
            tags=tags or None,
            min_urgency=min_urgency,
            limit=limit,
        )
        return {"items": _item_rows(items)}

    async def context_post(
        self,
        project: str | None,
        *,
        type: str,
        title: str,
        content: str,
        summary: str,
        urgency: str,
        scope: str,
        tags: list[str],
        runtime: str,
    ) -> dict[str, object]:
        item = await self.team.context.post(
            self.project(project),
            type=type,
            title=title,
            content=content,
            summary=summary,
            urgency=urgency,
            scope=scope,
            tags=tags,
            source_runtime=runtime,
        )
        return {**item.to_wire(), "redacted": item.redacted}

    async def context_search(
        self, project: str | None, query: str, limit: int
    ) -> dict[str, object]:
        _bounded("limit", limit, 1, CONTEXT_LIMIT_MAX)
        items = await self.team.context.search(self.project(project), query, limit=limit)
        return {"items": _item_rows(items)}

    # the task board --------------------------------------------------------------------

    async def tasks_list(self, project: str | None, status: str | None) -> dict[str, object]:
        if status is not None and status not in set(TaskStatus):
            raise BadRequest(f"status must be one of {', '.join(TaskStatus)}; got {status!r}")
        chosen = self.project(project)
        board = await self.team.tasks.ls(chosen)
        tasks = board if status is None else [t for t in board if t.status == status]
        return {"tasks": _task_rows(tasks, board)}

    async def task_add(
        self,
        project: str | None,
        *,
        title: str,
        detail: str,
        priority: int,
        depends_on: list[str],
        runtime: str,
        require_plan: bool = False,
    ) -> dict[str, object]:
        task = await self.team.tasks.add(
            self.project(project),
            title=title,
            detail=detail,
            priority=priority,
            depends_on=depends_on,
            created_by=f"mcp:{runtime}",
            require_plan=require_plan,
        )
        return {**task.to_wire(), "redacted": task.redacted}

    async def task_claim(self, project: str | None, task_id: str, agent: str) -> dict[str, object]:
        """Claim the task as ``agent`` (``--as``); of racing claims exactly one wins."""
        task = await self.team.tasks.claim(
            self.project(project, agent), task_id, agent=_agent_id(agent)
        )
        return task.to_wire()

    async def task_done(
        self, project: str | None, task_id: str, agent: str, result: str
    ) -> dict[str, object]:
        task = await self.team.tasks.done(
            self.project(project, agent), task_id, agent=_agent_id(agent), result=result
        )
        return task.to_wire()

    async def task_fail(
        self, project: str | None, task_id: str, agent: str, reason: str
    ) -> dict[str, object]:
        task = await self.team.tasks.fail(
            self.project(project, agent), task_id, agent=_agent_id(agent), reason=reason
        )
        return task.to_wire()

    async def task_reopen(
        self, project: str | None, task_id: str, retry: bool, runtime: str
    ) -> dict[str, object]:
        """A failed task back to open, by ``mcp:RUNTIME``: for anyone, or (``retry``)
        offered first to the agent that failed it."""
        again = self.team.tasks.retry if retry else self.team.tasks.reopen
        task = await again(self.project(project), task_id, by=f"mcp:{runtime}")
        return task.to_wire()

    # resources -------------------------------------------------------------------------

    async def active_tasks(self, project: str | None) -> dict[str, object]:
        """The open and claimed tasks of the project."""
        chosen = self.project(project)
        board = await self.team.tasks.ls(chosen)
        tasks = [t for t in board if t.status in ACTIVE]
        return {"project": chosen, "tasks": _task_rows(tasks, board)}

    async def decisions(self, project: str | None) -> dict[str, object]:
        """The newest decision items the project sees."""
        chosen = self.project(project)
        items = await self.team.context.ls(
            chosen, types=[ContextType.DECISION], limit=DECISIONS_SHOWN
        )
        return {"project": chosen, "decisions": _item_rows(items)}

    async def snapshot(self) -> JsonObject:
        """The session snapshot (``ateam session --json``): per project, the agents, the
        open and claimed tasks and the newest attention items.

        Every project with a registered agent, and the default project even without one.
        """
        if self.default_project is None:
            return await self.team.snapshot()
        names = {view.entry.project for view in await self.team.agents()}
        return await self.team.snapshot(names | {self.default_project})
