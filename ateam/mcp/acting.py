"""``ateam mcp --as NAME``: the tools that act, acting as agent ``P/NAME`` itself.

The server a coding agent's runtime gets from its agent (:mod:`ateam.agent.acp.teammate`):
the runtime *is* the agent, so what it does through these tools is attributed as the
agent's own tools attribute it (:mod:`ateam.agent.native.tools`), not to an external
``mcp:RUNTIME``:

* ``task_claim`` / ``task_done`` / ``task_fail``: the agent is the claimant (another
  agent named is refused: ``identity.refused``); ``task_add``: ``created_by`` is the
  agent; ``task_reopen``: the agent sends the failed task back;
* ``context_post``: ``source_agent`` is the agent (the agent's feed then never hands the
  item back to it, as for its own ``context.post``);
* ``agent_send``: the agent's ``team.send``: caller ``agent:P/NAME`` with its token,
  source ``agent:NAME``, the next hop of its current thread, its ``team.max_hops``;
* ``kb_search``: the agent's own knowledge bases unless another agent is named.

Each of these calls proves the agent's identity first (:meth:`TeamMember.check
<ateam.client.TeamMember.check>`); the reading tools stay as they are for any client.
"""

from __future__ import annotations

from ateam.client import Team, TeamMember
from ateam.errors import IdentityRefused
from ateam.mcp.bridge import TeamBridge

__all__ = ["AgentBridge"]


class AgentBridge:
    """The acting tools' work, as agent ``member.id``; plain JSON values, ateam errors.

    Args:
        team: the session the calls run on.
        member: the session acting as the agent, with its token.
        reads: the server's bridge (for what reads as any client: ``kb_search``).
    """

    def __init__(self, team: Team, member: TeamMember, reads: TeamBridge) -> None:
        self.team = team
        self.member = member
        self._reads = reads

    @property
    def me(self) -> str:
        """The agent acted as, ``P/NAME``."""
        return self.member.id

    @property
    def project(self) -> str:
        return self.member.project

    def _only_me(self, agent: str | None) -> str:
        """``agent`` if it is this server's agent (the default); else ``identity.refused``."""
        if agent is None or agent in (self.me, self.me.partition("/")[2]):
            return self.me
        raise IdentityRefused(
            f"this server acts as {self.me} only; it cannot act for {agent}",
            detail={"agent": agent, "acting_as": self.me},
        )

    async def agent_send(self, to: str, text: str, reply: bool = False) -> dict[str, object]:
        """``team.send`` as the agent: to a teammate of its project, on its thread; with
        ``reply`` the teammate's answer comes back to the agent as an input."""
        sent = await self.member.send(to, text, reply=reply)
        return {**sent, "from": self.me}

    async def context_post(
        self,
        *,
        type: str,
        title: str,
        content: str,
        summary: str,
        urgency: str,
        scope: str,
        tags: list[str],
    ) -> dict[str, object]:
        await self.member.check()
        item = await self.team.context.post(
            self.project,
            type=type,
            title=title,
            content=content,
            summary=summary,
            urgency=urgency,
            scope=scope,
            tags=tags,
            source_agent=self.me,
        )
        return {**item.to_wire(), "redacted": item.redacted}

    async def task_add(
        self,
        *,
        title: str,
        detail: str,
        priority: int,
        depends_on: list[str],
        require_plan: bool = False,
    ) -> dict[str, object]:
        await self.member.check()
        task = await self.team.tasks.add(
            self.project,
            title=title,
            detail=detail,
            priority=priority,
            depends_on=depends_on,
            created_by=self.me,
            require_plan=require_plan,
        )
        return {**task.to_wire(), "redacted": task.redacted}

    async def task_claim(self, task_id: str, agent: str | None) -> dict[str, object]:
        claimant = self._only_me(agent)
        await self.member.check()
        return (await self.team.tasks.claim(self.project, task_id, agent=claimant)).to_wire()

    async def task_done(self, task_id: str, agent: str | None, result: str) -> dict[str, object]:
        holder = self._only_me(agent)
        await self.member.check()
        task = await self.team.tasks.done(self.project, task_id, agent=holder, result=result)
        return task.to_wire()

    async def task_fail(self, task_id: str, agent: str | None, reason: str) -> dict[str, object]:
        holder = self._only_me(agent)
        await self.member.check()
        task = await self.team.tasks.fail(self.project, task_id, agent=holder, reason=reason)
        return task.to_wire()

    async def task_reopen(self, task_id: str, retry: bool) -> dict[str, object]:
        await self.member.check()
        again = self.team.tasks.retry if retry else self.team.tasks.reopen
        return (await again(self.project, task_id, by=self.me)).to_wire()

    async def kb_search(
        self, agent: str | None, query: str, scope: str, k: int
    ) -> dict[str, object]:
        """The agent's own knowledge bases by default; another agent's when named."""
        return await self._reads.kb_search(agent or self.me, query, scope, k)
