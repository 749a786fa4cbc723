"""What ``ps`` shows for an agent that exited for good (``FinalExit.alert``)."""

from __future__ import annotations

from ateam.wire.registry import FinalExit


def test_the_alert_says_why_in_the_agents_own_words() -> None:
    final = FinalExit(
        "p/hera",
        12,
        "its configuration is invalid",
        cause=(
            "error [config.invalid]: model 'gpt' needs the openai package: "
            "pip install 'ateam[openai]'"
        ),
    )

    assert final.alert() == (
        "exited 12, not restarted: its configuration is invalid: "
        "model 'gpt' needs the openai package: pip install 'ateam[openai]'"
    )


def test_a_count_of_problems_ends_without_its_colon_and_no_cause_adds_nothing() -> None:
    several = FinalExit(
        "p/hera", 12, "its configuration is invalid",
        cause="error [config.invalid]: 3 problems in the configuration:",
    )  # fmt: skip
    assert several.alert().endswith("invalid: 3 problems in the configuration")
    assert FinalExit("p/hera", 16, "its token was refused").alert() == (
        "exited 16, not restarted: its token was refused"
    )


def test_a_damaged_file_is_named_as_the_cure() -> None:
    final = FinalExit(
        "p/zeus", 20, "a state file is damaged", cause="error [storage.corrupt]: x", file="/s/q"
    )
    assert final.alert() == (
        "exited 20, not restarted: a state file is damaged; move /s/q aside, then start it"
    )
