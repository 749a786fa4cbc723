"""The /offload form: every field parsed when typed, so a bad value never reaches a start."""

from __future__ import annotations

import pytest

from ateam.console.offload import OffloadForm
from ateam.errors import UsageError

PROPOSAL = {
    "from": "p/zeus",
    "project": "p",
    "name": "zeus-2",
    "cwd": "/srv/p",
    "model": "echo",
    "system_prompt": "Be brief.\nAlways test.\n",
    "kb_ids": [],
    "first_task": "You take over work offloaded by agent p/zeus.\nTask: x",
    "handoff": {"checksum": "sha256:abc", "valid": True, "reason": None},
}


def test_edits_are_parsed_and_applied_one_field_at_a_time() -> None:
    form = OffloadForm.from_proposal(PROPOSAL)

    edited = form.apply("name=hermes").apply("worktree: yes").apply("where=remote")
    assert form.apply("kb_ids=d-0fcbd2b70b1f, d-681b032c8f4d").kb_ids == (
        "d-0fcbd2b70b1f",
        "d-681b032c8f4d",
    )

    assert (edited.name, edited.worktree, edited.where) == ("hermes", True, "remote")
    assert edited.agent_id == "p/hermes"
    assert form.name == "zeus-2"  # the original is untouched


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("name=../etc", "invalid agent name"),
        ("where=moon", "where must be one of here, remote"),
        ("worktree=maybe", "worktree must be yes or no"),
        ("kb_ids=doc1,d-0fcbd2b70b1f", "doc1 are not document ids"),
        ("first_task=", "cannot be empty"),
        ("colour=red", "expected FIELD=VALUE"),
    ],
)
def test_a_bad_value_is_refused_with_a_reason(answer: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        OffloadForm.from_proposal(PROPOSAL).apply(answer)


def test_the_form_folds_long_texts_and_shows_the_handoff_verdict() -> None:
    lines = OffloadForm.from_proposal(PROPOSAL).lines()

    assert "  system_prompt  Be brief.… (2 lines)" in lines
    assert any("first_task" in line and "(2 lines)" in line for line in lines)
    assert lines[-1] == "  handoff        sha256:abc (verifies)"
