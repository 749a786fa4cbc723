"""Every Redis key and channel name ateam uses, in one place.

Per-agent keys carry the agent id as a hash tag (``{project/name}``) so that all keys of
one agent land in one slot on Redis Cluster and Lua scripts touching several of them
stay valid. Team-wide keys (the registry) are single keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from ateam.constants import DEFAULT_NAMESPACE


@dataclass(frozen=True)
class Keys:
    """Key builder bound to one namespace prefix (default ``ateam:``)."""

    ns: str = DEFAULT_NAMESPACE

    # team-wide
    @property
    def registry(self) -> str:
        """Hash: agent id → msgpack registry entry."""
        return f"{self.ns}registry"

    @property
    def registry_channel(self) -> str:
        """Pub/sub channel of join / update / leave notices."""
        return f"{self.ns}registry:events"

    def bootstrap(self, token_hash: str) -> str:
        """A one-time bootstrap token, named by the SHA-256 hex digest of the token.

        The token itself is never stored: whoever can read Redis learns only the hash,
        which cannot be presented in the token's place (SPEC §11).
        """
        return f"{self.ns}bootstrap:{token_hash}"

    def console_channel(self, session: str) -> str:
        """Pub/sub channel that reaches one console session (ownership notices)."""
        return f"{self.ns}console:{session}"

    # team context (SPEC §9). A project's items and index share the hash tag
    # ``{project}``, and global items and the global index share ``{@global}``, so the
    # one transaction that stores an item and indexes it stays in one Cluster slot.
    # ``@`` cannot occur in a project name, so no project can collide with the global tag.
    def context_item(self, project: str, item_id: str) -> str:
        """A project's (``task`` or ``project`` scope) context item: msgpack, with its TTL."""
        return f"{self.ns}context:{{{project}}}:item:{item_id}"

    def context_index(self, project: str) -> str:
        """Sorted set of a project's item ids, scored by creation time (µs)."""
        return f"{self.ns}context:{{{project}}}:index"

    def context_global_item(self, item_id: str) -> str:
        """A ``global`` scope context item, visible from every project."""
        return f"{self.ns}context:{{@global}}:item:{item_id}"

    @property
    def context_global_index(self) -> str:
        """Sorted set of the team-wide (``global`` scope) item ids, scored by creation (µs)."""
        return f"{self.ns}context:{{@global}}:index"

    @property
    def context_channel(self) -> str:
        """Pub/sub channel of post notices for every project, so one subscription sees all."""
        return f"{self.ns}context:events"

    def context_fed(self, project: str, agent: str) -> str:
        """Sorted set of the item ids fed to one agent's model, scored by expiry (µs)."""
        return f"{self.ns}context:{{{project}}}:fed:{agent}"

    @property
    def board_channel(self) -> str:
        """Pub/sub channel of board changes (``{project, id, status}``), for every project."""
        return f"{self.ns}board:events"

    # task board (issue 12). One hash per project, hash-tagged, so one project's board
    # is one Cluster slot and a Lua script may read a task and its dependencies at once.
    def board(self, project: str) -> str:
        """Hash: task id → msgpack task record (see :mod:`ateam.bus.board`)."""
        return f"{self.ns}board:{{{project}}}"

    # per agent
    def lock(self, agent: str) -> str:
        return f"{self.ns}lock:{{{agent}}}"

    def fence(self, agent: str) -> str:
        return f"{self.ns}fence:{{{agent}}}"

    def alive(self, agent: str) -> str:
        """Liveness key with the heartbeat TTL; RPC refuses fast when it is gone."""
        return f"{self.ns}alive:{{{agent}}}"

    def grace(self, agent: str) -> str:
        return f"{self.ns}grace:{{{agent}}}"

    def owner(self, agent: str) -> str:
        return f"{self.ns}owner:{{{agent}}}"

    def handoff(self, agent: str) -> str:
        """The agent's handoff record (SPEC §7), mirrored from ``state/handoff.json``."""
        return f"{self.ns}handoff:{{{agent}}}"

    def rpc(self, agent: str) -> str:
        """List of pending requests for the agent."""
        return f"{self.ns}rpc:{{{agent}}}"

    def reply(self, agent: str, request_id: str) -> str:
        return f"{self.ns}reply:{{{agent}}}:{request_id}"

    def rpc_wake(self, agent: str, server: str) -> str:
        """A serving loop's private list, pushed to wake its BLPOP when it is closed.

        Same hash slot as :meth:`rpc`, so one BLPOP may wait on both in a cluster.
        """
        return f"{self.ns}rpc:{{{agent}}}:wake:{server}"

    @property
    def heartbeats(self) -> str:
        """Hash: agent id → Redis server time (ms) of its last heartbeat."""
        return f"{self.ns}registry:hb"

    def events(self, agent: str) -> str:
        """Stream holding the bounded replay log; entry id ``<offset>-0``."""
        return f"{self.ns}events:{{{agent}}}"

    def events_scratch(self, agent: str) -> str:
        """Where the publisher rebuilds its stream without entries it never wrote.

        Same hash tag as :meth:`events`, so the rebuild's RENAME stays in one slot.
        """
        return f"{self.ns}events-rebuild:{{{agent}}}"

    def agent_from_events_key(self, key: str) -> str:
        prefix = f"{self.ns}events:{{"
        return key[len(prefix) : -1]
