"""Which agent or task a person meant: bare names and unique prefixes.

People type ``ze`` for ``hello/zeus`` and ``3f2`` for ``t-3f2a91c0de``, the way git takes a
short hash and docker a short container id. One set of rules for every front end (the
verbs, the consoles' ``/attach``):

* A name that exists is itself: exact beats prefix, so ``ze`` names an agent ``ze`` even
  beside ``zeus``.
* Otherwise a prefix that starts exactly one candidate names it.
* A prefix that starts several is refused with :class:`~ateam.errors.AmbiguousName`
  (``name.ambiguous``), which lists them.
* A text that names nothing is returned as it was typed (a bare name within its project),
  so the lookup after it fails the way it always did: ``agent.not_found``,
  ``task.not_found``.

The functions over lists (:func:`resolve_agent`, :func:`resolve_task`) are pure; the
``*_on`` ones read the candidates from the bus first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ateam.errors import AmbiguousName, UsageError

if TYPE_CHECKING:
    from ateam.client.team import Team

__all__ = [
    "TASK_PREFIX",
    "agent_candidates",
    "resolve_agent",
    "resolve_agent_on",
    "resolve_task",
    "resolve_task_on",
]

TASK_PREFIX = "t-"
"""How every board task id starts: a prefix may leave it out (``3f2`` for ``t-3f2…``)."""

SHOWN_CANDIDATES = 8
"""At most this many candidates named in one ambiguity error (the rest are counted)."""


def resolve_agent(given: str, known: Iterable[str], *, project: str | None) -> str:
    """The agent id ``given`` names among the ids ``known`` (``PROJECT/NAME`` each).

    Args:
        given: what was typed: ``PROJECT/NAME``, ``NAME`` or a prefix of either name.
        known: the ids to choose from (the registry's, or a project's configured agents).
        project: the project a bare name belongs to (``--project``, or the one around
            the working directory); ``None`` when there is none, and then a bare name is
            looked for in every project.

    Returns:
        The id it names; else ``given`` in its project as typed, for the caller's lookup
        to report.

    Raises:
        AmbiguousName: the prefix starts several ids.
        UsageError: a bare name with no project that matches no agent anywhere.
    """
    ids = sorted(set(known))
    their_project, slash, name = given.rpartition("/")
    scope = their_project if slash else project
    if scope is not None:
        within = [i for i in ids if i.partition("/")[0] == scope]
        found = _pick(name, within, key=_name_of, what=f"agents of {scope}")
        return found if found is not None else f"{scope}/{name}"
    found = _pick(given, ids, key=_name_of, what="agents")
    if found is None:
        raise UsageError(
            f"no agent is named {given!r}, and there is no project here to look in; "
            "give a full id PROJECT/NAME or --project NAME (`ateam ps` lists the agents)"
        )
    return found


def resolve_task(given: str, known: Iterable[str]) -> str:
    """The task id ``given`` names among ``known``, with or without its ``t-``.

    Raises:
        AmbiguousName: the prefix starts several task ids.
    """
    found = _pick(given.removeprefix(TASK_PREFIX), sorted(set(known)), key=_bare_task, what="tasks")
    return found if found is not None else given


def _name_of(agent_id: str) -> str:
    return agent_id.partition("/")[2]


def _bare_task(task_id: str) -> str:
    return task_id.removeprefix(TASK_PREFIX)


def _pick(typed: str, ids: list[str], *, key: Callable[[str], str], what: str) -> str | None:
    """The one id whose ``key`` is ``typed``, else the one it starts; ``None``: no match.

    ``what`` names the candidates in an ambiguity error: ``agents of hello``, ``tasks``.
    """
    exact = [i for i in ids if key(i) == typed]
    if len(exact) == 1:
        return exact[0]
    matches = exact or [i for i in ids if typed and key(i).startswith(typed)]
    if not matches:
        return None
    if len(matches) == 1:
        return matches[0]
    shown = ", ".join(matches[:SHOWN_CANDIDATES])
    more = len(matches) - SHOWN_CANDIDATES
    if more > 0:
        shown += f" and {more} more"
    if exact:  # one name in several projects, and no project here to choose
        message = (
            f"no project here, and {typed!r} is an agent of several projects: {shown}; "
            "give a full id PROJECT/NAME or --project NAME"
        )
    else:
        message = f"{typed!r} could be any of the {what}: {shown}; type more of the name"
    raise AmbiguousName(message, detail={"given": typed, "candidates": matches})


async def agent_candidates(team: Team) -> list[str]:
    """Every agent id the registry lists: running, recently gone, or exited for good."""
    return [view.id for view in await team.agents()]


async def resolve_agent_on(
    team: Team, given: str, *, project: str | None, also: Iterable[str] = ()
) -> str:
    """:func:`resolve_agent` over the agents on ``team``'s bus and the ids in ``also``
    (a project's configured agents, say, which may not be running)."""
    return resolve_agent(given, [*await agent_candidates(team), *also], project=project)


async def resolve_task_on(team: Team, project: str, given: str) -> str:
    """:func:`resolve_task` over the tasks on ``project``'s board."""
    return resolve_task(given, [task.id for task in await team.tasks.ls(project)])
