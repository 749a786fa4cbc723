"""The agents a session sees, kept current by what changes rather than by reading again.

A console used to read every registry entry every few seconds: work that grew with the
team while nothing happened. :class:`AgentListing` reads the registry once
(:meth:`~AgentListing.load`), then folds in the registry notices agents publish when
they join, change or leave (:meth:`~AgentListing.apply`; a join or update carries the
whole entry), and asks the server on a slow timer only which agents stopped beating
(:meth:`~AgentListing.check`, one script call per project whose answer is the few that
lapsed). Liveness stays the server's verdict on the heartbeat stamps (SPEC §4.1): an
agent that died without leaving turns ``disconnected`` (or ``restarting`` behind a grace
marker), comes ``back`` when it beats again, and is dropped after
:data:`~ateam.constants.DISCONNECTED_SHOWN_S`.

Pub/sub keeps nothing for the absent, so the listing reads everything again when told
it may have missed something (a reconnect, a new project), and when the agents beating
in a project are not the ones it holds (a notice lost or forged): the check's answer
carries their number and a digest of their ids, which the listing keeps for its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ateam import _gc
from ateam.bus.registry import DIGEST_MOD, Registry, entry_of, id_digest
from ateam.bus.registry_rows import ENTRY_CONTAINERS
from ateam.client.notices import Notice
from ateam.constants import DISCONNECTED_SHOWN_S
from ateam.wire.registry import AgentStatus, FinalExit

__all__ = ["AgentListing", "Change"]


@dataclass(frozen=True)
class Change:
    """One agent as the listing held it before and holds it now."""

    agent: str
    old: AgentStatus | None
    """None: it joined (or was first seen)."""
    new: AgentStatus | None
    """None: it left, or was gone longer than it is shown."""

    @property
    def shown(self) -> bool:
        """Whether what a list of agents shows of it changed (not just its heartbeat age)."""
        old, new = self.old, self.new
        if old is None or new is None:
            return old is not new
        return old.state != new.state or old.entry != new.entry


class AgentListing:
    """The registry as one session sees it; :attr:`agents` is updated in place.

    Args:
        registry: where entries and heartbeats are read.
    """

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self.agents: dict[str, AgentStatus] = {}
        """Every agent known, connected or recently gone, by id."""
        self.stale = False
        """Something may have been missed: :meth:`load` is due."""
        self._by_project: dict[str, set[str]] = {}
        self._digests: dict[str, int] = {}
        """Per project, :func:`id_digest` summed over the agents held (modulo 2**32)."""
        self._down: dict[str, set[str]] = {}
        """Per project, the agents held as disconnected (their heartbeat lapsed)."""
        self._settled: dict[str, tuple[int, ...] | None] = {}
        """Per project, a mismatch of beating and held agents that a full read left as
        it was (an entry no reader accepts): not worth reading again until it moves."""
        self._beating: dict[str, tuple[int, int]] = {}
        """Per project out of step, what the check found beating (count, digest)."""
        self._loading = 0
        self._during_load: dict[str, AgentStatus | None] = {}
        """What notices said while a load was reading: newer than what it read."""
        self._made = 0
        """Containers of agents that joined by notice since the last check
        (:func:`_gc.lasting`)."""

    # reading -------------------------------------------------------------------------

    async def load(self) -> list[Change]:
        """Read the whole registry and take it as the truth, except for what notices said
        while it was being read."""
        self.stale = False
        self._loading += 1
        try:
            views = await self._registry.list()
        except BaseException:
            self.stale = True  # still due
            raise
        finally:
            self._loading -= 1
        fresh = {view.id: view for view in views}
        for agent, noticed in self._during_load.items():
            if noticed is None:
                fresh.pop(agent, None)
            else:
                fresh[agent] = noticed
        if not self._loading:
            self._during_load.clear()
        changes = [
            Change(agent, self.agents.get(agent), fresh.get(agent))
            for agent in sorted(self.agents.keys() | fresh.keys())
        ]
        self.agents.clear()
        self.agents.update(fresh)
        for held in self._by_project.values():  # projects stay known, to be checked
            held.clear()
        self._digests.clear()
        self._down.clear()
        for view in fresh.values():
            self._index(view)
        return [change for change in changes if change.old is not change.new]

    def apply(self, notice: Notice) -> list[Change]:
        """Fold in a registry notice: ``join`` and ``update`` carry the entry, ``leave`` not.

        A notice it cannot use (a new project announced, an entry that is not one)
        marks the listing :attr:`stale` instead.
        """
        if notice.event == "leave":
            return self._put(notice.agent, None)
        if notice.event == "exit":
            # A supervisor gave up on it: listed (``exited``) until acknowledged.
            final = FinalExit.from_wire(notice.data.get("exit"))
            if final is None or final.agent != notice.agent:
                self.stale = True
                return []
            held = self.agents.get(final.agent)
            if held is not None and held.connected and held.final is None:
                return []  # running again already
            return self._put(final.agent, final.view(0.0))
        if notice.event not in ("join", "update"):
            return []
        entry = entry_of(notice.data.get("entry"), notice.project) if notice.project else None
        if entry is None or entry.id != notice.agent:
            self.stale = True
            return []
        if entry.id not in self.agents:
            # Kept as long as it is shown: a team of 10 000 joining by notices left
            # 100 000 objects (entries, views, the front end's rows) to every full
            # collection, 250 ms of the console's loop each, keys unread (issue 28 §4).
            # Updates are not counted: they replace what is kept, and a freeze every few
            # seconds in a busy team would pin whatever cyclic garbage was alive then.
            self._made += ENTRY_CONTAINERS + 1  # the entry and its view
        # Announced with a beat: the agent is alive now, whatever was thought of it.
        return self._put(entry.id, AgentStatus(entry, 0.0))

    async def check(self) -> list[Change]:
        """Ask which agents stopped beating, and who is back; read all again if out of step.

        One script call per project the listing knows, answered with the lapsed agents
        only; a grace marker is looked up for each of those, and nothing else is read.
        """
        _gc.lasting(self._made)  # what the notices since the last check brought is kept
        self._made = 0
        changes: list[Change] = []
        for project in sorted(self._by_project):
            changes += await self._check(project)
        if self.stale:
            changes += await self._reload_out_of_step()
        return changes

    async def _check(self, project: str) -> list[Change]:
        lapse = await self._registry.lapsed(project)
        changes: list[Change] = []
        forgotten: list[str] = []
        lapsed: list[AgentStatus] = []
        for agent, stamp in lapse.stamps.items():
            age = (lapse.now_ms - stamp) / 1000
            held = self.agents.get(agent)
            final = held is not None and held.final is not None  # shown until acknowledged
            if age > DISCONNECTED_SHOWN_S:
                forgotten.append(agent)
                changes += self._put(agent, None) if held is not None and not final else []
            elif held is not None and not final:
                lapsed.append(AgentStatus(held.entry, age))
        for agent in self._down.get(project, set()) - lapse.stamps.keys():
            held = self.agents.get(agent)
            if held is not None:  # beating again (or gone, which its leave notice says)
                changes += self._put(agent, AgentStatus(held.entry, 0.0))
        await self._registry.mark_restarting(lapsed)
        for view in lapsed:
            changes += self._put(view.id, view)
        if forgotten:
            await self._registry.forget(project, forgotten)
        gone = sum(id_digest(agent) for agent in forgotten)
        beating = (lapse.beating - len(forgotten), (lapse.digest - gone) % DIGEST_MOD)
        state = (*beating, *self._held(project))
        if beating != self._held(project) and self._settled.get(project) != state:
            self.stale = True
            self._settled[project] = None  # read again; what it leaves is settled then
            self._beating[project] = beating
        return changes

    async def _reload_out_of_step(self) -> list[Change]:
        changes = await self.load()
        for project, settled in list(self._settled.items()):
            if settled is None:
                self._settled[project] = (*self._beating[project], *self._held(project))
        return changes

    def _held(self, project: str) -> tuple[int, int]:
        return len(self._by_project.get(project, ())), self._digests.get(project, 0)

    # bookkeeping ---------------------------------------------------------------------

    def _put(self, agent: str, view: AgentStatus | None) -> list[Change]:
        old = self.agents.get(agent)
        if self._loading:
            self._during_load[agent] = view
        if old is not None:
            self._unindex(old)
        if view is None:
            self.agents.pop(agent, None)
        else:
            self.agents[agent] = view
            self._index(view)
        return [] if old is None and view is None else [Change(agent, old, view)]

    def _index(self, view: AgentStatus) -> None:
        project = view.entry.project
        held = self._by_project.setdefault(project, set())
        if view.final is not None:
            return  # not beating: the check compares beating agents only
        if view.id not in held:
            held.add(view.id)
            digest = self._digests.get(project, 0) + id_digest(view.id)
            self._digests[project] = digest % DIGEST_MOD
        if not view.connected:
            self._down.setdefault(project, set()).add(view.id)

    def _unindex(self, view: AgentStatus) -> None:
        project = view.entry.project
        held = self._by_project.get(project, set())
        if view.id in held:
            held.discard(view.id)
            digest = self._digests.get(project, 0) - id_digest(view.id)
            self._digests[project] = digest % DIGEST_MOD
        self._down.get(project, set()).discard(view.id)
