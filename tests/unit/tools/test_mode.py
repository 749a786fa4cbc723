"""Delegate mode and a plan awaiting approval, as the tool dispatch checks them (issue 26)."""

from __future__ import annotations

import pytest

from ateam.errors import Code
from ateam.tools.mode import PLAN_REASON, WorkMode, mode_refusal

EDITS_AND_COMMANDS = ["fs.write", "fs.patch", "os.exec", "acme.deploy"]
READING = ["fs.read", "fs.list", "kb.search", "kb.ingest"]
COORDINATING = [
    "team.send",
    "tasks.add",
    "context.post",
    "agents.list",
    "plan.write",
    "plan.approve",
    "memory.decide",
]


@pytest.mark.parametrize("name", EDITS_AND_COMMANDS + READING + COORDINATING)
def test_no_mode_refuses_nothing(name: str) -> None:
    assert mode_refusal(name, WorkMode()) is None


@pytest.mark.parametrize("name", EDITS_AND_COMMANDS)
def test_a_pending_plan_refuses_edits_and_commands_with_plan_required(name: str) -> None:
    refusal = mode_refusal(name, WorkMode(plan_pending=True))
    assert refusal is not None
    assert refusal.code == Code.PLAN_REQUIRED
    assert PLAN_REASON in refusal.one_line()
    assert name in refusal.message


@pytest.mark.parametrize("name", READING + COORDINATING)
def test_a_pending_plan_lets_the_agent_read_and_plan(name: str) -> None:
    assert mode_refusal(name, WorkMode(plan_pending=True)) is None


@pytest.mark.parametrize("name", EDITS_AND_COMMANDS + READING)
def test_delegate_mode_refuses_all_but_coordination(name: str) -> None:
    refusal = mode_refusal(name, WorkMode(delegate=True))
    assert refusal is not None
    assert refusal.code == Code.TOOL_DENIED
    assert "delegate mode: coordination tools only" in refusal.one_line()
    assert "tools.allow" not in refusal.one_line()  # not a policy matter: the hint says so


@pytest.mark.parametrize("name", COORDINATING)
def test_delegate_mode_keeps_coordination(name: str) -> None:
    assert mode_refusal(name, WorkMode(delegate=True)) is None


def test_delegate_mode_is_the_reason_given_when_both_hold() -> None:
    refusal = mode_refusal("os.exec", WorkMode(delegate=True, plan_pending=True))
    assert refusal is not None and refusal.code == Code.TOOL_DENIED
