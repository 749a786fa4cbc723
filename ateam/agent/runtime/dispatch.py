"""Which runner works a task: the native loop or the coding agent, by the current model.

A ``models.yaml`` entry is either a model API, which ateam's own loop drives
(:class:`~ateam.agent.native.runner.NativeRunner`), or a coding agent over ACP, which
runs the task itself (:class:`~ateam.agent.acp.runner.AcpRunner`). The router says which
one is current; a switch between the two kinds in the middle of a task raises
:class:`~ateam.agent.loop.task.HandOver` in the runner that made it, and the task goes on
in the other one, its handoff due, without starting again.

:class:`TaskSessionsEnd` stops, once a board task is over, the coding agent started for
it alone in its worktree (``worktree: task``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ateam.agent.loop.control import TaskControl
from ateam.agent.loop.task import HandOver, TaskOutcome, TaskRunner
from ateam.agent.models.readiness import why_unusable
from ateam.agent.models.router import ModelRouter
from ateam.agent.native.runner import NativeRunner
from ateam.agent.state.queue_item import QueueItem
from ateam.errors import Code

if TYPE_CHECKING:
    from ateam.agent.acp.runner import AcpRunner

__all__ = ["ModelDispatch", "TaskSessionsEnd"]


class ModelDispatch:
    """The worker's :class:`~ateam.agent.loop.task.TaskRunner`: native or ACP, by the model."""

    def __init__(
        self,
        router: ModelRouter,
        native: NativeRunner,
        make_acp: Callable[[], AcpRunner],
        on_alert: Callable[[str | None], None] = lambda _: None,
    ) -> None:
        self._router = router
        self.native = native
        self._make_acp = make_acp
        self._acp: AcpRunner | None = None
        self._on_alert = on_alert

    @property
    def built(self) -> AcpRunner | None:
        """The ACP runner if a coding agent ran, else ``None`` (nothing built)."""
        return self._acp

    @property
    def acp(self) -> AcpRunner:
        """The ACP runner, built at its first use (the SDK is slow to import)."""
        if self._acp is None:
            self._acp = self._make_acp()
        return self._acp

    def check_at_start(self) -> None:
        """A model of the route that cannot work shows in ``ps`` at once (not at the first
        task): a model API without its key or SDK, a coding agent that is not installed."""
        if self._router.is_runtime():
            self.acp.check_at_start()
        models = self._router.config.models
        route = dict.fromkeys([self._router.current, *self._router.route])  # a pin too
        unusable = [
            error
            for model in route
            if model in models and (error := why_unusable(models[model])) is not None
        ]
        if unusable:
            self._on_alert("; ".join(f"{error.code}: {error.message}" for error in unusable))

    async def close(self) -> None:
        """Stop every coding agent's process this agent started."""
        if self._acp is not None:
            await self._acp.close()

    async def run(self, item: QueueItem, control: TaskControl) -> TaskOutcome:
        # Each hand-over is a switch the router made, and it never switches to a model
        # the task already tried, so the route's length bounds the hand-overs.
        for _ in range(len(self._router.route) + 1):
            runner = self.acp if self._router.is_runtime() else self.native
            try:
                return await runner.run(item, control)
            except HandOver:
                control.continuing = True
        error = "error [internal]: the task was handed between models without end"
        return TaskOutcome(False, error, "", 0, 0, code=Code.INTERNAL)


class TaskSessionsEnd:
    """``inner`` (the gated runner), then the end of the coding agent's session of a task
    that ran in its own worktree: outside the gates, so a refused ``task_done`` goes on
    in the same session, and only the task's end stops it."""

    def __init__(self, inner: TaskRunner, dispatch: ModelDispatch) -> None:
        self.inner = inner
        self._dispatch = dispatch

    async def run(self, item: QueueItem, control: TaskControl) -> TaskOutcome:
        try:
            return await self.inner.run(item, control)
        finally:
            # None when no coding agent ran yet: nothing to stop, and the SDK not imported.
            if self._dispatch.built is not None:
                await self._dispatch.built.end_task_sessions()
