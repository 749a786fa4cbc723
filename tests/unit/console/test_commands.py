"""The command table is the one place commands are declared: dispatch, /help, TAB, palettes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ateam.console.commands import COMMANDS, command_line, completer


def test_every_command_declares_its_usage_and_help() -> None:
    for name, command in COMMANDS.items():
        assert command.name == name
        assert command.usage.split()[0] == f"/{name}"
        assert command.help, name


def test_tab_completes_names_arguments_and_agents_from_the_table() -> None:
    console: Any = SimpleNamespace(known={"proj/zeus": None, "proj/hera": None})
    tab = completer(console)
    assert [c.text for c in tab.complete("/unt")] == ["/untail "]
    assert [c.text for c in tab.complete("/attach proj/z")] == ["proj/zeus "]
    assert [c.text for c in tab.complete("/stop he")] == ["proj/hera "]
    assert [c.text for c in tab.complete("/queue c")] == ["clear "]
    assert [c.text for c in tab.complete("/spawn x --wor")] == ["--worktree "]
    assert {c.text for c in tab.complete("/help ta")} == {"tail", "tasks"}
    assert {c.text for c in tab.complete("/help tai")} == {"tail "}


def test_palettes_build_their_lines_from_the_table() -> None:
    assert command_line("attach", "proj/zeus") == "/attach proj/zeus"
    assert command_line("attach") == "/attach"
    with pytest.raises(KeyError):
        command_line("atach")
