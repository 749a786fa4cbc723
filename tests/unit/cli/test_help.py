"""Every flag and positional of every verb says what it is for, in the user's words."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from ateam.cli import build_parser

_INTERNAL = re.compile(r"\bSPEC\b|§|\bissue \d+|\bissue\b", re.IGNORECASE)
"""What a help text must never mention: the project's own documents and tickets."""


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    for action in parser._actions:
        yield path, action
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))
            for choice in action._choices_actions:  # the one-line help of each verb
                yield (*path, choice.dest), choice


def _helps() -> list[tuple[str, str | None]]:
    found = []
    for path, action in _walk(build_parser()):
        longest = sorted(action.option_strings, key=len)[-1:]
        where = " ".join(("ateam", *path, *(longest or [action.dest])))
        found.append((where, action.help))
    return found


def test_every_flag_and_positional_has_help() -> None:
    missing = [where for where, text in _helps() if not text or text == argparse.SUPPRESS]
    assert not missing, f"actions without help: {missing}"


def test_no_help_mentions_the_spec_or_an_issue() -> None:
    internal = [f"{where}: {text}" for where, text in _helps() if text and _INTERNAL.search(text)]
    descriptions = [
        f"ateam {' '.join(path)}: {sub.description}"
        for path, action in _walk(build_parser())
        if isinstance(action, argparse._SubParsersAction)
        for sub in action.choices.values()
        if sub.description and _INTERNAL.search(sub.description)
    ]
    assert not internal + descriptions


def test_the_walk_sees_every_verb_and_its_flags() -> None:
    # A walk that missed a level would pass the two tests above for nothing.
    seen = {where for where, _ in _helps()}
    for expected in (
        "ateam start names",
        "ateam logs --follow",
        "ateam tasks claim --as",
        "ateam kb add paths",
        "ateam completion shell",
        "ateam --version",
    ):
        assert expected in seen, sorted(seen)


def test_a_refusal_names_the_agent_of_a_verb_that_takes_several() -> None:
    from ateam.cli._hints import cli_line
    from ateam.errors import OwnershipDenied

    line = cli_line(OwnershipDenied("owned"), argparse.Namespace(names=["hello/zeus", "x"]))

    assert "`ateam tail hello/zeus`" in line and "NAME" not in line
