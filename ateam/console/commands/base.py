"""What a console command is: one :class:`Command` record per command, and its call.

A command declares its name, its arguments (``args``, as ``/help`` prints them), its
help line and what TAB completes, once. Dispatch, ``/help``, TAB completion and the
palettes all read the same table (:data:`ateam.console.commands.COMMANDS`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ateam.console.session import ConsoleSession, ConsoleView
from ateam.errors import UsageError

__all__ = ["Call", "Command", "Handler", "Parsed", "csv", "int_option"]

Handler = Callable[["Call"], Awaitable[None]]

_H = TypeVar("_H")


@dataclass(frozen=True)
class Command:
    """One console command."""

    name: str
    run: Handler
    args: str = ""
    """The arguments as ``/help`` shows them. TAB completion reads them too: ``ID`` is an
    agent id, ``PATH``/``D`` a path, ``a|b`` literal words, ``--opt V`` an option."""
    help: str = ""
    takes_agent: bool = False
    """The first argument is an agent id, so TAB offers the live ones."""

    @property
    def usage(self) -> str:
        return f"/{self.name} {self.args}".rstrip()


@dataclass(frozen=True)
class Parsed:
    """Command words split into positionals, ``--option VALUE`` pairs and ``--flag`` s."""

    positional: list[str]
    options: dict[str, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Call:
    """One run of a command: the session it acts on and the words typed after its name."""

    console: ConsoleSession
    command: Command
    args: list[str]
    table: Mapping[str, Command]
    """Every command (``/help`` lists them)."""

    @property
    def view(self) -> ConsoleView:
        return self.console.view

    def action(self, table: Mapping[str, _H], default: str) -> _H:
        """The handler of a sub-action the first word names (``default`` without one).

        ``/queue clear``, ``/sys edit``, ``/plan append``, ``/kb search``: a word the table
        does not know is a usage error naming the command's usage.
        """
        handler = table.get(self.args[0] if self.args else default)
        if handler is None:
            raise self.bad()
        return handler

    def bad(self, note: str = "") -> UsageError:
        """The error for arguments that do not fit the command's usage."""
        return UsageError(f"usage: {self.command.usage}{f' ({note})' if note else ''}")

    def parse(
        self,
        args: Sequence[str] | None = None,
        *,
        options: tuple[str, ...] = (),
        flags: tuple[str, ...] = (),
    ) -> Parsed:
        """Split ``args`` (the call's own by default) by the options and flags given."""
        parsed = Parsed([])
        words = iter(self.args if args is None else args)
        for word in words:
            if word in options:
                value = next(words, None)
                if value is None:
                    raise UsageError(f"{word} needs a value; usage: {self.command.usage}")
                parsed.options[word] = value
            elif word in flags:
                parsed.flags.add(word)
            elif word.startswith("--"):
                raise UsageError(f"unknown option {word}; usage: {self.command.usage}")
            else:
                parsed.positional.append(word)
        return parsed


def csv(value: str | None) -> tuple[str, ...]:
    """``a,b`` → ``("a", "b")``; ``None`` → ``()``."""
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def int_option(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{name} needs a whole number") from None
