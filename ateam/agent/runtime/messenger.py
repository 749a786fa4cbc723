"""``team.send``'s sender, as the agent's composition root imports it.

It lives in :mod:`ateam.bus.messenger` since ``ateam mcp --as`` sends through it too
(a coding agent's runtime sending as its agent); kept importable here, where the
agent's parts have always found it.
"""

from __future__ import annotations

from ateam.bus.messenger import SEND_TIMEOUT_S, TeamMessenger

__all__ = ["SEND_TIMEOUT_S", "TeamMessenger"]
