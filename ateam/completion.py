"""TAB completion for console input (SPEC §6), shared by every front end.

:class:`CommandCompleter` knows nothing about terminals: given a line and a cursor it
returns :class:`Completion` records (text to insert and the offset it replaces from).
It completes command names after ``/``, agent ids where a command takes one, the
literal words and ``--options`` a command's usage lists, and filesystem paths (tilde,
quotes and spaces). Quoting follows :func:`shlex.split`, which is how the controller
reads a command line, so a completed argument always parses back to the real value.

:class:`ShellTab` gives both consoles TAB as a shell has it: the first press completes
or extends the word to what its matches share, the next lists them, and further presses
step through them. :class:`PromptToolkitCompleter` adapts the completer to
prompt-toolkit's menu (the plain console's F1 palette).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from prompt_toolkit.completion import CompleteEvent, Completer
from prompt_toolkit.completion import Completion as PtCompletion
from prompt_toolkit.document import Document

AGENT_COMMANDS: frozenset[str] = frozenset({"attach", "tail", "untail", "who", "stop"})
"""The default for a front end whose command table does not say which commands take an
agent id (the console passes its own, from ``takes_agent`` in its command table)."""

PATH_PREFIXES = ("./", "../", "/", "~")
"""An argument starting like this is completed as a path whatever the command."""

_AGENT_PLACEHOLDERS = frozenset({"ID", "AGENT"})
_PATH_PLACEHOLDERS = frozenset({"PATH", "DIR", "FILE", "D", "CWD"})
_COMMAND_PLACEHOLDERS = frozenset({"COMMAND", "CMD"})
_OPTION = re.compile(r"--[A-Za-z][\w-]*")
_HOME = re.compile(r"~[\w.-]*")
_LITERAL = re.compile(r"[a-z][a-z0-9_-]*")
"""A word to type as is (``show``, ``clear``); placeholders are upper case."""
MAX_PATH_RESULTS = 500
"""A huge directory must not stall a keystroke; the user can type more of the name."""


@dataclass(frozen=True)
class Completion:
    """Replace ``line[start:cursor]`` with ``text``; ``display`` is what a menu shows."""

    text: str
    start: int
    display: str

    def apply(self, line: str, cursor: int | None = None) -> tuple[str, int]:
        """The line after this completion, and where the cursor ends up."""
        end = len(line) if cursor is None else cursor
        return line[: self.start] + self.text + line[end:], self.start + len(self.text)


@dataclass
class _Word:
    """The word under the cursor: where it starts, its unquoted value, an open quote."""

    start: int
    value: str
    quote: str | None


def _split(text: str, offset: int) -> tuple[list[str], _Word]:
    """Words before the cursor and the word being typed, read the way shlex does.

    Unlike :func:`shlex.split` this never fails: an unterminated quote simply means
    the cursor is inside it, which is the case completion has to handle.
    """
    words: list[str] = []
    value: list[str] = []
    start: int | None = None
    quote: str | None = None
    i = 0
    while i < len(text):
        char = text[i]
        if quote is not None:
            quote, i = _in_quotes(text, i, quote, value)
        elif char.isspace():
            if start is not None:
                words.append("".join(value))
                value, start = [], None
        else:
            if start is None:
                start = i
            if char in "'\"":
                quote = char
            elif char == "\\" and i + 1 < len(text):
                i += 1
                value.append(text[i])
            elif char != "\\":
                value.append(char)
        i += 1
    if start is None:
        return words, _Word(offset + len(text), "", None)
    return words, _Word(offset + start, "".join(value), quote)


def _in_quotes(text: str, i: int, quote: str, value: list[str]) -> tuple[str | None, int]:
    """One character inside quotes; returns the quote still open and the index read to.

    As in shlex's POSIX mode, a backslash inside double quotes escapes only ``"`` and
    itself, and nothing is special inside single quotes.
    """
    char = text[i]
    if char == quote:
        return None, i
    if quote == '"' and char == "\\" and i + 1 < len(text) and text[i + 1] in '"\\':
        value.append(text[i + 1])
        return quote, i + 1
    value.append(char)
    return quote, i


@dataclass(frozen=True)
class _Usage:
    """What a command's usage string says about its arguments."""

    slots: tuple[tuple[str, ...], ...] = ()
    """Alternatives per positional argument, e.g. ``("show", "edit")`` or ``("ID",)``."""
    variadic: bool = False
    """The last slot repeats (``PATH…``)."""
    valued: Mapping[str, str] = field(default_factory=dict)
    """Options that take a value, with their placeholder: ``--cwd`` → ``D``."""
    options: tuple[str, ...] = ()


def _parse_usage(usage: str) -> _Usage:
    """Read ``/kb add --scope S PATH…``-style usage text (the first word is the command)."""
    tokens = usage.split()[1:]
    slots: list[tuple[str, ...]] = []
    valued: dict[str, str] = {}
    variadic = False
    i = 0
    while i < len(tokens):
        token = tokens[i]
        core = token.strip("[]")
        if core.startswith("--") and "|" not in core:
            # "[--state S]" and "--scope S" take a value; "[--json]" does not.
            if not token.endswith("]") and i + 1 < len(tokens):
                valued[core] = tokens[i + 1].strip("[]")
                i += 1
        elif core:
            variadic = core.endswith(("…", "..."))
            alternatives = core.rstrip(".…").split("|")
            slots.append(tuple(a for a in alternatives if a))
        i += 1
    options = tuple(dict.fromkeys(_OPTION.findall(usage)))
    return _Usage(tuple(slots), variadic, valued, options)


def _placeholder_kind(alternatives: Iterable[str]) -> str | None:
    names = set(alternatives)
    if names & _AGENT_PLACEHOLDERS:
        return "agent"
    if names & _PATH_PLACEHOLDERS:
        return "path"
    if names & _COMMAND_PLACEHOLDERS:
        return "command"
    return None


class _HasUsage(Protocol):
    @property
    def usage(self) -> str: ...


class CommandCompleter:
    """Completions for one console line; the sources are read afresh on every call.

    ``commands`` returns the command names; when it returns a mapping whose values
    have a ``usage`` (the controller's command table), the usage text decides what each
    argument completes to. ``agents`` returns the live agent ids. ``cwd`` anchors
    relative paths (the process's working directory when None).
    """

    def __init__(
        self,
        commands: Callable[[], Iterable[str]],
        agents: Callable[[], Iterable[str]],
        *,
        cwd: str | os.PathLike[str] | None = None,
        agent_commands: Iterable[str] = AGENT_COMMANDS,
        path_commands: Iterable[str] = (),
    ) -> None:
        self._commands = commands
        self._agents = agents
        self.cwd = cwd
        self.agent_commands = set(agent_commands)
        """Commands whose first argument is an agent id; add to it for new commands."""
        self.path_commands = set(path_commands)
        """Commands whose every argument is a path, beyond what usages say."""

    # entry point -----------------------------------------------------------------------

    def complete(self, line: str, cursor: int | None = None) -> list[Completion]:
        """Completions for the word before ``cursor`` (the end of the line by default)."""
        head = _head(line, cursor)
        if not head.startswith("/"):
            # Plain text for the agent (or a "# overlay" line): only paths are guessed.
            _, word = _split(head, 0)
            return self._paths(word) if _looks_like_path(word.value) else []
        words, word = _split(head[1:], 1)
        if not words:
            return self._command_names(word) if word.start == 1 else []
        return self._argument(words[0], words[1:], word)

    def wants_agents(self, line: str, cursor: int | None = None) -> bool:
        """Whether the cursor is on an agent id, so a front end may refresh the list first."""
        head = _head(line, cursor)
        if not head.startswith("/"):
            return False
        words, word = _split(head[1:], 1)
        if not words or _is_option(word):
            return False
        return self._slot(words[0], self._usage(words[0]), words[1:])[0] == "agent"

    # what the cursor is on -------------------------------------------------------------

    def _command_table(self) -> tuple[list[str], Mapping[str, object]]:
        source = self._commands()
        table: Mapping[str, object] = source if isinstance(source, Mapping) else {}
        return sorted(source), table

    def _command_names(self, word: _Word) -> list[Completion]:
        names, _ = self._command_table()
        found = [name for name in names if name.startswith(word.value)]
        space = " " if len(found) == 1 else ""
        return [Completion(f"/{name}{space}", 0, f"/{name}") for name in found]

    def _usage(self, command: str) -> _Usage:
        _, table = self._command_table()
        return _parse_usage(str(getattr(table.get(command), "usage", "")))

    def _argument(self, command: str, done: list[str], word: _Word) -> list[Completion]:
        usage = self._usage(command)
        kind, literals = self._slot(command, usage, done)
        if _is_option(word):
            return _words(word, [o for o in usage.options if o.startswith(word.value)])
        if kind == "agent":
            return self._agent_ids(word)
        # An argument the usage says nothing about is still a path when it looks like
        # one, or when the user opened a quote (quotes are how paths with spaces start).
        if kind == "path" or _looks_like_path(word.value):
            return self._paths(word)
        if kind is None and not literals and word.quote is not None:
            return self._paths(word)
        if kind == "command":
            names, _ = self._command_table()
            return _words(word, [n for n in names if n.startswith(word.value.lstrip("/"))])
        return _words(word, [w for w in literals if w.startswith(word.value)])

    def _slot(self, command: str, usage: _Usage, done: list[str]) -> tuple[str | None, list[str]]:
        """What the next argument is: a kind of placeholder, or literal words to choose."""
        position = 0
        i = 0
        while i < len(done):
            if done[i] in usage.valued:
                if i + 1 == len(done):
                    # The cursor is on this option's value: "--cwd D" wants a path.
                    return _placeholder_kind([usage.valued[done[i]]]), []
                i += 1
            elif not done[i].startswith("-"):
                position += 1
            i += 1
        if command in self.path_commands:
            return "path", []
        if position < len(usage.slots):
            alternatives = usage.slots[position]
        elif usage.variadic and usage.slots:
            alternatives = usage.slots[-1]
        elif position == 0 and command in self.agent_commands:
            return "agent", []
        else:
            return None, []
        kind = _placeholder_kind(alternatives)
        if kind is None and position == 0 and command in self.agent_commands:
            kind = "agent"
        literals = [a for a in alternatives if _LITERAL.fullmatch(a)]
        return kind, literals

    # sources ---------------------------------------------------------------------------

    def _agent_ids(self, word: _Word) -> list[Completion]:
        typed = word.value
        found = sorted(
            agent
            for agent in self._agents()
            if agent.startswith(typed) or agent.split("/", 1)[-1].startswith(typed)
        )
        return _words(word, found)

    def _paths(self, word: _Word) -> list[Completion]:
        typed = word.value
        if typed == "~":
            return [_replace_word(word, "~/", "~/", final=False)]
        folder, _, stem = typed.rpartition("/")
        typed_dir = f"{folder}/" if "/" in typed else ""
        base = Path(os.path.expanduser(typed_dir or "."))
        if not base.is_absolute():
            base = Path(self.cwd if self.cwd is not None else os.getcwd()) / base
        try:
            with os.scandir(base) as listing:
                entries = sorted(
                    (
                        entry
                        for entry in listing
                        if entry.name.startswith(stem)
                        and (stem.startswith(".") or not entry.name.startswith("."))
                    ),
                    key=lambda entry: entry.name,
                )[:MAX_PATH_RESULTS]
        except OSError:
            return []
        results: list[Completion] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            name = entry.name + ("/" if is_dir else "")
            results.append(
                _replace_word(word, typed_dir + name, name, final=not is_dir and len(entries) == 1)
            )
        return results


def _head(line: str, cursor: int | None) -> str:
    return line if cursor is None else line[: max(0, min(cursor, len(line)))]


def _is_option(word: _Word) -> bool:
    return word.value.startswith("-") and word.quote is None


def _looks_like_path(value: str) -> bool:
    return value.startswith(PATH_PREFIXES)


def _words(word: _Word, found: list[str]) -> list[Completion]:
    """Whole-word completions; a unique one gets the space that ends the argument."""
    return [_replace_word(word, value, value, final=len(found) == 1) for value in found]


def _replace_word(word: _Word, value: str, display: str, *, final: bool) -> Completion:
    """``value`` written back as the word at ``word.start``, quoted so shlex reads it back.

    ``final`` closes an open quote and adds the space that ends the argument (a file, a
    unique agent id); a directory is left open so the next TAB can go deeper.
    """
    text = _quote(value, word.quote, close=final) + (" " if final else "")
    return Completion(text, word.start, display)


def _quote(value: str, quote: str | None, *, close: bool) -> str:
    """Quote ``value`` as one shell word, keeping the quote style the user opened."""
    if quote == '"':
        inner = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{inner}"' if close else f'"{inner}'
    if quote == "'" and "'" not in value:
        return f"'{value}'" if close else f"'{value}"
    if not value or shlex.quote(value) == value:
        return value
    # A leading "~" or "~user/" stays outside the quotes so it still reads as home.
    home, slash, rest = value.partition("/")
    if slash and _HOME.fullmatch(home):
        return f"{home}/{shlex.quote(rest)}" if rest else f"{home}/"
    return shlex.quote(value)


@dataclass(frozen=True)
class Tab:
    """What one TAB did: the line and cursor after it, and candidates to show, if any."""

    line: str
    cursor: int
    candidates: tuple[str, ...] = ()
    """Set when this TAB lists the choices instead of changing the line."""


def common_prefix(texts: Iterable[str]) -> str:
    """The longest string every one of ``texts`` starts with."""
    items = list(texts)
    if not items:
        return ""
    low, high = min(items), max(items)  # the two that differ soonest, in sort order
    size = 0
    while size < len(low) and low[size] == high[size]:
        size += 1
    return low[:size]


class ShellTab:
    """TAB as a shell has it, for front ends that draw their own line (both consoles).

    The first press completes a word with one match, or extends it to what all its
    matches share; a press that cannot extend it lists the matches (:attr:`Tab.candidates`,
    for the front end to show); pressing again then steps through them, one per press,
    wrapping round. Any other line starts afresh. ``press(line, cursor)`` returns None
    when there is nothing to complete.
    """

    def __init__(self, completer: CommandCompleter) -> None:
        self.completer = completer
        self.completions: list[Completion] = []
        self.index = -1
        """The completion last put in the line, or -1 while none is (listed only)."""
        self._origin: tuple[str, int] | None = None
        self._produced: tuple[str, int] | None = None

    def reset(self) -> None:
        self.completions, self.index = [], -1
        self._origin = self._produced = None

    def press(self, line: str, cursor: int | None = None) -> Tab | None:
        at = len(line) if cursor is None else cursor
        if self._produced == (line, at) and self._origin is not None and self.completions:
            return self._step()
        self.reset()
        found = self.completer.complete(line, at)
        if not found:
            return None
        if len(found) == 1:
            return self._done(*found[0].apply(line, at))
        extended = _extension(found, line, at)
        if extended is not None:
            return self._done(*extended)
        # Nothing more to add: list them, and let the next press start stepping.
        self.completions, self._origin = found, (line, at)
        self._produced = (line, at)
        return Tab(line, at, tuple(item.display for item in found))

    def _step(self) -> Tab:
        assert self._origin is not None
        self.index = (self.index + 1) % len(self.completions)
        line, cursor = self.completions[self.index].apply(*self._origin)
        self._produced = (line, cursor)
        return Tab(line, cursor)

    def _done(self, line: str, cursor: int) -> Tab:
        self._produced = (line, cursor)
        return Tab(line, cursor)


def _extension(found: list[Completion], line: str, cursor: int) -> tuple[str, int] | None:
    """The line with the word extended to what every match shares, if that adds to it.

    What is shared may differ from what was typed and still add to it: ``ze`` matches
    ``proj/zeus`` and ``proj/zephyr`` by their bare names, and becomes ``proj/ze``.
    """
    starts = {item.start for item in found}
    if len(starts) != 1:
        return None
    start = starts.pop()
    shared = common_prefix(item.text for item in found)
    typed = line[start:cursor]
    if len(shared) <= len(typed) or shared == typed:
        return None
    # What was typed must survive in the result: whole (a path may gain a quote before
    # it), or as the start of a bare name. `ze` over `p1/zeus` and `p2/zephyr` shares
    # only `p`, which would drop the `ze`.
    kept = (
        shared.lstrip("'\"").startswith(typed.lstrip("'\"")),
        shared.rpartition("/")[2].startswith(typed),
    )
    if not any(kept):
        return None
    return Completion(shared, start, shared).apply(line, cursor)


def columns(items: Iterable[str], width: int) -> list[str]:
    """``items`` laid out in columns across ``width`` cells, down then across, as ``ls``."""
    names = list(items)
    if not names:
        return []
    cell = max(len(name) for name in names) + 2
    across = max(1, width // cell)
    rows = -(-len(names) // across)
    return ["".join(name.ljust(cell) for name in names[row::rows]).rstrip() for row in range(rows)]


class PromptToolkitCompleter(Completer):
    """:class:`CommandCompleter` as a prompt-toolkit completer (it draws the menu).

    ``refresh``, when given, is awaited before agent ids are completed (the console
    passes its registry refresh), so an agent that joined a moment ago is offered
    without waiting for the next registry poll. It gets ``refresh_timeout`` seconds;
    after that, or if it fails, the ids already known are used.
    """

    def __init__(
        self,
        completer: CommandCompleter,
        *,
        refresh: Callable[[], Awaitable[object]] | None = None,
        refresh_timeout: float = 0.5,
    ) -> None:
        self.completer = completer
        self.refresh = refresh
        self.refresh_timeout = refresh_timeout

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[PtCompletion]:
        cursor = document.cursor_position
        for item in self.completer.complete(document.text, cursor):
            yield PtCompletion(item.text, start_position=item.start - cursor, display=item.display)

    async def get_completions_async(
        self, document: Document, complete_event: CompleteEvent
    ) -> AsyncGenerator[PtCompletion, None]:
        if self.refresh is not None and self.completer.wants_agents(
            document.text, document.cursor_position
        ):
            # A completion must not fail because Redis blinked: stale ids are still useful.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.refresh_timeout):
                    await self.refresh()
        for item in self.get_completions(document, complete_event):
            yield item
