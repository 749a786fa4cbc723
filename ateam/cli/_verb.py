"""How a verb is declared: one :class:`Verb` per entry of the table ``build_parser()`` walks.

Help, the parser and (later) shell completion all read that table, so a verb exists in
one place. The argument adders here are the options more than one family takes.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

from ateam import _gc

Handler = Callable[[argparse.Namespace], int]
"""A verb's handler: its parsed arguments in, its exit status out."""

ArgsAdder = Callable[[argparse.ArgumentParser], None]
"""Adds a verb's arguments to its parser."""


def no_args(p: argparse.ArgumentParser) -> None:
    """For a verb that takes no arguments of its own."""


class Verb:
    """One ``ateam`` verb, or one action of a verb that has actions (``ateam kb add``).

    A plain class, not a dataclass: :mod:`dataclasses` imports :mod:`inspect`, a sixth of
    what ``ateam --help`` would otherwise import.
    """

    __slots__ = ("actions", "args", "handler", "help", "name")

    def __init__(
        self,
        name: str,
        help: str,
        handler: Handler | None = None,
        args: ArgsAdder = no_args,
        actions: tuple[Verb, ...] = (),
    ) -> None:
        # A verb with actions that also had a handler would never run it: argparse
        # requires an action, and the action's handler wins.
        if (handler is None) == (not actions):
            raise ValueError(f"verb {name!r}: a handler or actions, not both or neither")
        self.name = name
        self.help = help
        """One line: the verb's entry in its parent's help and its own description."""
        self.handler = handler
        """What runs it; ``None`` exactly when it has ``actions``."""
        self.args = args
        """Adds its arguments, in the order ``--help`` lists them."""
        self.actions = actions
        """Its sub-verbs: one must follow it on the command line."""

    def __repr__(self) -> str:
        return f"Verb({self.name!r})"


def chain(*adders: ArgsAdder) -> ArgsAdder:
    """One adder that runs ``adders`` in order (positionals keep that order)."""

    def add(p: argparse.ArgumentParser) -> None:
        for adder in adders:
            adder(p)

    return add


def _found(ref: str) -> Callable[..., object]:
    """The function ``ref`` (``"package.module:function"``) names, its module imported now."""
    module, _, name = ref.partition(":")
    found: Callable[..., object] = getattr(importlib.import_module(module), name)
    return found


def handler_at(ref: str) -> Handler:
    """The handler ``ref`` names, its module imported only when the verb runs: a verb
    must not pay for every other verb's imports (the client, the console, the KB)."""

    def run(args: argparse.Namespace) -> int:
        handler = _found(ref)
        _gc.settle()  # the verb's modules are in: the collector may run again
        status = handler(args)
        assert isinstance(status, int), f"{ref} returned {status!r}, not an exit status"
        return status

    return run


def add_redis_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis",
        metavar="URL",
        help="redis://, rediss://, unix://, redis+cluster:// or redis+sentinel:// URL",
    )


def add_project_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--project",
        metavar="NAME",
        help="the project of a bare agent name (default: the nearest .ateam/project.yaml)",
    )


def add_json_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--json``: the verb prints its data as JSON, in the shape docs/console.md gives."""
    p.add_argument("--json", action="store_true", help=f"print JSON instead: {what}")


def port_number(value: str) -> int:
    """A TCP port, as argparse's ``type=``: 0 (any free port) to 65535."""
    port = int(value)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535; got {port}")
    return port


def project_verb_options(p: argparse.ArgumentParser) -> None:
    """What every action of a verb on a whole project (``tasks``, ``context``) takes last."""
    add_json_option(p, "the task or item, or a list of them")
    add_redis_option(p)
    p.add_argument(
        "--project",
        metavar="NAME",
        help="the project (default: the nearest .ateam/project.yaml)",
    )
