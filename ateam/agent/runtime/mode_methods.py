"""The RPC methods of the agent's working modes: plan approval and delegate mode (issue 26).

Rows of the catalogue (:func:`~ateam.agent.runtime.service.build_methods` adds them),
kept here so the catalogue's module stays one screenful per concern:

* ``plan.state`` — where the plan and delegate mode stand (anyone may read it).
* ``plan.approve`` / ``plan.reject`` — a person's answer: mutating, so the console that
  owns the agent, or a one-call claim (``ateam plan approve``) while nobody does.
* ``team.plan`` — a lead agent's answer: no ownership, but the caller must be another
  agent of the project that proves it with its running instance's identity token, as
  ``team.input`` checks a teammate (:mod:`ateam.bus.identity`).
* ``delegate.set`` — delegate mode on or off: mutating.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ateam.agent.loop.modes import WorkModes
from ateam.agent.runtime.port import ServicePort
from ateam.bus.rpc import Call, Method
from ateam.errors import OwnershipDenied
from ateam.wire.modes import (
    DelegateParams,
    ModesResult,
    PlanAnswerParams,
    PlanRejectParams,
    PlanReviewParams,
)
from ateam.wire.rpc import NoParams, Params

__all__ = ["mode_methods"]


def answered_by(caller: str | None) -> str:
    """Who answered, as the model and ``plan show`` read it: a lead's id, else a person."""
    if caller and caller.startswith("agent:"):
        return caller.removeprefix("agent:")
    kind = (caller or "").split(":", 1)[0] or "unknown"
    return f"a person ({kind})"


class _ModeService:
    def __init__(self, port: ServicePort, modes: WorkModes) -> None:
        self.port = port
        self.modes = modes

    async def state(self, call: Call) -> ModesResult:
        return self.modes.view()

    async def approve(self, call: Call) -> ModesResult:
        note = call.args(PlanAnswerParams).note
        return self.modes.answer(True, by=answered_by(call.caller), feedback=note)

    async def reject(self, call: Call) -> ModesResult:
        feedback = call.args(PlanRejectParams).feedback
        return self.modes.answer(False, by=answered_by(call.caller), feedback=feedback)

    async def review(self, call: Call) -> ModesResult:
        params = call.args(PlanReviewParams)
        await self._admit_lead(call)
        approve = params.decision == "approve"
        return self.modes.answer(approve, by=answered_by(call.caller), feedback=params.feedback)

    async def delegate(self, call: Call) -> ModesResult:
        return self.modes.set_delegate(call.args(DelegateParams).on)

    async def _admit_lead(self, call: Call) -> None:
        """Only another agent of this project, proven by its identity token."""
        me = self.port.id
        lead = (call.caller or "").removeprefix("agent:")
        project = me.split("/", 1)[0]
        if not (call.caller or "").startswith("agent:") or lead.split("/", 1)[0] != project:
            raise OwnershipDenied(
                f"team.plan answers come from agents of {project} only (people use "
                "plan.approve / plan.reject)",
                detail={"caller": call.caller},
            )
        if lead == me:
            raise OwnershipDenied(
                "an agent cannot approve its own plan", detail={"caller": call.caller}
            )
        if not await self.port.doors.teammate_proven(lead, call.auth_sha256):
            raise OwnershipDenied(
                f"{call.caller} did not prove it is {lead} (no identity token, a wrong "
                "one, or no such agent running)",
                detail={"caller": call.caller},
            )


def mode_methods(port: ServicePort) -> dict[str, Method]:
    """The rows of the modes' methods; none for an agent built without modes."""
    if port.modes is None:
        return {}
    svc = _ModeService(port, port.modes)
    Row = tuple[str, Callable[[Call], Awaitable[ModesResult]], type[Params], bool, str]
    table: list[Row] = [
        ("plan.state", svc.state, NoParams, False, "plan approval and delegate mode"),
        ("plan.approve", svc.approve, PlanAnswerParams, True, "approve the plan {note?}"),
        ("plan.reject", svc.reject, PlanRejectParams, True, "send the plan back {feedback}"),
        (
            "team.plan",
            svc.review,
            PlanReviewParams,
            False,
            "a lead agent's answer {decision, feedback?} (identity-proven)",
        ),
        ("delegate.set", svc.delegate, DelegateParams, True, "delegate mode {on}"),
    ]
    return {
        name: Method(name, fn, mutating, doc, params, ModesResult)
        for name, fn, params, mutating, doc in table
    }
