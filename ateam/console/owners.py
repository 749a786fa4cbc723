"""Ownership changes as a reader wants them: a one-call claim's come and go left out.

``ateam send``, ``ateam stop`` and a console's one-off writes own an agent for the
milliseconds of one call. The agent notices each claim and its release and says so
(``owner is now send:…``, then ``owner is now nobody``): two lines of churn per call,
which an ``/attach`` replaying the agent's recent past would show by the dozen. Here an
ownership change to a one-call claim is held back; when the ownership settles again
(a console, or nobody) the whole run is shown as that one change — or not at all when
it ends with the owner it started from.
"""

from __future__ import annotations

from ateam.client import Event, EventType, OwnerKind
from ateam.wire import events as wire

__all__ = ["OwnerFold", "one_call"]

CONSOLE_SESSION = "console:"
"""How a console's session id starts (``session_id("console")``)."""


def one_call(change: wire.OwnershipChange) -> bool:
    """Whether ``change`` hands the agent to a claim that lasts one call."""
    if change.owner is None:
        return False
    if change.kind is not None:
        return change.kind == OwnerKind.CALL
    # An agent from before ownership events named the claim's kind: a console's session
    # id says it is one; every other holder (a verb, a script) makes one-call claims.
    return not change.owner.startswith(CONSOLE_SESSION)


class OwnerFold:
    """Decides, event by event, which ownership changes of each agent are shown."""

    def __init__(self) -> None:
        self._before: dict[str, str | None] = {}
        """Per agent in a run of one-call claims: the owner the run started from."""

    def shown(self, event: Event) -> bool:
        """Whether ``event`` is shown; every event other than ``ownership`` is."""
        if event.type != EventType.OWNERSHIP:
            return True
        change = event.payload
        if not isinstance(change, wire.OwnershipChange):
            return True  # malformed: the renderer says so
        if one_call(change):
            self._before.setdefault(event.agent, change.previous)
            return False
        if event.agent not in self._before:
            return True
        # The run is over: shown as one change, unless the owner is the one it began with.
        return change.owner != self._before.pop(event.agent)
