"""The garbage collector held off while a process starts, and spared its exit.

Starting a verb or an agent imports a few hundred modules: nearly every object made
then (modules, classes, validators, tables) lives as long as the process. CPython's
cyclic collector still walks them, over and over as they pile up — about 40 ms of an
``ateam send`` here — and once more, all of them, while the interpreter shuts down
(another 50 ms). So a process ``ateam`` starts (not a test calling ``main()``) runs:

* :func:`hold` first: no collection while it starts;
* :func:`settle` once what it runs is imported: the collector back on for whatever the
  process does next; for an agent, which runs for hours, after one collection of what
  starting left behind and :func:`gc.freeze` of the survivors, never walked again;
* :func:`leave` at its end: everything frozen, so the shutdown frees objects by their
  reference counts without a last walk over them.

Nothing is kept that would otherwise have been freed: an agent's start's garbage is
collected before anything is frozen, a verb's once its collector runs again, and at exit
the memory goes back to the system either way. Finalizers of objects alive at exit run
as before (module teardown); only garbage in reference cycles made after the last
collection is left to the system, as skipping the last pass is the point.
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


def settle(*, freeze: bool = False) -> None:
    """The start is over: the collector back on. Does nothing unless :func:`hold` turned
    it off.

    With ``freeze`` (a process that lives for hours: an agent), the start's garbage is
    collected first and what survives is frozen, never to be walked again; without (a
    verb), the collector just resumes, and its first full pass, if the verb lives long
    enough to reach one, walks them once as it always would.
    """
    global _held
    if not _held:
        return
    _held = False
    if freeze:
        gc.collect()
        gc.freeze()
    gc.enable()


def leave() -> None:
    """The process is ending: spare the interpreter's shutdown a walk over every object."""
    gc.freeze()
