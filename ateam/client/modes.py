"""An agent's working modes from the client: plan approval and delegate mode (issue 26).

``team.agent("p/zeus").modes`` — read where the plan stands, approve or reject it (a
rejection carries feedback, which the agent gets as its next input), and turn delegate
mode on or off. Changing calls need the agent's ownership: inside an attachment the
session holds it, otherwise each takes a one-call claim, as ``ateam send`` does.
"""

from __future__ import annotations

from ateam.client.requester import Requester
from ateam.wire.modes import DelegateParams, ModesResult, PlanAnswerParams, PlanRejectParams
from ateam.wire.rpc import build_params

__all__ = ["ModesApi", "ModesResult"]


class ModesApi:
    """Plan approval and delegate mode of one agent."""

    def __init__(self, handle: Requester) -> None:
        self._handle = handle

    async def state(self, *, timeout: float | None = None) -> ModesResult:
        """Where its plan and delegate mode stand."""
        return await self._handle.request("plan.state", ModesResult, timeout=timeout)

    async def approve(
        self, note: str = "", *, claim: bool = True, takeover: bool = False
    ) -> ModesResult:
        """Approve the plan of the task that waits for one; ``note`` goes to the model."""
        params = build_params(PlanAnswerParams, "plan.approve", note=note)
        return await self._handle.request(
            "plan.approve", ModesResult, params, claim=claim, takeover=takeover
        )

    async def reject(
        self, feedback: str, *, claim: bool = True, takeover: bool = False
    ) -> ModesResult:
        """Send the plan back with ``feedback``, which reaches the model as its next input."""
        params = build_params(PlanRejectParams, "plan.reject", feedback=feedback)
        return await self._handle.request(
            "plan.reject", ModesResult, params, claim=claim, takeover=takeover
        )

    async def delegate(
        self, on: bool, *, claim: bool = True, takeover: bool = False
    ) -> ModesResult:
        """Delegate mode (coordination tools only) on or off, kept across restarts."""
        params = build_params(DelegateParams, "delegate.set", on=on)
        return await self._handle.request(
            "delegate.set", ModesResult, params, claim=claim, takeover=takeover
        )
