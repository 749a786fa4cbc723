"""TAB completion for console lines (SPEC §6): commands, agent ids, paths, cycling."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from ateam.completion import (
    CommandCompleter,
    Completion,
    PromptToolkitCompleter,
    ShellTab,
    Tab,
    columns,
    common_prefix,
)


class _Command:
    def __init__(self, usage: str) -> None:
        self.usage = usage


USAGES = {
    "attach": "/attach ID [--takeover]",
    "agents": "/agents",
    "detach": "/detach",
    "help": "/help [COMMAND]",
    "input": "/input TEXT",
    "kb": "/kb add --scope S PATH…",
    "ps": "/ps [--json] [--state S]",
    "queue": "/queue [clear|retry]",
    "spawn": "/spawn NAME [--cwd D] [--model M]",
    "stop": "/stop ID",
    "sys": "/sys show|edit",
    "tail": "/tail ID",
    "use": "/use MODEL|--auto",
    "who": "/who [ID]",
}
AGENTS = ["proj/zeus", "proj/hera", "lab/zephyr"]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "my dir" / "inner").mkdir(parents=True)
    (tmp_path / "my dir" / "notes.txt").write_text("x")
    (tmp_path / "plain").mkdir()
    (tmp_path / "readme.md").write_text("x")
    (tmp_path / ".hidden").write_text("x")
    return tmp_path


@pytest.fixture
def completer(files: Path) -> CommandCompleter:
    table = {name: _Command(usage) for name, usage in USAGES.items()}
    return CommandCompleter(lambda: table, lambda: AGENTS, cwd=files)


def texts(found: list[Completion]) -> list[str]:
    return [c.text for c in found]


def applied(completer: CommandCompleter, line: str) -> str:
    """The line after its only completion."""
    found = completer.complete(line)
    assert len(found) == 1, found
    return found[0].apply(line)[0]


def argument(line: str) -> str:
    """The last argument of a completed command line, as the controller parses it."""
    return shlex.split(line[1:])[-1]


# command names -----------------------------------------------------------------------


def test_a_unique_command_prefix_completes_with_a_space(completer: CommandCompleter) -> None:
    assert completer.complete("/att") == [Completion("/attach ", 0, "/attach")]
    assert applied(completer, "/att") == "/attach "


def test_an_ambiguous_prefix_offers_every_command(completer: CommandCompleter) -> None:
    assert texts(completer.complete("/a")) == ["/agents", "/attach"]
    assert len(completer.complete("/")) == len(USAGES)
    assert completer.complete("/zz") == []


def test_commands_can_be_a_plain_list_of_names(files: Path) -> None:
    plain = CommandCompleter(lambda: ["attach", "tail"], lambda: AGENTS, cwd=files)
    assert texts(plain.complete("/ta")) == ["/tail "]
    # Without usages the built-in list still knows which commands take an agent id.
    assert texts(plain.complete("/tail ze")) == ["lab/zephyr", "proj/zeus"]


def test_completion_uses_the_text_before_the_cursor(completer: CommandCompleter) -> None:
    line = "/att proj/zeus"
    found = completer.complete(line, cursor=4)
    assert found == [Completion("/attach ", 0, "/attach")]
    assert found[0].apply(line, 4) == ("/attach  proj/zeus", 8)


# agent ids ---------------------------------------------------------------------------


def test_agent_ids_complete_by_full_prefix(completer: CommandCompleter) -> None:
    assert applied(completer, "/attach proj/ze") == "/attach proj/zeus "
    assert texts(completer.complete("/attach proj/")) == ["proj/hera", "proj/zeus"]


def test_agent_ids_complete_by_bare_name(completer: CommandCompleter) -> None:
    assert applied(completer, "/tail he") == "/tail proj/hera "
    assert texts(completer.complete("/stop zep")) == ["lab/zephyr "]
    assert texts(completer.complete("/who ze")) == ["lab/zephyr", "proj/zeus"]


def test_agent_ids_only_where_a_command_takes_one(completer: CommandCompleter) -> None:
    assert completer.complete("/input ze") == []
    assert completer.complete("/use ze") == []
    assert completer.complete("ze") == []  # plain text for the agent
    # The id is the first argument; after it comes an option, not another id.
    assert completer.complete("/attach proj/zeus ze") == []
    assert texts(completer.complete("/attach proj/zeus --ta")) == ["--takeover "]


def test_agent_ids_are_read_live(files: Path) -> None:
    live: list[str] = []
    table = {name: _Command(usage) for name, usage in USAGES.items()}
    late = CommandCompleter(lambda: table, lambda: live, cwd=files)
    assert late.complete("/attach ne") == []
    live.append("proj/newcomer")
    assert texts(late.complete("/attach ne")) == ["proj/newcomer "]


def test_more_commands_can_take_agent_ids(files: Path) -> None:
    extra = CommandCompleter(lambda: ["ping"], lambda: AGENTS, cwd=files)
    assert extra.complete("/ping he") == []
    extra.agent_commands.add("ping")
    assert texts(extra.complete("/ping he")) == ["proj/hera "]


def test_wants_agents_tells_where_the_cursor_is(completer: CommandCompleter) -> None:
    assert completer.wants_agents("/attach z")
    assert completer.wants_agents("/attach ")
    assert not completer.wants_agents("/att")
    assert not completer.wants_agents("/attach proj/zeus --t")
    assert not completer.wants_agents("/input z")


# words and options from usages ------------------------------------------------------------


def test_literal_words_and_options_come_from_the_usage(completer: CommandCompleter) -> None:
    assert texts(completer.complete("/sys ")) == ["show", "edit"]
    assert texts(completer.complete("/queue c")) == ["clear "]
    assert texts(completer.complete("/ps --")) == ["--json", "--state"]
    assert texts(completer.complete("/use --")) == ["--auto "]
    assert texts(completer.complete("/help att")) == ["attach "]


# paths -------------------------------------------------------------------------------


def test_paths_complete_for_path_arguments_and_path_like_words(
    completer: CommandCompleter,
) -> None:
    assert applied(completer, "/input ./re") == "/input ./readme.md "
    assert applied(completer, "/kb add --scope project ./pl") == "/kb add --scope project ./plain/"
    # The usage says PATH…, so a bare name is a path too, in every position.
    assert texts(completer.complete("/kb add --scope project readme.md re")) == ["readme.md "]
    # An option whose value is a directory.
    assert texts(completer.complete("/spawn x --cwd pl")) == ["plain/"]
    # Plain text for the agent still completes a word that looks like a path.
    assert applied(completer, "look at ./re") == "look at ./readme.md "


def test_directories_get_a_slash_and_no_space(completer: CommandCompleter) -> None:
    found = completer.complete("/input ./pl")
    assert found == [Completion("./plain/", 7, "plain/")]


def test_a_path_with_a_space_is_quoted_for_shlex(completer: CommandCompleter, files: Path) -> None:
    line = applied(completer, "/input ./my")
    assert line == "/input './my dir/'"
    assert argument(line) == "./my dir/"
    assert (files / argument(line)).is_dir()
    # Going deeper re-quotes the whole word.
    found = completer.complete(line)
    assert texts(found) == ["'./my dir/inner/'", "'./my dir/notes.txt'"]
    deeper = found[1].apply(line)[0]
    assert argument(deeper) == "./my dir/notes.txt"
    assert (files / argument(deeper)).is_file()


def test_an_open_quote_completes_inside_the_quotes(
    completer: CommandCompleter, files: Path
) -> None:
    # A directory keeps the quote open so the next TAB can go on inside it.
    assert applied(completer, '/input "my d') == '/input "my dir/'
    assert applied(completer, "/input 'my d") == "/input 'my dir/"
    # A file closes it and ends the argument.
    line = applied(completer, '/input "./my dir/no')
    assert line == '/input "./my dir/notes.txt" '
    assert argument(line) == "./my dir/notes.txt"
    assert (files / argument(line)).is_file()


def test_tilde_is_home_and_stays_readable(
    completer: CommandCompleter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "Projects" / "big app").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    assert applied(completer, "/input ~") == "/input ~/"
    assert applied(completer, "/input ~/Pro") == "/input ~/Projects/"
    line = applied(completer, "/input ~/Projects/bi")
    # "~" stays outside the quotes, and shlex gives back the typed path.
    assert line == "/input ~/'Projects/big app/'"
    assert argument(line) == "~/Projects/big app/"
    assert Path(argument(line)).expanduser().is_dir()


def test_hidden_files_only_when_asked_for(completer: CommandCompleter) -> None:
    assert ".hidden " not in texts(completer.complete("/kb add --scope p "))
    assert texts(completer.complete("/input ./.h")) == ["./.hidden "]


def test_unreadable_or_missing_directories_give_nothing(completer: CommandCompleter) -> None:
    assert completer.complete("/input ./nowhere/x") == []


# cycling -----------------------------------------------------------------------------


def test_tab_extends_to_the_shared_prefix_then_lists_then_steps(
    completer: CommandCompleter,
) -> None:
    tab = ShellTab(completer)
    # "ze" matches proj/zeus and lab/zephyr by their bare names: nothing is shared.
    assert tab.press("/attach z") == Tab(
        "/attach z", 9, ("lab/zephyr", "proj/zeus")
    )  # listed, line unchanged
    assert tab.press("/attach z") == Tab("/attach lab/zephyr", 18)  # then one per press
    assert tab.press("/attach lab/zephyr") == Tab("/attach proj/zeus", 17)
    assert tab.press("/attach proj/zeus") == Tab("/attach lab/zephyr", 18)  # wrapping round
    # What the matches share is added first, even when it is not what was typed.
    tab.reset()
    assert tab.press("/attach proj/") == Tab("/attach proj/", 13, ("proj/hera", "proj/zeus"))
    tab.reset()
    assert tab.press("/sp") == Tab("/spawn ", 7)


def test_tab_extends_a_bare_name_to_the_full_ids_it_shares(tmp_path: Path) -> None:
    team = CommandCompleter(lambda: USAGES, lambda: ["proj/zeus", "proj/zephyr"], cwd=tmp_path)
    tab = ShellTab(team)
    assert tab.press("/attach ze") == Tab("/attach proj/ze", 15)
    assert tab.press("/attach proj/ze") == Tab("/attach proj/ze", 15, ("proj/zephyr", "proj/zeus"))
    assert tab.press("/attach proj/ze") == Tab("/attach proj/zephyr", 19)


def test_tab_never_drops_what_was_typed_for_a_shorter_shared_part(tmp_path: Path) -> None:
    # `ze` starts names in two projects: all they share is `p`, which would lose the `ze`.
    team = CommandCompleter(lambda: USAGES, lambda: ["p1/zeus", "p2/zephyr"], cwd=tmp_path)
    tab = ShellTab(team)
    assert tab.press("/attach ze") == Tab("/attach ze", 10, ("p1/zeus", "p2/zephyr"))


def test_tab_lists_commands_that_share_only_what_was_typed(completer: CommandCompleter) -> None:
    tab = ShellTab(completer)
    assert tab.press("/a") == Tab("/a", 2, ("/agents", "/attach"))
    assert tab.press("/a") == Tab("/agents", 7)
    # The user typed something: start again from the new line.
    assert tab.press("/att") == Tab("/attach ", 8)
    # A full id still gets the space that ends it.
    assert tab.press("/attach proj/zeus") == Tab("/attach proj/zeus ", 18)


def test_tab_with_no_match_and_text_after_the_cursor(completer: CommandCompleter) -> None:
    tab = ShellTab(completer)
    assert tab.press("/zz") is None
    assert tab.press("/a --takeover", 2) == Tab("/a --takeover", 2, ("/agents", "/attach"))
    assert tab.press("/a --takeover", 2) == Tab("/agents --takeover", 7)
    assert tab.press("/agents --takeover", 7) == Tab("/attach --takeover", 7)


def test_tab_extends_a_quoted_path_to_what_its_matches_share(
    completer: CommandCompleter, files: Path
) -> None:
    (files / "my dir2").mkdir()
    tab = ShellTab(completer)
    done = tab.press("/input ./my")
    assert done == Tab("/input './my dir", 16)
    assert shlex.split(done.line + "'") == ["/input", "./my dir"]


def test_common_prefix_and_columns() -> None:
    assert common_prefix(["proj/zeus", "proj/zephyr"]) == "proj/ze"
    assert common_prefix(["a", "b"]) == "" == common_prefix([])
    assert columns(["one", "two", "three", "four", "five"], 20) == [
        "one    four",
        "two    five",
        "three",
    ]
    assert columns(["a", "b"], 5) == ["a", "b"]


# prompt-toolkit adapter --------------------------------------------------------------


def test_prompt_toolkit_completer_replaces_the_word(completer: CommandCompleter) -> None:
    adapter = PromptToolkitCompleter(completer)
    document = Document("/input ./my")
    [item] = adapter.get_completions(document, CompleteEvent(completion_requested=True))
    assert item.text == "'./my dir/'"
    assert item.start_position == -len("./my")
    assert item.display_text == "my dir/"


async def test_prompt_toolkit_completer_refreshes_agents_first(files: Path) -> None:
    live: list[str] = []
    refreshed: list[bool] = []

    async def refresh() -> None:
        refreshed.append(True)
        live.append("proj/newcomer")

    adapter = PromptToolkitCompleter(
        CommandCompleter(lambda: ["attach", "input"], lambda: live, cwd=files), refresh=refresh
    )
    event = CompleteEvent(completion_requested=True)
    found = [c.text async for c in adapter.get_completions_async(Document("/attach ne"), event)]
    assert found == ["proj/newcomer "]
    # No registry round trip when the cursor is not on an agent id.
    assert [c async for c in adapter.get_completions_async(Document("/inp"), event)]
    assert refreshed == [True]


async def test_a_slow_or_failing_refresh_falls_back_to_known_ids(files: Path) -> None:
    async def stuck() -> None:
        await asyncio.sleep(60)

    async def broken() -> None:
        raise ConnectionError("redis went away")

    event = CompleteEvent(completion_requested=True)
    for refresh in (stuck, broken):
        adapter = PromptToolkitCompleter(
            CommandCompleter(lambda: ["attach"], lambda: AGENTS, cwd=files),
            refresh=refresh,
            refresh_timeout=0.05,
        )
        found = [c.text async for c in adapter.get_completions_async(Document("/attach he"), event)]
        assert found == ["proj/hera "]
