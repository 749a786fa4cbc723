"""The verb table is the command line: help lists what the table holds, nothing else."""

from __future__ import annotations

import argparse

import pytest

from ateam.cli import VERBS, build_parser, main
from ateam.cli._verb import Verb


def _paths(verbs: tuple[Verb, ...], above: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for verb in verbs:
        found.append((*above, verb.name))
        found.extend(_paths(verb.actions, (*above, verb.name)))
    return found


def test_help_lists_the_verbs_of_the_table() -> None:
    sub = next(
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    assert list(sub.choices) == [verb.name for verb in VERBS]


@pytest.mark.parametrize("path", _paths(VERBS), ids=" ".join)
def test_every_verb_and_action_has_help(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*path, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: ateam {' '.join(path)}")


def test_a_verb_has_a_handler_or_actions() -> None:
    with pytest.raises(ValueError, match="not both or neither"):
        Verb("nothing", "runs nothing")
    with pytest.raises(ValueError, match="not both or neither"):
        Verb("both", "both", handler=lambda args: 0, actions=(Verb("x", "x", lambda a: 0),))


def test_a_verb_with_actions_needs_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kb"]) == 4  # argparse's 2 is "Redis unavailable" in ateam
    assert "required" in capsys.readouterr().err
