"""Which agent a console line names: the rules of :mod:`ateam.client.names`, in the console.

``/attach ze`` means ``hello/zeus`` when the console stands in project ``hello`` and
``ze`` starts one agent's name there, or, failing that, exactly one name on the bus.
"""

from __future__ import annotations

from collections.abc import Collection

from ateam.client.names import resolve_agent
from ateam.config import project_here
from ateam.errors import AmbiguousName, UsageError

__all__ = ["agent_named"]


def agent_named(text: str, known: Collection[str]) -> str | None:
    """The id among ``known`` that ``text`` names; ``None`` when it names none.

    Blocking (it reads the project around the working directory): run it in a thread.

    Raises:
        AmbiguousName: ``text`` starts several names, here or on the whole bus.
    """
    here = project_here() if "/" not in text else None
    for project in dict.fromkeys((here, None)):
        try:
            found = resolve_agent(text, known, project=project)
        except AmbiguousName:
            raise
        except UsageError:
            return None  # a bare name that no agent anywhere has
        if found in known:
            return found
    return None
