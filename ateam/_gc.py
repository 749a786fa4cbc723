"""The garbage collector held off while a process starts, and spared its exit.

Starting a verb or an agent imports a few hundred modules: nearly every object made
then (modules, classes, validators, tables) lives as long as the process. CPython's
cyclic collector still walks them, over and over as they pile up (about 40 ms of an
``ateam send`` here), and once more, all of them, while the interpreter shuts down
(another 50 ms). So a process ``ateam`` starts (not a test calling ``main()``) runs:

* :func:`hold` first: no collection while it starts;
* :func:`settle` once what it runs is imported: what exists is frozen
  (:func:`gc.freeze`: never walked again) and the collector turned back on, for
  whatever the process does next, for hours if it is an agent or a console;
* :func:`leave` at its end: everything frozen, so the shutdown frees objects by their
  reference counts without a last walk over them.

What freezing keeps that a collection would have freed is the start's garbage in
reference cycles: some 700 objects of an agent's 68 000, where collecting them would
cost 30 ms of its start. Finalizers of objects alive at exit run as before (module
teardown); only cyclic garbage made after the last collection is left to the system,
as skipping that last pass is the point.
"""

from __future__ import annotations

import gc

__all__ = ["hold", "leave", "settle"]

_held = False


def hold() -> None:
    """Turn the collector off while the process starts (if it was on)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def settle() -> None:
    """The start is over: freeze what it made and turn the collector back on.

    Does nothing unless :func:`hold` turned it off, so a program that had turned its
    collector off itself keeps it off.
    """
    global _held
    if not _held:
        return
    _held = False
    gc.freeze()
    gc.enable()


def leave() -> None:
    """The process is ending: spare the interpreter's shutdown a walk over every object."""
    gc.freeze()
