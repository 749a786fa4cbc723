"""How wide the side panes are for a terminal's width, and whether they are shown.

The attached agent's stream is what a user reads, so it gets the width: the side panes
(the agent list on the left, the tails on the right) shrink as the terminal narrows,
the tails fold away first and the agent list next. What they showed is still reachable
when they are folded: the attached agent's name and state are in the stream's title,
agents waiting for an approval in the banners, every agent behind F1, and F3 brings
both panes back (at a narrow width, a narrow pair of them) or puts them away.

The rules are a table of breakpoints, read from the widest down; the app applies what
:func:`sides_for` returns on every resize and every F3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class Sides:
    """Widths of the side panes in cells; 0 is folded away."""

    agents: int
    tails: int

    @property
    def shown(self) -> bool:
        return bool(self.agents or self.tails)


class SidesChoice(StrEnum):
    """What the user asked for with F3; ``auto`` until they press it."""

    AUTO = "auto"
    SHOWN = "shown"
    HIDDEN = "hidden"


BREAKPOINTS: tuple[tuple[int, Sides], ...] = (
    (160, Sides(agents=34, tails=32)),
    (120, Sides(agents=28, tails=26)),
    (100, Sides(agents=26, tails=0)),
    (0, Sides(agents=0, tails=0)),
)
"""``(least terminal width, sides)``, widest first: the stream keeps 66 cells or more."""

SHOWN_NARROW = Sides(agents=24, tails=22)
"""F3 below the width where both fit: both, narrow (the user asked to see them)."""
HIDDEN = Sides(agents=0, tails=0)


def auto_sides(width: int) -> Sides:
    """The side panes a terminal ``width`` cells wide gets unasked."""
    for least, sides in BREAKPOINTS:
        if width >= least:
            return sides
    return HIDDEN


def _shown(width: int) -> Sides:
    sides = auto_sides(width)
    return sides if sides.agents and sides.tails else SHOWN_NARROW


def _hidden(width: int) -> Sides:
    return HIDDEN


_CHOICES: dict[SidesChoice, Callable[[int], Sides]] = {
    SidesChoice.AUTO: auto_sides,
    SidesChoice.SHOWN: _shown,
    SidesChoice.HIDDEN: _hidden,
}


def sides_for(width: int, choice: SidesChoice = SidesChoice.AUTO) -> Sides:
    """The side panes for a terminal ``width`` cells wide, after the user's ``choice``."""
    return _CHOICES[choice](width)


def toggled(width: int, choice: SidesChoice) -> SidesChoice:
    """F3: put the side panes away when they show, else bring them back."""
    return SidesChoice.HIDDEN if sides_for(width, choice).shown else SidesChoice.SHOWN
