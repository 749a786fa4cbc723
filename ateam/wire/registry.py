"""What an agent publishes about itself, and how a reader of the registry sees it.

:class:`~ateam.wire.results.AgentEntry` is the one shape of the registry entry: the
agent's heartbeat writes it (:mod:`ateam.bus.registry`), its ``status`` reply extends it
with the live fields (:class:`~ateam.wire.results.StatusResult`), and every reader gets
it back. :class:`FinalExit` is the record of a process that will not be restarted, and
:class:`AgentStatus` an entry with its liveness, as ``ps`` and the consoles list it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields

from ateam.constants import HEARTBEAT_TTL_S
from ateam.wire.entry import AgentEntry

__all__ = ["AgentEntry", "AgentStatus", "FinalExit"]


@dataclass(frozen=True, slots=True)
class FinalExit:
    """An agent's process that ended for good (a supervisor does not restart it).

    Written by the supervisor into the project's ``exits`` hash, so ``ps`` lists the agent
    (state ``exited``) with the reason and the file to move aside, until the agent joins
    again or someone acknowledges it (:meth:`ateam.bus.registry.Registry.clear_exit`).
    """

    agent: str
    code: int
    """The exit status (``12`` invalid configuration, ``20`` damaged state...)."""
    reason: str
    """Why it is not restarted, for people."""
    cause: str = ""
    """The agent's last error line."""
    file: str | None = None
    """The damaged file to move aside before starting it again, when that is the cure."""
    host: str = ""
    at: float = 0.0
    """When it exited, in seconds since the epoch."""

    def alert(self) -> str:
        """The ``ps`` ALERT cell: what happened, why, and what to do."""
        head = f"exited {self.code}, not restarted: {self.reason}"
        if self.file:
            return f"{head}; move {self.file} aside, then start it"
        # The agent's own line says which setting (a model's missing SDK, a typo): the
        # reason alone ("its configuration is invalid") would send people to its log.
        cause = _ONE_LINE_HEAD.sub("", self.cause).rstrip(":")
        return f"{head}: {cause}" if cause else head

    def to_wire(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: object) -> FinalExit | None:
        """The record in ``data`` (a decoded payload); ``None`` if it is not one."""
        if not isinstance(data, dict):
            return None
        try:
            found = cls(**{k: v for k, v in data.items() if k in _EXIT_FIELDS})
        except TypeError:
            return None
        texts = (found.agent, found.reason, found.cause, found.host, found.file or "")
        typed = all(isinstance(text, str) for text in texts) and isinstance(found.code, int)
        # A foreign writer's record must not break a listing: every field is checked.
        return found if typed and isinstance(found.at, int | float) else None

    def view(self, age_s: float) -> AgentStatus:
        """How ``ps`` shows the agent: state ``exited``, the reason as its alert."""
        project, _, name = self.agent.partition("/")
        entry = AgentEntry(
            id=self.agent,
            name=name,
            project=project,
            host=self.host,
            state="exited",
            alert=self.alert(),
        )
        return AgentStatus(entry, max(age_s, 0.0), final=self)


_EXIT_FIELDS = frozenset(f.name for f in fields(FinalExit))
_ONE_LINE_HEAD = re.compile(r"^error \[[^\]]*\]: ")
"""What an error's one line starts with (``error [config.invalid]: ``)."""


@dataclass(slots=True)
class AgentStatus:
    """An entry as a console sees it, with liveness computed from the heartbeat."""

    entry: AgentEntry
    heartbeat_age_s: float
    restarting: bool = False
    final: FinalExit | None = None
    """Set when the agent is not running and will not be restarted (see :class:`FinalExit`)."""

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def connected(self) -> bool:
        # An exited agent's age counts from its exit: recent, yet nothing beats.
        return self.final is None and self.heartbeat_age_s <= HEARTBEAT_TTL_S

    @property
    def state(self) -> str:
        if self.final is not None:
            return "exited"
        if self.connected:
            return self.entry.state
        return "restarting" if self.restarting else "disconnected"

    def to_json(self) -> dict[str, object]:
        data = self.entry.to_wire()
        data["state"] = self.state
        data["heartbeat_age_s"] = round(self.heartbeat_age_s, 3)
        if self.final is not None:
            data["exit"] = self.final.to_wire()
        return data
