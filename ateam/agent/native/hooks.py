"""The agent's side of the task loop: its task hooks and its context sources.

:class:`AgentHooks` is what the task loop calls out to — the fence every turn carries,
the redactor, the services a tool call is given, the handoff kept after each turn, model
switches and compaction. :class:`AgentSources` is where each context's system prompt and
blocks come from. Both only forward to the parts the composition root built
(:mod:`ateam.agent.runtime.build`), so the loop and those parts never import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ateam.agent.context.compaction import Compactor
from ateam.agent.context.prompts import Prompts
from ateam.agent.context.successor import HandoffKeeper
from ateam.agent.context.teamfeed import TeamFeed
from ateam.agent.context.working import WorkingContext
from ateam.agent.loop.control import TaskControl
from ateam.agent.loop.switching import ModelSwitcher
from ateam.agent.loop.workspaces import Workspaces
from ateam.agent.models.router import Reason
from ateam.agent.state.history import Summary, SummaryLog
from ateam.agent.state.plan import PLAN_FILE
from ateam.agent.state.queue_item import QueueItem, TaskIds
from ateam.bus.lock import InstanceLock
from ateam.config import AgentConfig
from ateam.config.schema import Approval
from ateam.redact import Redactor
from ateam.tools.exec_values import ExecLimits, OutputRoom
from ateam.tools.fs import Sandbox
from ateam.tools.registry import ToolContext
from ateam.tools.services import (
    AgentLister,
    ContextItems,
    KnowledgeBases,
    PlanReviews,
    TaskBoardPort,
    Teammates,
)
from ateam.wire.turns import Turn

__all__ = ["AgentHooks", "AgentSources"]


@dataclass(frozen=True, eq=False)
class AgentSources:
    """Where the agent's contexts come from, besides the recorded turns."""

    prompts: Prompts
    workctx: WorkingContext
    summary_log: SummaryLog
    team: TeamFeed
    keeper: HandoffKeeper

    def system_prompt(self) -> str:
        return self.prompts.effective()

    def summaries(self) -> list[Summary]:
        """Summaries for the context from ``summary.jsonl``: the newest, as a fallback.

        The working context's running summary folds every earlier summary in, and it is
        in every turn's context already; the log's copy is only needed when that file
        is gone or damaged, so the same text is never paid for twice.
        """
        if self.workctx.summary():
            return []
        return self.summary_log.all()[-1:]

    def extra_context(self) -> str:
        """The working context (SPEC §8) and the team's context items (SPEC §9)."""
        blocks = (self.workctx.render(), self.team.render())
        return "\n\n".join(block for block in blocks if block)

    def handoff_context(self) -> str:
        return self.keeper.handoff_context()


@dataclass(frozen=True, eq=False)
class AgentHooks:
    """The task loop's calls into the agent (see :class:`~ateam.agent.native.runner.TaskHooks`)."""

    config: AgentConfig
    lock: InstanceLock
    redactor: Redactor
    sandbox: Sandbox
    exec_limits: ExecLimits
    workctx: WorkingContext
    context_items: ContextItems
    kb: KnowledgeBases
    list_agents: AgentLister
    board: TaskBoardPort
    teammates: Teammates
    keeper: HandoffKeeper
    switcher: ModelSwitcher
    compactor: Compactor
    plan_reviews: PlanReviews | None = None
    workspaces: Workspaces | None = None
    """With ``worktree: task``: a board task's tools work in its worktree."""
    output_room: OutputRoom | None = None
    """Holds a command's output while the owning console lags (issue 28 §3)."""

    def fence(self) -> int:
        return self.lock.fence

    def scrub_turn(self, turn: Turn) -> Turn:
        # Field by field through its line, so a secret in an extra field is masked too.
        return Turn.model_validate(self.redactor.redact_obj(turn.line()))

    def scrub_text(self, text: str) -> str:
        return self.redactor.redact(text)

    def tool_context(
        self,
        item: QueueItem,
        approval: Approval,
        on_output: Callable[[bytes], None],
        control: TaskControl,
    ) -> ToolContext:
        cwd, sandbox = self.config.cwd, self.sandbox
        moved = self.workspaces.cwd_for(item) if self.workspaces is not None else None
        if moved is not None:  # the task's worktree, and nothing of the main tree
            cwd, sandbox = moved, Sandbox(moved, self.sandbox.whitelist)
        return ToolContext(
            agent_id=self.config.id,
            cwd=cwd,
            task_id=item.id,
            trace_id=item.trace_id,
            hops=item.hops,
            sandbox=sandbox,
            approval=approval,
            on_output=on_output,
            exec_limits=self.exec_limits,
            output_room=self.output_room,
            track=control.track,
            plan_path=self.config.dir / PLAN_FILE,
            redact=self.redactor.redact,
            list_agents=self.list_agents,
            memory=self.workctx,
            context_items=self.context_items,
            kb=self.kb,
            teammates=self.teammates,
            board=self.board,
            plan_reviews=self.plan_reviews,
        )

    def on_turn(self, item: QueueItem, turn: Turn) -> None:
        self.keeper.on_turn(item, turn)

    async def switch_model(
        self, from_model: str, to_model: str, reason: Reason | None, ids: TaskIds
    ) -> None:
        await self.switcher.switch(from_model, to_model, reason, ids)

    async def compact(self, ids: TaskIds) -> bool:
        return await self.compactor.compact(ids)
