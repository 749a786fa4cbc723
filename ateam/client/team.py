"""The team on one bus, as a session: who is there, their handles, events and notices.

The front ends (the ``ateam`` verbs, both consoles, later MCP and web) stand on this,
the way the docker CLI stands on its SDK: nothing above ``ateam.client`` talks to Redis.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis

from ateam._json import JsonObject
from ateam.bus import bootstrap
from ateam.bus.connection import ensure_reachable, make_client
from ateam.bus.guard import check_eviction
from ateam.bus.identity import AgentIdentity
from ateam.bus.keys import Keys
from ateam.bus.ownership import Ownership
from ateam.client._session import Session
from ateam.client.listing import AgentListing
from ateam.client.redaction import Masked, local_redactor, same_fields
from ateam.client.target import Target
from ateam.config.names import checked_name
from ateam.constants import TAKEOVER_GRACE_S
from ateam.errors import AgentNotFound
from ateam.redact import Redactor, Scrubbed
from ateam.wire.context_items import ContextItem, ContextType, Scope, Urgency
from ateam.wire.registry import AgentStatus, FinalExit

if TYPE_CHECKING:
    from ateam.bus.context_items import ContextStore
    from ateam.client.agent import AgentHandle
    from ateam.client.board import TasksApi
    from ateam.client.mail import MailApi
    from ateam.client.member import TeamMember
    from ateam.client.notices import Notices
    from ateam.client.outcomes import TaskWatch
    from ateam.client.tail import Tail
    from ateam.kb.similar import Ranker

__all__ = ["ContextApi", "Team", "session_id"]

ConnectionWatcher = Callable[[bool, int], None]
"""Told ``(connected, failures)`` when a tail loses or regains Redis."""


def _project_rankers() -> Callable[[str], Ranker]:
    """:func:`~ateam.kb.similar.project_rankers`, the KB loaded at the first search.

    The rankers bring the KB's chunker, embedder and store: a verb that connects and
    searches nothing (``ps``, ``send``) does not import them.
    """
    made: list[Callable[[str], Ranker]] = []

    def ranker_for(project: str) -> Ranker:
        if not made:
            from ateam.kb.similar import project_rankers

            made.append(project_rankers())
        return made[0](project)

    return ranker_for


def session_id(kind: str = "api") -> str:
    """A session id ``kind:host:pid:random``: unique across hosts, containers and calls.

    A bare pid repeats across hosts and containers, and two sessions with one id would
    take each other for the same claimant.
    """
    return f"{kind}:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Team:
    """One session on the team's bus. Make it with :meth:`connect`; end it with :meth:`aclose`.

    ``async with await Team.connect(target) as team:`` closes it on the way out.
    """

    def __init__(
        self,
        target: Target,
        client: aioredis.Redis,
        *,
        session: str,
        redactor: Redactor,
        on_connection: ConnectionWatcher | None = None,
        takeover_grace_s: float = TAKEOVER_GRACE_S,
    ) -> None:
        self.target = target
        self._client = client
        self._keys = Keys(target.namespace)
        self._session = Session.open(client, self._keys, session, redactor, takeover_grace_s)
        self._on_connection = on_connection
        self._redactor = redactor

    # The board, the context items and the mailboxes are made, and their modules
    # imported, at first use: `ateam ps` and `ateam send` touch none of them.

    @functools.cached_property
    def context(self) -> ContextApi:
        """The context items of the team's projects."""
        from ateam.bus.context_items import ContextStore

        # Ranked by the embedder models.yaml configures around the working directory.
        store = ContextStore(
            self._client, self._keys, redactor=self._redactor, ranker_for=_project_rankers()
        )
        return ContextApi(store, self._redactor)

    @functools.cached_property
    def tasks(self) -> TasksApi:
        """The task boards of the team's projects."""
        from ateam.bus.board import TaskBoard
        from ateam.client.board import TasksApi

        board = TaskBoard(self._client, self._keys, redactor=self._redactor)
        return TasksApi(board, self._redactor)

    @functools.cached_property
    def mail(self) -> MailApi:
        """Mailboxes of stopped agents, and broadcasts to a project's running agents."""
        from ateam.client.mail import MailApi

        return MailApi(self._session)

    @classmethod
    def open(
        cls,
        target: Target,
        *,
        session: str | None = None,
        redactor: Redactor | None = None,
        on_connection: ConnectionWatcher | None = None,
        takeover_grace_s: float = TAKEOVER_GRACE_S,
    ) -> Team:
        """A session on ``target``'s bus, made without any I/O (see :meth:`connect`).

        For front ends that build their state synchronously and connect later: call
        :meth:`ensure_reachable` before the first use.
        """
        return cls(
            target,
            make_client(target),
            session=session or session_id(),
            redactor=redactor if redactor is not None else local_redactor(),
            on_connection=on_connection,
            takeover_grace_s=takeover_grace_s,
        )

    async def ensure_reachable(self) -> None:
        """Check the bus can be used: it answers, and it never evicts ateam's keys.

        Raises:
            RedisUnavailable: the bus cannot be reached (the reason in one line).
            RedisAuthFailed, RedisPermissionDenied: it refused the credentials or a command.
            EvictionPolicyRefused: it may evict keys and nobody accepted the risk (see
                :mod:`ateam.bus.guard`); with the opt-out it logs a warning instead.
        """
        await ensure_reachable(self._client, self.target)
        await check_eviction(self._client, self.target)

    @property
    def keys(self) -> Keys:
        """The bus's key names (for tests and tools that inspect Redis beside the API)."""
        return self._keys

    @classmethod
    async def connect(
        cls,
        target: Target,
        *,
        session: str | None = None,
        redactor: Redactor | None = None,
        on_connection: ConnectionWatcher | None = None,
        takeover_grace_s: float = TAKEOVER_GRACE_S,
    ) -> Team:
        """Open a session on ``target``'s bus.

        Args:
            target: the bus (see :func:`~ateam.client.resolve_target`).
            session: this session's id (default :func:`session_id`); agents show it
                as their owner.
            redactor: masks secrets in what this session sends (default: the project
                of the current directory, see :func:`~ateam.client.local_redactor`).
            on_connection: default watcher of the tails made by :meth:`tail`.
            takeover_grace_s: how long a holder is given to finish on a takeover.

        Raises:
            BusError: the bus cannot be reached or used (see :meth:`ensure_reachable`).
        """
        team = cls.open(
            target,
            session=session,
            redactor=redactor,
            on_connection=on_connection,
            takeover_grace_s=takeover_grace_s,
        )
        try:
            await team.ensure_reachable()
        except BaseException:
            await team._client.aclose()
            raise
        return team

    async def __aenter__(self) -> Team:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Let go of every agent still held, then close the connection."""
        for agent in sorted(self._session.held):
            await self.agent(agent).release()
        await self._client.aclose()

    @property
    def session(self) -> str:
        return self._session.name

    @property
    def redactor(self) -> Redactor:
        return self._session.redactor

    @property
    def ownership(self) -> Ownership:
        """The session's ownership: claims, refreshes and releases with its one token."""
        return self._session.ownership

    # the team ------------------------------------------------------------------------

    async def create_project_user(
        self, project: str, *, user: str | None = None, password: str | None = None
    ) -> tuple[str, str]:
        """Create (or reset) the least-privilege Redis user of ``project``: ``(user, password)``.

        Needs this session's Redis user to manage users (``@admin``). See :mod:`ateam.client.acl`.
        """
        from ateam.client.acl import create_user  # `ateam acl` only

        return await create_user(
            self._client, checked_name(project), self._keys.ns, user=user, password=password
        )

    async def agents(self) -> list[AgentStatus]:
        """Every agent, connected or recently gone, sorted by id, in one round trip."""
        return await self._session.registry.list()

    async def status(self, agent_id: str) -> AgentStatus | None:
        return await self._session.registry.get(agent_id)

    async def acknowledge(self, agent_id: str, *, takeover: bool = False) -> Acknowledged:
        """Clear what ``ps`` shows as ALERT for ``agent_id`` once a person has seen it.

        A running agent forgets its damage reports (``alert.ack``, as its owner for the
        call); a final exit recorded for it is dropped, so ``ps`` no longer lists it.

        Raises:
            AgentNotFound: the agent is neither running nor recorded as exited.
        """
        view = await self.status(agent_id)
        alerts = 0
        if view is not None and view.final is None and view.connected:
            alerts = await self.agent(agent_id).acknowledge(takeover=takeover)
        exited = await self._session.registry.clear_exit(agent_id)
        if view is None and not exited:
            raise AgentNotFound(f"no agent {agent_id!r} is running or recorded as exited")
        return Acknowledged(agent_id, alerts, view.final if exited and view else None)

    def listing(self) -> AgentListing:
        """A copy of the registry kept current by notices (see :mod:`ateam.client.listing`)."""
        return AgentListing(self._session.registry)

    async def snapshot(self, projects: Iterable[str] | None = None) -> JsonObject:
        """The session snapshot, fresh from the bus: the document ``~/.ateam/session.json`` holds.

        Per project: its agents (state, current task, model, last_seen, host, queue
        length), the open and claimed board tasks, and the newest ``attention`` and
        ``blocking`` context items; see "Session snapshot" in ``docs/protocol.md``.

        Args:
            projects: only these (each shown even without agents); ``None``: every
                project with an agent in the registry.
        """
        # Imported here: only `ateam session` and the snapshot writer read whole projects.
        from ateam.bus.snapshot import build_snapshot

        chosen = None if projects is None else list(projects)
        snapshot = await build_snapshot(
            self._client, self._keys, bus=self.target.describe(), projects=chosen
        )
        return snapshot.to_json()

    async def has_events(self, agent_id: str) -> bool:
        """Whether the agent's event stream exists (a stopped agent's events remain)."""
        return bool(await self._client.exists(self._keys.events(agent_id)))

    def agent(self, agent_id: str) -> AgentHandle:
        """A handle on ``agent_id`` (``project/name``); nothing is checked yet."""
        # Imported at the first handle: its RPC and event models are not `ps`'s.
        from ateam.client.agent import AgentHandle

        return AgentHandle(self._session, agent_id)

    def watch(self, agent_id: str) -> TaskWatch:
        """A watch on the ends of tasks queued on ``agent_id`` from now on (start it before
        sending: see :class:`~ateam.client.outcomes.TaskWatch`)."""
        from ateam.client.outcomes import TaskWatch  # --wait only: not every verb's

        return TaskWatch(self._session, agent_id)

    def member(self, agent_id: str, token: str, *, max_hops: int) -> TeamMember:
        """This session acting as agent ``agent_id``, proven by its running instance's token.

        What ``ateam mcp --as`` is for a coding agent's runtime: nothing is checked
        yet; :meth:`TeamMember.check` does, and every action of the member checks again.

        Args:
            agent_id: ``P/NAME``.
            token: the identity token the agent's instance handed down (never logged).
            max_hops: the agent's ``team.max_hops``.
        """
        from ateam.client.member import TeamMember  # the MCP bridge's, not a verb's

        return TeamMember(self._session, AgentIdentity(agent_id, token), max_hops=max_hops)

    def tail(self, *, on_connection: ConnectionWatcher | None = None) -> Tail:
        """A reader of several agents' events (add and remove them while reading)."""
        watcher = on_connection if on_connection is not None else self._on_connection
        from ateam.client.tail import Tail

        # What this session holds, it reports reading (the agent holds output past a bound).
        return Tail.of_session(self._session, watcher)

    async def subscribe(self) -> Notices:
        """Registry, session and context notices, subscribed before this returns."""
        from ateam.client.notices import Notices

        notices = Notices(self._client, self._keys, self.session)
        await notices.open()
        return notices

    async def issue_bootstrap(
        self, agent_id: str, spec: dict[str, object], *, ttl_s: float = bootstrap.TOKEN_TTL_S
    ) -> str:
        """A one-time token that lets ``agent_id`` join from another host (SPEC §11).

        ``spec`` (``cwd``, ``model``, an offload's seed…) is handed to the agent when it
        redeems the token. The token is returned once and stored nowhere.
        """
        return await bootstrap.issue(
            self._client, self._keys, agent_id=agent_id, spec=spec, ttl_s=ttl_s
        )


@dataclass(frozen=True, eq=False)
class PostedItem(ContextItem):
    """A context item as :meth:`ContextApi.post` stored it, and the secrets masked in it.

    Equal to the item as read back (:meth:`ContextApi.get`): the count is about the
    posting, not part of the item.
    """

    redacted: int = 0
    """Secrets replaced by ``****`` in its title, content and summary."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ContextItem) and same_fields(self, other, ContextItem)

    __hash__ = ContextItem.__hash__

    def notice(self) -> str | None:
        """The line telling the poster that secrets were masked, if any were."""
        return Scrubbed("", self.redacted).notice()


@dataclass(frozen=True)
class Acknowledged:
    """What :meth:`Team.acknowledge` cleared."""

    agent: str
    alerts: int
    """Damage reports the running agent forgot."""
    exit: FinalExit | None
    """The final exit no longer listed, if there was one."""

    def line(self) -> str:
        """One line for people."""
        parts = [f"{self.alerts} damage alert(s) cleared"]
        if self.exit is not None:
            parts.append(f"exit {self.exit.code} ({self.exit.reason}) no longer listed")
        return f"{self.agent}: " + "; ".join(parts)


class ContextApi:
    """The team context (SPEC §9): short-lived items agents and consoles tell each other.

    Items are posted in a project; a project sees its own items and the ``global`` ones.
    Texts are masked with the session's redactor before they are stored.
    """

    def __init__(self, store: ContextStore, redactor: Redactor | None = None) -> None:
        self._store = store
        self._redactor = redactor or Redactor()
        """The store's own: masking here first counts what the store would mask."""

    async def post(
        self,
        project: str,
        *,
        type: ContextType | str,
        title: str,
        content: str = "",
        summary: str = "",
        scope: Scope | str = Scope.PROJECT,
        tags: Iterable[str] = (),
        urgency: Urgency | str = Urgency.BACKGROUND,
        source_agent: str = "",
        source_runtime: str = "ateam",
        ttl_s: float | None = None,
    ) -> PostedItem:
        """Store an item and announce it; see :meth:`ContextStore.post` for the limits.

        Returns:
            The item as stored, with how many secrets were masked in it
            (:attr:`PostedItem.redacted`), so the poster can be told.

        Raises:
            BadRequest: an argument is invalid; nothing is stored.
        """
        options: dict[str, Any] = {} if ttl_s is None else {"ttl_s": ttl_s}
        masked = Masked(self._redactor)
        item = await self._store.post(
            project,
            type=type,
            title=masked(title),
            content=masked(content),
            summary=masked(summary),
            scope=scope,
            tags=tags,
            urgency=urgency,
            source_agent=source_agent,
            source_runtime=source_runtime,
            **options,
        )
        return PostedItem(**masked.fields_of(item), redacted=masked.replaced)

    async def ls(
        self,
        project: str,
        *,
        scopes: Iterable[Scope | str] | None = None,
        types: Iterable[ContextType | str] | None = None,
        tags: Iterable[str] | None = None,
        min_urgency: Urgency | str | None = None,
        limit: int = 50,
    ) -> list[ContextItem]:
        """The project's live items and the global ones, newest first."""
        return await self._store.list(
            project, scopes=scopes, types=types, tags=tags, min_urgency=min_urgency, limit=limit
        )

    async def get(self, project: str, item_id: str) -> ContextItem | None:
        return await self._store.get(project, item_id)

    async def search(self, project: str, query: str, *, limit: int = 20) -> list[ContextItem]:
        """Live items ranked by the embedder ``models.yaml`` ``embeddings:`` configures (the
        project's around the working directory), best first. The offline default matches
        words, not meaning.

        Raises:
            BadRequest: an empty or too long query. ConfigError: the configuration does
            not load. ProviderError: the embeddings endpoint failed.
        """
        return await self._store.search(project, query, limit=limit)
