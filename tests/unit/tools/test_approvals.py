"""Approval requests: waiting, answers, timeouts and interrupts (SPEC §5.5)."""

from __future__ import annotations

import asyncio

import pytest

from ateam.errors import BadRequest
from ateam.tools.approvals import Answer, ApprovalRequest, Approvals, Decision, parse_decision


class Recorder:
    def __init__(self) -> None:
        self.counts: list[int] = []
        self.announced: list[ApprovalRequest] = []
        self.resolved: list[tuple[str, Answer]] = []

    def approvals(self) -> Approvals:
        return Approvals(
            on_change=self.counts.append,
            announce=self.announced.append,
            resolved=lambda req, ans: self.resolved.append((req.id, ans)),
        )


async def ask(approvals: Approvals, *, timeout: float = 5.0, kind: str = "tool") -> Answer:
    return await approvals.ask(
        kind=kind,
        tool="os.exec",
        args={"cmd": "rm -rf build"},
        task_id="q-1",
        trace_id="t",
        timeout_s=timeout,
        extra={"path": "a.py", "diff": "-a\n+b\n", "new_content": "b\n"} if kind == "diff" else {},
    )


async def test_a_request_waits_until_the_owner_answers() -> None:
    rec = Recorder()
    approvals = rec.approvals()
    waiter = asyncio.create_task(ask(approvals))
    await asyncio.sleep(0)
    assert rec.counts == [1] and len(approvals) == 1
    request = rec.announced[0]
    assert not waiter.done()
    approvals.answer(request.id, Decision.APPROVE, content=None, by="console:me")
    answer = await waiter
    assert (answer.decision, answer.by) == (Decision.APPROVE, "console:me")
    assert rec.counts == [1, 0]
    assert rec.resolved[0][0] == request.id


async def test_no_answer_in_time_is_a_rejection() -> None:
    rec = Recorder()
    answer = await ask(rec.approvals(), timeout=0.05)
    assert answer.decision is Decision.REJECT
    assert "no answer" in answer.reason


async def test_an_interrupt_rejects_every_open_request() -> None:
    rec = Recorder()
    approvals = rec.approvals()
    waiters = [asyncio.create_task(ask(approvals)) for _ in range(2)]
    await asyncio.sleep(0)
    approvals.reject_all("interrupted")
    answers = await asyncio.gather(*waiters)
    assert [a.decision for a in answers] == [Decision.REJECT] * 2
    assert len(approvals) == 0


async def test_answers_are_checked() -> None:
    rec = Recorder()
    approvals = rec.approvals()
    with pytest.raises(BadRequest, match="nothing is waiting"):
        approvals.answer(None, Decision.APPROVE, content=None, by=None)
    waiter = asyncio.create_task(ask(approvals))
    await asyncio.sleep(0)
    with pytest.raises(BadRequest, match="no open approval request"):
        approvals.answer("ap-nope", Decision.APPROVE, content=None, by=None)
    with pytest.raises(BadRequest, match="'edit' needs a patch"):
        approvals.answer(None, Decision.EDIT, content="x", by=None)
    approvals.answer(None, Decision.REJECT, content=None, by=None)
    assert (await waiter).decision is Decision.REJECT


async def test_bulky_fields_stay_out_of_events_unless_asked_for() -> None:
    rec = Recorder()
    approvals = rec.approvals()
    waiter = asyncio.create_task(ask(approvals, kind="diff"))
    await asyncio.sleep(0)
    request = approvals.pending()[0]
    assert "new_content" not in request.to_wire()
    assert request.to_wire(full=True)["new_content"] == "b\n"
    approvals.answer(None, Decision.EDIT, content="c\n", by=None)
    assert (await waiter).content == "c\n"


def test_decision_words() -> None:
    assert parse_decision("apply") is Decision.APPROVE
    assert parse_decision("REJECT") is Decision.REJECT
    with pytest.raises(BadRequest):
        parse_decision("maybe")
