"""The plain console reading a script: it waits for every task it queues, and says if one failed.

``printf '/attach X\\ntext\\n' | ateam console --no-ui`` is a script: stdin is not a
terminal, nobody is there to watch the answers arrive, and the exit status is all a
caller can branch on. So before anything that leaves the attached agent — ``/attach``
(another agent or the same), ``/detach``, ``/stop``, ``/ui``, ``/quit``, the end of
input, or a command that failed — the console waits until the tasks it queued there
have ended, their answers printed under the agent as they stream. Once it leaves, each
task that did not succeed is named on a line of its own and the exit status is 5
(``task.failed``), unless a failed command already set another.

Waiting ends early only when the agent is gone (left the registry, or lost without a
restart on its way): its tasks then count as failed, as nobody saw them end.
"""

from __future__ import annotations

import asyncio
import contextlib

from ateam.client import Outcomes, Target
from ateam.console.controller import ConsoleController, ConsoleView
from ateam.errors import Exit

__all__ = ["LEAVING", "ScriptController"]

LEAVING = frozenset({"attach", "detach", "quit", "stop", "ui"})
"""Console commands after which the attached agent's answers would no longer be shown
(or its tasks no longer run): the tasks queued so far are waited for first."""
GONE_CHECK_S = 1.0
"""How often a wait looks whether the agent is still there (no notice says it died)."""


class ScriptController(ConsoleController):
    """The console's controller when its input is a script (see the module)."""

    def __init__(self, target: Target, view: ConsoleView) -> None:
        super().__init__(target, view)
        self.outcomes = Outcomes()
        """The tasks this console queued; its front end feeds it every event it shows."""

    async def execute(self, line: str) -> None:
        if _command(line) in LEAVING:
            await self.settle()
        await super().execute(line)

    async def send_input(self, text: str) -> None:
        """Queue ``text`` on the attached agent, as every console does, and wait for it later."""
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

    async def wait_for_pending(self) -> None:
        """End of input: the tasks it queued are waited for like before any leaving command."""
        await self.settle()

    async def settle(self) -> None:
        """Wait until every task queued on the attached agent has ended, or the agent is gone."""
        agent = self.attached
        if agent is None:
            return
        while self.outcomes.pending(agent):
            self.outcomes.changed.clear()
            view = self.known.get(agent)
            if view is None or not (view.connected or view.state == "restarting"):
                self.view.banner(
                    f"{agent} is gone; its tasks did not end while this console waited"
                )
                self.outcomes.give_up(agent, f"{agent} stopped before the task ended")
                return
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


def _command(line: str) -> str | None:
    """The console command ``line`` runs (``attach`` for ``/attach X``); ``None`` for input."""
    text = line.strip()
    if not text.startswith("/"):
        return None
    words = text[1:].split(maxsplit=1)
    return words[0] if words else None
