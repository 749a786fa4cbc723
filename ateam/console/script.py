"""The plain console reading a script: it waits for every task it queues, and says if one failed.

``printf '/attach X\\ntext\\n' | ateam console --no-ui`` is a script: stdin is not a
terminal, nobody is there to watch the answers arrive, and the exit status is all a
caller can branch on. So the console keeps every task it queued in view, whatever
follows it: after ``/detach`` or an ``/attach`` of another agent it goes on following
the agent it left until that agent's tasks have ended, their answers printed under its
name as they stream; and before it ends — ``/quit``, the end of input, or a command that
failed — it waits for them all. Then each task that did not succeed is named on a line
of its own and the exit status is 5 (``task.failed``), unless a failed command already
set another.

Waiting for an agent ends early only when it is gone (it left the registry, or was lost
without a restart on its way): its tasks then count as failed, as nobody saw them end.
"""

from __future__ import annotations

import asyncio
import contextlib

from ateam.client import Event, EventType, Outcomes, Target
from ateam.console.controller import ConsoleController, ConsoleView
from ateam.exits import Exit

__all__ = ["ScriptController"]

GONE_CHECK_S = 1.0
"""How often a wait looks whether the agents are still there (no notice says one died)."""


class ScriptController(ConsoleController):
    """The console's controller when its input is a script (see the module)."""

    def __init__(self, target: Target, view: ConsoleView) -> None:
        super().__init__(target, view)
        self.outcomes = Outcomes()
        """The tasks this console queued and how those that ended went."""
        self._kept: set[str] = set()
        """Agents left (detached) while their tasks run: followed until those end."""

    def seen(self, event: Event) -> None:
        """Every event the view shows: how queued tasks end; an agent left and done with
        is no longer followed."""
        self.outcomes.seen(event)
        agent = event.agent
        if event.type != EventType.TASK_END or agent not in self._kept:
            return
        if not self.outcomes.pending(agent):
            self._kept.discard(agent)
            if agent != self.attached and agent not in self.tailed:
                self.tail.remove(agent)

    async def send_input(self, text: str) -> None:
        """Queue ``text`` on the attached agent, as every console does, and keep it in view."""
        agent = self.require_writer()
        view = self.known.get(agent)
        sent = await self.agent(agent).send(
            text,
            source="console",
            claim=False,
            agent_cwd=view.entry.cwd if view is not None else None,
        )
        self.tell_masked(sent.redacted)
        self.outcomes.queued(agent, sent.id)

    async def detach(self) -> None:
        agent = self.require_attached()
        position = self.tail.position(agent)
        await super().detach()
        if self.outcomes.pending(agent) and agent not in self.tail.agents:
            self._kept.add(agent)
            # From the last event read: nothing missed, nothing shown twice.
            if position is None:
                self.follow(agent)
            else:
                self.tail.add(agent, position)

    async def execute(self, line: str) -> None:
        if line.strip().split(maxsplit=1)[:1] == ["/quit"]:
            await self.settle()
        await super().execute(line)

    async def wait_for_pending(self) -> None:
        """End of input: every task it queued is waited for."""
        await self.settle()

    async def settle(self) -> None:
        """Wait until every task this console queued has ended, or its agent is gone."""
        while pending := self.outcomes.pending():
            self.outcomes.changed.clear()
            for agent in dict.fromkeys(self.outcomes.agent_of(task) for task in pending):
                view = self.known.get(agent)
                if view is None or not (view.connected or view.state == "restarting"):
                    self.view.banner(f"{agent} is gone; its tasks did not end here")
                    self.outcomes.give_up(agent, f"{agent} stopped before the task ended")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(GONE_CHECK_S):
                    await self.outcomes.changed.wait()

    async def finish(self, code: int) -> int:
        """The script's exit status once its tasks have ended: ``code`` (a failed
        command's), else 5 if a task failed, else 0; each failed task named on a line."""
        await self.settle()
        failed = [found for result in self.outcomes.failures() if (found := result.failure())]
        for failure in failed:
            self.view.info(failure.one_line())
        if code or not failed:
            return code
        return int(Exit.TASK_FAILED)
