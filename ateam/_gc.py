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

Between the two, :func:`lasting` hears of objects made to live on in bulk: the
entries a listing of 10 000 agents decodes and keeps (some 40 000 containers). Left
to the collector they are walked by every full collection, 50-140 ms each here, and
those come every few listings (each listing's rows are promoted while they are
shown): the slowest listings by far. Once enough have piled up (and lasted until the
next listing) they are frozen too, collected first so no garbage is kept.

What freezing keeps that a collection would have freed is the start's garbage in
reference cycles: some 700 objects of an agent's 68 000, where collecting them would
cost 30 ms of its start. Finalizers of objects alive at exit run as before (module
teardown); only cyclic garbage made after the last collection is left to the system,
as skipping that last pass is the point.
"""

from __future__ import annotations

import gc

__all__ = ["hold", "lasting", "leave", "settle"]

_held = False
_settled = False
"""Set by :func:`settle`: ateam runs this process and sets its collector's policy."""
_FREEZE_AT = 2_000
"""Lasting objects made since the last freeze that are worth a collection to freeze.

A full collection walking 2 000 entries and whatever else is young costs a few ms;
below that the collector's own full collections are cheap enough."""
_lasting = 0


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
    global _held, _settled
    if not _held:
        return
    _held = False
    _settled = True
    gc.freeze()
    gc.enable()


def lasting(count: int) -> None:
    """``count`` containers that the process made earlier (the entries a listing
    decoded) are still kept: once enough were, what is alive is frozen.

    Does nothing in a process ateam does not run (a program using ``ateam.client``
    keeps its own collector's policy). The freeze follows one collection, so no
    garbage is kept. Listers report at their next listing what the last one made: a
    process that lists once (``ateam ps``) never pays for the collection, one that
    lists again (a console) pays once, then its full collections walk only what came
    after. Entries are acyclic: once replaced, their reference counts free them,
    frozen or not.
    """
    global _lasting
    if not _settled:
        return
    _lasting += count
    if _lasting >= _FREEZE_AT:
        _lasting = 0
        gc.collect()
        gc.freeze()


def leave() -> None:
    """The process is ending: spare the interpreter's shutdown a walk over every object."""
    gc.freeze()
