"""What a console makes of the agents it knows: banners about them, and whom it follows.

Both are decisions about one change or one set of agents, kept apart from the session
that acts on them (:mod:`ateam.console.session`), so each reads on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ateam.client import AgentStatus
from ateam.wire.modes import PLAN_AWAITING

__all__ = ["agent_banners", "auto_tails"]


def agent_banners(
    old: AgentStatus | None, view: AgentStatus, *, waiting: bool
) -> list[tuple[str, str]]:
    """The banners ``(text, level)`` an agent's change from ``old`` to ``view`` calls for.

    Losing or regaining its heartbeat is news; so is starting to wait for an approval
    (when ``waiting``: front ends that do not show it otherwise). An agent that cannot
    write its state (a full disk) is a banner in every front end: its work is paused, not
    lost, and it resumes by itself, so both ends are news.
    """
    banners: list[tuple[str, str]] = []
    if old is not None and old.connected and not view.connected:
        banners.append((f"agent {view.id} is {view.state}", "warn"))
    elif old is not None and not old.connected and view.connected:
        banners.append((f"agent {view.id} is back", "info"))
    if waiting and view.state == "waiting" and (old is None or old.state != "waiting"):
        banners.append((f"agent {view.id} is waiting for approval", "alert"))
    awaiting = view.entry.plan == PLAN_AWAITING
    if awaiting and (old is None or old.entry.plan != PLAN_AWAITING):
        banners.append(
            (f"agent {view.id}'s plan awaits approval (/plan approve {view.id})", "alert")
        )
    was_blocked = old is not None and old.state == "blocked"
    if view.state == "blocked" and not was_blocked:
        banners.append((f"agent {view.id} is {view.entry.alert or 'blocked'}", "alert"))
    elif was_blocked and view.connected and view.state != "blocked":
        banners.append((f"agent {view.id} is no longer blocked; its work resumes", "info"))
    return banners


def auto_tails(
    known: Mapping[str, AgentStatus],
    current: set[str],
    *,
    limit: int,
    skip: Iterable[str],
) -> set[str]:
    """Up to ``limit`` live agents of ``known`` to follow unasked, none of ``skip``.

    Those already followed (``current``) stay, so the column does not flicker as states
    change; free places go to the agents doing something, then by id. When every place
    is taken by an agent still eligible, nothing else is looked at: the answer costs the
    size of the column, not of the team.
    """
    skipped = set(skip)

    def eligible(agent: str) -> bool:
        view = known.get(agent)
        return view is not None and view.connected and agent not in skipped

    if len(current) == limit and all(eligible(agent) for agent in current):
        return current
    live = [v for v in known.values() if v.connected and v.id not in skipped]
    wanted = {v.id for v in live if v.id in current}
    for view in sorted(live, key=lambda v: (v.state not in ("busy", "waiting"), v.id)):
        if len(wanted) >= limit:
            break
        wanted.add(view.id)
    return set(sorted(wanted)[: max(limit, 0)])
