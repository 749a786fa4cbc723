"""Every Redis key and channel name ateam uses, in one place.

Every key and channel of a project lives under the project's own prefix,
``{ns}p:{<project>}:`` — with the project as the Redis Cluster hash tag — so that:

* a least-privilege Redis user of one project is three patterns away (``ateam acl``):
  its keys ``~{ns}p:{<project>}:*`` and channels ``&{ns}p:{<project>}:*``, plus the few
  team-wide names below; another project's agents are then invisible and unreachable;
* every multi-key operation of a project (a heartbeat's transaction over the registry
  and the agent's liveness key, a board script over a task and its dependencies, a
  context post over an item and its index) stays in one Cluster slot.

Team-wide names are few and carry nothing a project keeps private: the set of project
names (so a console can find the projects it may see), the global-scope context items
(meant for every project), the per-session console channels and the session snapshot's
writer seats.

Agent ids are ``project/name``; a per-agent key is ``{ns}p:{<project>}:<kind>:<name>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ateam.constants import DEFAULT_NAMESPACE

__all__ = ["Keys", "split_agent"]


def split_agent(agent: str) -> tuple[str, str]:
    """``(project, name)`` of an agent id ``project/name``.

    Raises:
        ValueError: the id has no ``/`` (callers validate ids before building keys).
    """
    project, slash, name = agent.partition("/")
    if not slash:
        raise ValueError(f"not an agent id (PROJECT/NAME): {agent!r}")
    return project, name


@dataclass(frozen=True)
class Keys:
    """Key builder bound to one namespace prefix (default ``ateam:``)."""

    ns: str = DEFAULT_NAMESPACE

    def project_prefix(self, project: str) -> str:
        """What every key and channel of ``project`` starts with (``ateam acl`` grants it)."""
        return f"{self.ns}p:{{{project}}}:"

    def _agent(self, kind: str, agent: str) -> str:
        project, name = split_agent(agent)
        return f"{self.project_prefix(project)}{kind}:{name}"

    # team-wide ---------------------------------------------------------------------
    @property
    def projects(self) -> str:
        """Set of the names of the projects that ever registered an agent."""
        return f"{self.ns}projects"

    @property
    def projects_channel(self) -> str:
        """Pub/sub channel announcing a project's first agent (``{project}``)."""
        return f"{self.ns}projects:events"

    def console_channel(self, session: str) -> str:
        """Pub/sub channel that reaches one console session (ownership notices)."""
        return f"{self.ns}console:{session}"

    def bootstrap(self, project: str, token_hash: str) -> str:
        """A one-time bootstrap token of one project, named by the token's SHA-256 hex.

        The token itself is never stored: whoever can read Redis learns only the hash,
        which cannot be presented in the token's place (SPEC §11).
        """
        return f"{self.project_prefix(project)}bootstrap:{token_hash}"

    # registry (per project) --------------------------------------------------------
    def registry(self, project: str) -> str:
        """Hash: agent id → msgpack registry entry, for one project."""
        return f"{self.project_prefix(project)}registry"

    def heartbeats(self, project: str) -> str:
        """Hash: agent id → Redis server time (ms) of its last heartbeat."""
        return f"{self.project_prefix(project)}registry:hb"

    def exits(self, project: str) -> str:
        """Hash: agent id → msgpack final exit (``FinalExit``), until acknowledged or the
        agent joins again: how ``ps`` lists an agent that cannot run."""
        return f"{self.project_prefix(project)}registry:exits"

    def registry_channel(self, project: str) -> str:
        """Pub/sub channel of one project's join / update / leave notices."""
        return f"{self.project_prefix(project)}events:registry"

    # team context (SPEC §9) --------------------------------------------------------
    # Global items and their index share the tag ``{@global}``; ``@`` cannot occur in a
    # project name, so no project can collide with it.
    def context_item(self, project: str, item_id: str) -> str:
        """A project's (``task`` or ``project`` scope) context item: msgpack, with its TTL."""
        return f"{self.project_prefix(project)}context:item:{item_id}"

    def context_index(self, project: str) -> str:
        """Sorted set of a project's item ids, scored by creation time (µs)."""
        return f"{self.project_prefix(project)}context:index"

    def context_global_item(self, item_id: str) -> str:
        """A ``global`` scope context item, visible from every project."""
        return f"{self.ns}g:{{@global}}:context:item:{item_id}"

    @property
    def context_global_index(self) -> str:
        """Sorted set of the team-wide (``global`` scope) item ids, scored by creation (µs)."""
        return f"{self.ns}g:{{@global}}:context:index"

    def context_channel(self, project: str) -> str:
        """Pub/sub channel of one project's post notices."""
        return f"{self.project_prefix(project)}events:context"

    @property
    def context_global_channel(self) -> str:
        """Pub/sub channel of ``global`` scope post notices (every project hears them)."""
        # Tagged like the global items: a post's transaction publishes in their slot.
        return f"{self.ns}g:{{@global}}:events:context"

    def context_fed(self, project: str, agent: str) -> str:
        """Sorted set of the item ids fed to one agent's model, scored by expiry (µs)."""
        return f"{self.project_prefix(project)}context:fed:{agent.rpartition('/')[2]}"

    # task board (issue 12) ---------------------------------------------------------
    def board(self, project: str) -> str:
        """Hash: task id → msgpack task record (see :mod:`ateam.bus.board`)."""
        return f"{self.project_prefix(project)}board"

    def board_channel(self, project: str) -> str:
        """Pub/sub channel of one project's board changes (``{project, id, status}``)."""
        return f"{self.project_prefix(project)}events:board"

    # per agent ---------------------------------------------------------------------
    def lock(self, agent: str) -> str:
        return self._agent("lock", agent)

    def fence(self, agent: str) -> str:
        return self._agent("fence", agent)

    def alive(self, agent: str) -> str:
        """Liveness key with the heartbeat TTL; RPC refuses fast when it is gone."""
        return self._agent("alive", agent)

    def grace(self, agent: str) -> str:
        return self._agent("grace", agent)

    def owner(self, agent: str) -> str:
        return self._agent("owner", agent)

    def identity(self, agent: str) -> str:
        """SHA-256 of the running instance's identity token (:mod:`ateam.bus.identity`)."""
        return self._agent("ident", agent)

    def handoff(self, agent: str) -> str:
        """The agent's handoff record (SPEC §7), mirrored from ``state/handoff.json``."""
        return self._agent("handoff", agent)

    def notices(self, agent: str) -> str:
        """List of the teammates' notices waiting for the agent's model (issue 26), bounded."""
        return self._agent("notices", agent)

    def notice_ids(self, agent: str) -> str:
        """Sorted set of the ids of the newest notices posted to the agent: a repeat is
        not posted again (a sender replaying its end after a crash)."""
        return self._agent("notice-ids", agent)

    def notices_channel(self, agent: str) -> str:
        """Pub/sub channel saying a notice was added to :meth:`notices`."""
        return self._agent("events-notices", agent)

    def mailbox(self, agent: str) -> str:
        """List of messages kept for the agent while it is not running, oldest first."""
        return self._agent("mailbox", agent)

    def mailbox_bytes(self, agent: str) -> str:
        """The size of :meth:`mailbox` in bytes (same hash tag: one script keeps both)."""
        return self._agent("mailbox-bytes", agent)

    def known_agents(self, project: str) -> str:
        """Set of the names of ``project``'s agents that ever started on this bus: who a
        message may wait for in a mailbox (a name never seen is a typo, refused)."""
        return f"{self.project_prefix(project)}agents:known"

    def rpc(self, agent: str) -> str:
        """List of pending requests for the agent."""
        return self._agent("rpc", agent)

    def reply(self, agent: str, request_id: str) -> str:
        return f"{self._agent('reply', agent)}:{request_id}"

    def rpc_wake(self, agent: str, server: str) -> str:
        """A serving loop's private list, pushed to wake its BLPOP when it is closed.

        Same hash slot as :meth:`rpc` (the project's), so one BLPOP may wait on both.
        """
        return f"{self._agent('rpc-wake', agent)}:{server}"

    def events(self, agent: str) -> str:
        """Stream holding the bounded replay log; entry id ``<offset>-0``."""
        return self._agent("events", agent)

    def events_scratch(self, agent: str) -> str:
        """Where the publisher rebuilds its stream without entries it never wrote.

        Same hash tag as :meth:`events`, so the rebuild's RENAME stays in one slot.
        """
        return self._agent("events-rebuild", agent)

    def agent_from_events_key(self, key: str) -> str:
        """The agent id of an :meth:`events` key (the reverse of that method)."""
        rest = key[len(self.ns) + len("p:{") :]
        project, _, tail = rest.partition("}:events:")
        return f"{project}/{tail}"

    def events_bytes(self, agent: str) -> str:
        """The approximate size of :meth:`events` in bytes, kept by its publisher.

        Same hash tag as :meth:`events`: the append script updates both at once.
        """
        return self._agent("events-bytes", agent)

    def events_costs(self, agent: str) -> str:
        """A list of the cost of each entry of :meth:`events`, oldest first.

        Kept by the append script beside :meth:`events_bytes` (same hash tag), so that
        trimming by bytes pops costs instead of reading the trimmed entries back.
        """
        return self._agent("events-costs", agent)
