"""Human decisions a running task waits for (SPEC §5.5 approval policy).

A tool call under ``ask`` — and every ``fs.patch`` unless its approval is ``allow`` —
becomes an :class:`ApprovalRequest`. While at least one request is open the agent is in
state ``waiting``; the request is announced as an event (``diff.proposed`` for a patch,
``approval.request`` for anything else) and listed by the ``approval.list`` RPC, so a
console that attaches late still sees it. Only the owning console can answer
(``approval.answer`` is a mutating RPC). No answer within the timeout, an interrupt or a
shutdown all count as a rejection: the safe outcome is always that nothing happens.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ateam._json import JsonObject
from ateam.errors import BadRequest


class Decision(StrEnum):
    """How the owner answered."""

    APPROVE = "approve"
    """Run the tool call (for a patch: apply it as proposed)."""
    REJECT = "reject"
    """Do not run it; the model is told it was rejected."""
    EDIT = "edit"
    """Apply the owner's edited version instead (patches only)."""
    ALWAYS = "always"
    """Run it, and let calls of the same kind run without asking from now on, where the
    asker can remember that (a coding agent over ACP: its ``allow_always``); elsewhere
    it is :attr:`APPROVE`."""


# Words a console may send for each decision; "apply" is what a diff prompt says.
_DECISION_WORDS: dict[str, Decision] = {
    "approve": Decision.APPROVE,
    "apply": Decision.APPROVE,
    "yes": Decision.APPROVE,
    "reject": Decision.REJECT,
    "no": Decision.REJECT,
    "edit": Decision.EDIT,
    "always": Decision.ALWAYS,
}


_BULKY = frozenset({"new_content"})


@dataclass(frozen=True)
class Answer:
    """A decision on an approval request, and who made it."""

    decision: Decision
    content: str | None = None
    """The edited file for :attr:`Decision.EDIT`."""
    by: str | None = None
    """The console session that answered; ``None`` for a timeout or interrupt."""
    reason: str = ""


@dataclass
class ApprovalRequest:
    """A tool call waiting for a console's decision (a diff for ``fs.patch``)."""

    id: str
    kind: str
    """``diff`` for an ``fs.patch`` proposal, ``tool`` for any other call."""
    tool: str
    args: dict[str, Any]
    task_id: str | None
    trace_id: str | None
    created: float = field(default_factory=time.time)
    timeout_s: float = 600.0
    extra: dict[str, Any] = field(default_factory=dict)
    """``path`` and ``diff`` of a patch."""
    future: asyncio.Future[Answer] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future(), repr=False
    )

    def to_wire(self, *, full: bool = False) -> JsonObject:
        """The request as events and ``approval.list`` show it.

        Bulky fields (a patch's whole new file) are left out unless ``full``: the event
        log should not hold every proposed file, but a console opening ``$EDITOR`` needs it.
        """
        extra = self.extra if full else {k: v for k, v in self.extra.items() if k not in _BULKY}
        args = self.args
        if self.kind == "diff" and not full:
            args = {k: v for k, v in args.items() if k != "content"}  # the diff says it
        return {
            "request_id": self.id,
            "kind": self.kind,
            "tool": self.tool,
            "args": args,
            "task_id": self.task_id,
            "trace_id": self.trace_id,
            "created": self.created,
            "expires": self.created + self.timeout_s,
            **extra,
        }


def parse_decision(value: object) -> Decision:
    if isinstance(value, str) and value.lower() in _DECISION_WORDS:
        return _DECISION_WORDS[value.lower()]
    raise BadRequest(f"'decision' must be one of {', '.join(sorted(_DECISION_WORDS))}")


class Approvals:
    """The open requests of one agent.

    Args:
        on_change: called with the number of open requests whenever it changes, so the
            agent can enter or leave ``waiting``.
        announce: publishes a new request (the agent turns it into an event).
        resolved: publishes how a request ended.
    """

    def __init__(
        self,
        *,
        on_change: Callable[[int], None],
        announce: Callable[[ApprovalRequest], None],
        resolved: Callable[[ApprovalRequest, Answer], None],
    ) -> None:
        self._open: dict[str, ApprovalRequest] = {}
        self._on_change = on_change
        self._announce = announce
        self._resolved = resolved

    def __len__(self) -> int:
        return len(self._open)

    def pending(self) -> list[ApprovalRequest]:
        return sorted(self._open.values(), key=lambda req: req.created)

    async def ask(
        self,
        *,
        kind: str,
        tool: str,
        args: dict[str, Any],
        task_id: str | None,
        trace_id: str | None,
        timeout_s: float,
        extra: dict[str, Any] | None = None,
    ) -> Answer:
        """Open a request and wait for the owner; a timeout is a rejection."""
        request = ApprovalRequest(
            id=f"ap-{secrets.token_hex(4)}",
            kind=kind,
            tool=tool,
            args=args,
            task_id=task_id,
            trace_id=trace_id,
            timeout_s=timeout_s,
            extra=extra or {},
        )
        self._open[request.id] = request
        self._on_change(len(self._open))
        self._announce(request)
        try:
            async with asyncio.timeout(timeout_s):
                answer = await asyncio.shield(request.future)
        except TimeoutError:
            answer = Answer(Decision.REJECT, reason=f"no answer within {timeout_s:g} s")
        except asyncio.CancelledError:
            self._finish(request, Answer(Decision.REJECT, reason="cancelled"))
            raise
        self._finish(request, answer)
        return answer

    def answer(
        self, request_id: str | None, decision: Decision, *, content: str | None, by: str | None
    ) -> ApprovalRequest:
        """Resolve one open request (the oldest when ``request_id`` is ``None``)."""
        if request_id is None:
            pending = self.pending()
            if not pending:
                raise BadRequest("nothing is waiting for an answer")
            request = pending[0]
        else:
            found = self._open.get(request_id)
            if found is None:
                raise BadRequest(f"no open approval request {request_id!r} (answered or expired)")
            request = found
        if decision is Decision.EDIT and (request.kind != "diff" or content is None):
            raise BadRequest("'edit' needs a patch request and the edited 'content'")
        if request.future.done():
            # Resolved a moment ago (timeout, interrupt, another answer) but not yet
            # removed: say so rather than pretend this answer counted.
            raise BadRequest(f"approval request {request.id} was already answered")
        request.future.set_result(Answer(decision, content=content, by=by))
        return request

    def reject_all(self, reason: str) -> None:
        """Resolve every open request as rejected (interrupt, shutdown)."""
        for request in list(self._open.values()):
            if not request.future.done():
                request.future.set_result(Answer(Decision.REJECT, reason=reason))

    def _finish(self, request: ApprovalRequest, answer: Answer) -> None:
        if self._open.pop(request.id, None) is None:
            return
        self._resolved(request, answer)
        self._on_change(len(self._open))
