"""A console's session on the team, free of any UI (SPEC §6).

The session holds the connection (an :class:`ateam.client.Team`), which agent it is
attached to and whether it still writes, the agents it follows and where it stopped
reading each, and the background loops that keep all that current: the event tail,
the notices (joins, changes, leaves, takeovers, context items), the liveness check and
the ownership refresh. Front ends (plain line mode and the Textual panes) give it a
:class:`ConsoleView` to render into; commands (:mod:`ateam.console.commands`) act on it.

The agents it knows (:attr:`ConsoleSession.known`) change with the registry's notices
and a slow liveness check that asks only which agents stopped beating
(:class:`~ateam.client.listing.AgentListing`): a console with a silent team does no work
that grows with the team, and tells its front end only which agents changed
(:attr:`ConsoleSession.agents_changed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from ateam.client import (
    CONNECTION_ERRORS,
    RESUMED,
    AgentHandle,
    AgentStatus,
    Event,
    EventType,
    Gap,
    Notice,
    NoticeKind,
    Notices,
    Target,
    Team,
    bus_errors,
    local_redactor,
    redactor_for,
    session_id,
)
from ateam.client.listing import Change
from ateam.console.banners import ContextBanners
from ateam.console.editor import Editor, edit_text
from ateam.console.names import agent_named
from ateam.console.offsets import OffsetStore
from ateam.console.owners import OwnerFold
from ateam.console.roster import agent_banners, auto_tails
from ateam.constants import (
    BACKOFF_WARN_AFTER,
    LIVENESS_CHECK_S,
    OWNER_REFRESH_S,
    TAKEOVER_GRACE_S,
)
from ateam.errors import AgentNotFound, OwnershipDenied, UsageError
from ateam.redact import Redactor, Scrubbed
from ateam.wire.results import R
from ateam.wire.rpc import Params

__all__ = ["ConsoleSession", "ConsoleView"]


AUTO_TAIL_BACKLOG = 20
"""Events an automatically tailed agent starts with: its recent screen, not its history."""
OFFSETS_SAVE_S = 0.25
"""Least time between two writes of the console's offsets file."""
REGISTRY_NEWS_MIN_S = 0.2
"""Least time between two full registry reads asked for by notices (missed news)."""
_REGISTRY_NEWS = {"join": "joined", "leave": "left"}


class ConsoleView(Protocol):
    """What a front end provides. All methods are called on the event loop."""

    def event(self, event: Event) -> None:
        """An event of an attached or tailed agent, in offset order."""

    def gap(self, gap: Gap) -> None: ...

    def unsettled(self, agent: str) -> int | None:
        """First offset of ``agent`` the view has received but not fully shown, if any."""

    def info(self, text: str, agent: str | None = None) -> None: ...

    def banner(self, text: str, *, level: str = "info") -> None:
        """Something the user must notice: ownership, connection, joins and leaves."""

    def table(self, rows: Sequence[Mapping[str, object]], columns: list[str]) -> None: ...

    async def ask(self, question: str) -> str:
        """Ask for one line (confirmations); returns "" when there is no answer."""


class AgentCalls:
    """``call(agent, method, params)`` as the session, for callers that name the agent."""

    def __init__(self, team: Team) -> None:
        self._team = team

    async def call(
        self,
        agent: str,
        method: str,
        params: Params | None = None,
        *,
        timeout: float | None = None,
    ) -> object:
        return await self._team.agent(agent).call(method, params, timeout=timeout)


class ConsoleSession:
    """One console session: attached to at most one agent, following any number."""

    def __init__(
        self,
        target: Target,
        view: ConsoleView,
        *,
        session: str | None = None,
        offsets: OffsetStore | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.target = target
        self.view = view
        self.redactor = redactor or local_redactor()
        """Masks secrets in what this console sends, before it reaches Redis (SPEC §11)."""
        self.team = Team.open(
            target, session=session or session_id("console"), redactor=self.redactor
        )
        self.session = self.team.session
        self.keys = self.team.keys
        self.rpc = AgentCalls(self.team)
        self.tail = self.team.tail(on_connection=self._on_connection)
        self.owners = OwnerFold()
        # Keyed by Redis endpoint too: the same agent id on another bus is another stream.
        self.offsets = offsets or OffsetStore(f"{target.describe()} {target.namespace}")
        self.attached: str | None = None
        self.read_only = False
        self._unconfirmed_loss: float | None = None
        """When a takeover notice turned this console read-only: the time after which
        the claim in Redis is checked, since anyone may publish such a notice."""
        self.tailed: set[str] = set()
        self.announce_waiting = False
        """A banner (and bell) when any agent starts waiting; set by front ends that do
        not show it otherwise (plain mode; panes mode draws its own)."""
        self.auto_tail_limit = 0
        """Follow up to this many other live agents unasked (panes mode's right column)."""
        self.auto_tailed: set[str] = set()
        self.listing = self.team.listing()
        self.known: dict[str, AgentStatus] = self.listing.agents
        """Every agent known, by id: the listing's, updated in place as news comes."""
        self.agents_changed: Callable[[set[str]], None] = lambda agents: None
        """Told the ids whose row in a list of agents changed (joined, left, new state or
        details); set by a front end that lists agents, to redraw those rows only."""
        self.banners = ContextBanners(self.team.context, self.view.banner)
        self.board_news = asyncio.Event()
        """Set when a task board changed (or notices may have been missed): the open
        board screen redraws then, and only then."""
        self.pending_tasks: set[str] = set()
        self._ended: deque[str] = deque(maxlen=1000)
        self.quit_requested = False
        self.front_end = "plain"
        """``plain`` or ``panes``: set by the front end driving this session."""
        self.panes_possible = False
        """Whether this terminal could show panes (``/ui panes on`` is refused otherwise)."""
        self.switch_to: str | None = None
        """Set by ``/ui``: the front end to continue in once this one has ended."""
        self.edit_text: Editor = edit_text
        """Opens the user's editor; a front end wraps it to hand over the terminal."""
        self.keepers: list[subprocess.Popen[bytes]] = []
        """Keepers of agents this console spawned, polled so none lingers as a zombie."""
        self._tasks_changed = asyncio.Event()
        self._registry_news = asyncio.Event()
        self._owner_news = asyncio.Event()
        """Set when the link came back: the claim is checked at once, not a refresh later."""
        self._notices: Notices | None = None
        self._background: list[asyncio.Task[None]] = []
        self._offsets_writer: asyncio.Task[None] | None = None

    @property
    def ownership(self) -> Any:
        """The session's ownership record keeper (tests tune its takeover grace)."""
        return self.team.ownership

    def agent(self, agent: str) -> AgentHandle:
        return self.team.agent(agent)

    # lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and start watching; raises RedisUnavailable if Redis is not there."""
        await self.team.ensure_reachable()
        with bus_errors():
            # Subscribed before anything is read: a notice sent once start() returned
            # (a blocking item, a join) is never missed.
            self._notices = await self.team.subscribe()
            views = await self.refresh_agents(announce=False)
        for view in views:
            if view.connected:
                self._announce_change(None, view)
        for coro, name in (
            (self._tail_loop(), "tail"),
            (self._watch_loop(self._notices), "watch"),
            (self._registry_loop(), "registry"),
            (self._owner_refresh(), "owner"),
        ):
            task = asyncio.create_task(coro, name=f"console:{name}")
            task.add_done_callback(self._background_ended)
            self._background.append(task)

    def _background_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            failed = f"console task {task.get_name()} failed: {exc!r}; restart the console"
            self.view.banner(failed, level="warn")

    async def aclose(self) -> None:
        if self.banners.catch_up is not None:
            self._background.append(self.banners.catch_up)
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._background.clear()
        if self.attached and not self.read_only:
            await self.agent(self.attached).release()
        if self._offsets_writer is not None:
            with contextlib.suppress(Exception):  # never two writers of the file at once
                await self._offsets_writer
        for agent in self.tail.agents:
            position = self.tail.position(agent)
            if position is not None and self.view.unsettled(agent) is None:
                self.offsets.set(agent, position)
        self.offsets.save()
        if self._notices is not None:
            await self._notices.aclose()
        with contextlib.suppress(Exception):
            await self.team.aclose()

    # sending -----------------------------------------------------------------------------

    def clean(self, *texts: str) -> list[str]:
        """``texts`` with their secrets masked; the user is told once if any were.

        The patterns are the console's and those of the attached agent's project.
        """
        view = self.known.get(self.attached) if self.attached else None
        redactor = redactor_for(view.entry.cwd if view is not None else None, self.redactor)
        scrubbed = [redactor.scrub(text) for text in texts]
        self.tell_masked(sum(s.replaced for s in scrubbed))
        return [s.text for s in scrubbed]

    def tell_masked(self, count: int) -> None:
        notice = Scrubbed("", count).notice()
        if notice:
            self.view.banner(notice)

    async def send_input(self, text: str) -> None:
        """Queue ``text`` as a task of the attached agent (its secrets masked first)."""
        agent = self.require_writer()
        view = self.known.get(agent)
        sent = await self.agent(agent).send(
            text,
            source="console",
            claim=False,
            agent_cwd=view.entry.cwd if view is not None else None,
        )
        self.tell_masked(sent.redacted)
        # A fast agent may finish the task before the reply reaches us.
        if sent.id not in self._ended:
            self.pending_tasks.add(sent.id)
        self._tasks_changed.set()

    async def wait_for_pending(self) -> None:
        """Block until every input this console sent has finished (used at end of input)."""
        while self.pending_tasks and self.attached:
            self._tasks_changed.clear()
            view = self.known.get(self.attached)
            if view is None or not view.connected:
                self.view.banner(f"{self.attached} is gone; not waiting for its answers")
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._tasks_changed.wait()

    async def call_as_writer(
        self,
        agent: str,
        method: str,
        result: type[R],
        params: Params | None = None,
        *,
        takeover: bool,
    ) -> R:
        """A changing call to any agent: as its writer if attached, else owning it briefly.

        Like ``ateam stop``: ownership is taken around the call (SPEC §4.3) and given
        back, so the agent's owner check holds for consoles that never attached.
        """
        writer = agent == self.attached and not self.read_only
        return await self.agent(agent).request(
            method, result, params, claim=not writer, takeover=takeover
        )

    async def confirm(self, question: str) -> bool:
        answer = await self.view.ask(f"{question} type 'yes': ")
        return answer.strip().lower() == "yes"

    # attaching ---------------------------------------------------------------------------

    async def attach(self, agent: str, *, takeover: bool = False) -> None:
        """Become ``agent``'s writer (leaving the agent attached before, if another)."""
        if self.attached and self.attached != agent:
            await self.detach()
        if takeover:
            self.view.banner(f"taking over {agent}: the current owner has 2 s to finish")
        previous = await self.agent(agent).acquire(takeover=takeover)
        self.attached = agent
        self.read_only = False
        self._unconfirmed_loss = None
        self.follow(agent)
        await self.tail.pin(agent)  # from here on every byte is the writer's to see
        note = f" (took over from {previous.describe()})" if previous else ""
        self.view.banner(f"attached to {agent} as its writer{note}")

    async def detach(self) -> None:
        agent = self.require_attached()
        if not self.read_only:
            await self.agent(agent).release()
        self.attached = None
        self.read_only = False
        self._unconfirmed_loss = None
        self.pending_tasks.clear()
        if agent not in self.tailed:
            self.tail.remove(agent)
        self.view.info(f"detached from {agent}")

    def follow(self, agent: str) -> None:
        """Read ``agent``'s events from where this console left off."""
        if agent not in self.tail.agents:
            self.tail.add(agent, self.offsets.get(agent))

    def require_attached(self) -> str:
        if self.attached is None:
            raise UsageError("not attached to an agent; /attach ID first")
        return self.attached

    def require_writer(self) -> str:
        agent = self.require_attached()
        if self.read_only:
            raise OwnershipDenied(
                f"this console is read-only for {agent}: another console took it over"
            )
        return agent

    async def resolve_agent(self, text: str) -> str:
        """Full id, or a unique prefix / bare name of a known agent."""
        if text not in self.known:
            await self.refresh_agents(announce=False)
        if text in self.known:
            return text
        found = await asyncio.to_thread(agent_named, text, list(self.known))
        if found is not None:
            return found
        raise AgentNotFound(f"no agent {text!r} on this bus")

    # the registry ------------------------------------------------------------------------

    async def refresh_agents(self, *, announce: bool = True) -> list[AgentStatus]:
        """Read the whole registry again (a command's fresh look); every agent, by id."""
        self._changed(await self.listing.load(), announce=announce)
        self._auto_tail()
        return sorted(self.known.values(), key=lambda v: v.id)

    def _changed(self, changes: Iterable[Change], *, announce: bool = True) -> None:
        """Act on what changed in the listing: banners, the auto-tails, the front end."""
        shown = [change for change in changes if change.shown]
        if not shown:
            return
        if announce:
            for change in shown:
                if change.new is not None:
                    self._announce_change(change.old, change.new)
        self._auto_tail()
        self.agents_changed({change.agent for change in shown})

    def _announce_change(self, old: AgentStatus | None, view: AgentStatus) -> None:
        for text, level in agent_banners(old, view, waiting=self.announce_waiting):
            self.view.banner(text, level=level)

    def _auto_tail(self) -> None:
        """Keep up to :attr:`auto_tail_limit` other live agents followed (see :func:`auto_tails`).

        Started from their recent screen (a short backlog), not their whole history, and
        dropped again when they leave, so the set follows the team as it changes.
        """
        if self.auto_tail_limit <= 0 and not self.auto_tailed:
            return
        skip = [*self.tailed, *(a for a in [self.attached] if a)]
        wanted = auto_tails(self.known, self.auto_tailed, limit=self.auto_tail_limit, skip=skip)
        for agent in self.auto_tailed - wanted:
            if agent not in self.tailed and agent != self.attached:
                self.tail.remove(agent)
        for agent in wanted - self.auto_tailed:
            if agent not in self.tail.agents:
                self.tail.add(agent, None, backlog=AUTO_TAIL_BACKLOG)
        self.auto_tailed = wanted

    # background loops --------------------------------------------------------------------

    async def _tail_loop(self) -> None:
        async for batch in self.tail.batches():
            for item in batch:
                if isinstance(item, Gap):
                    self.view.gap(item)
                    self.offsets.set(item.agent, item.last)
                else:
                    self._show(item)
            # Batches within OFFSETS_SAVE_S share one write, on a worker thread: a
            # console killed with -9 replays at most that much output after a restart.
            self._save_offsets()

    def _show(self, event: Event) -> None:
        try:
            if self.owners.shown(event):  # a one-call claim's come and go is left out
                self.view.event(event)
        except Exception as exc:  # one bad event must not end the stream
            self.view.banner(
                f"could not show event {event.offset} of {event.agent}: {exc!r}", level="warn"
            )
        pending = self.view.unsettled(event.agent)
        saved = event.offset if pending is None else pending - 1
        # Not past an entry that may yet turn out a stranger's (see EventTail).
        trusted = self.tail.trusted(event.agent)
        self.offsets.set(event.agent, saved if trusted is None else min(saved, trusted))
        if event.type == EventType.TASK_END and event.task_id:
            self._ended.append(event.task_id)
            if event.task_id in self.pending_tasks:
                self.pending_tasks.discard(event.task_id)
                self._tasks_changed.set()

    def _save_offsets(self) -> None:
        if self._offsets_writer is None or self._offsets_writer.done():
            self._offsets_writer = asyncio.create_task(self._write_offsets())

    async def _write_offsets(self) -> None:
        await asyncio.sleep(OFFSETS_SAVE_S)
        while (data := self.offsets.snapshot()) is not None:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self.offsets.write, data)

    async def _watch_loop(self, notices: Notices) -> None:
        """Registry notices, context items and messages to this console (reconnecting)."""
        async for notice in notices:
            self._NOTICES[notice.kind](self, notice)

    def _on_registry(self, notice: Notice) -> None:
        said = _REGISTRY_NEWS.get(notice.event)
        if said is not None:
            self.view.banner(f"agent {notice.agent} {said}")
            self._tasks_changed.set()
        self._changed(self.listing.apply(notice))
        if self.listing.stale:
            self._registry_news.set()  # a new project, or an entry it could not use

    def _on_session(self, notice: Notice) -> None:
        agent = notice.agent
        if notice.event in ("takeover", "lost") and agent == self.attached and not self.read_only:
            self._lose(agent)
            # Anyone who can reach Redis can publish this: once the takeover's grace is
            # over, the claim itself decides (see _owner_refresh).
            self._unconfirmed_loss = time.monotonic() + TAKEOVER_GRACE_S + 1.0
            self.view.banner(
                f"console {notice.data.get('by')} took over {agent}: this console is now read-only",
                level="warn",
            )

    def _on_context_item(self, notice: Notice) -> None:
        """An ``attention`` or ``blocking`` item is a banner; ``blocking`` also rings."""
        if notice.event == RESUMED:
            self.board_news.set()  # board notices may have been missed as well
            self.listing.stale = True  # and registry notices: read it all again
            self._registry_news.set()
            self.banners.missed(agent.split("/", 1)[0] for agent in self.known)
            return
        self.banners.show(notice.data)

    def _on_board(self, notice: Notice) -> None:
        self.board_news.set()

    _NOTICES: ClassVar[dict[NoticeKind, Callable[[ConsoleSession, Notice], None]]] = {
        NoticeKind.REGISTRY: _on_registry,
        NoticeKind.SESSION: _on_session,
        NoticeKind.CONTEXT: _on_context_item,
        NoticeKind.BOARD: _on_board,
    }

    def _lose(self, agent: str) -> None:
        """Writing to ``agent`` is over: changing calls now take a claim of their own."""
        self.read_only = True
        self.agent(agent).disown()

    async def _registry_loop(self) -> None:
        """The liveness check on a slow timer; a full read when news may have been missed.

        Joins, changes and leaves arrive as notices (see :meth:`_on_registry`); what no
        notice can say is that an agent died without leaving, which the check asks the
        server every :data:`LIVENESS_CHECK_S` — about the agents that lapsed only.
        """
        due = time.monotonic() + LIVENESS_CHECK_S
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(due - time.monotonic(), 0.0)):
                    await self._registry_news.wait()
            self._registry_news.clear()
            self.keepers = [keeper for keeper in self.keepers if keeper.poll() is None]
            self._auto_tail()  # attached, detached or tailed since: the places may move
            with contextlib.suppress(*CONNECTION_ERRORS):
                if self.listing.stale:
                    # A burst of news (a new project, a reconnect) costs one read, not many.
                    await asyncio.sleep(REGISTRY_NEWS_MIN_S)
                    self._changed(await self.listing.load())
                if time.monotonic() >= due:
                    due = time.monotonic() + LIVENESS_CHECK_S
                    self._changed(await self.listing.check())

    async def _owner_refresh(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(OWNER_REFRESH_S):
                    await self._owner_news.wait()
            self._owner_news.clear()
            agent = self.attached
            if agent is None:
                continue
            if self.read_only:
                await self._confirm_loss(agent)
                continue
            try:
                still_mine = await self.agent(agent).refresh() or await self._reclaim(agent)
            except CONNECTION_ERRORS:
                continue
            if not still_mine and agent == self.attached and not self.read_only:
                self._lose(agent)
                self.view.banner(
                    f"lost ownership of {agent}: this console is now read-only", level="warn"
                )

    async def _reclaim(self, agent: str) -> bool:
        """Claim ``agent`` again if our claim vanished rather than passed to someone.

        A Redis restarted without persistence (or flushed) forgets every claim; that is
        no takeover, and the console goes on writing. Claimed only while nobody else
        holds it, so a console that claimed it meanwhile keeps it.
        """
        handle = self.agent(agent)
        if await handle.owner() is not None:
            return False
        try:
            await handle.acquire()
        except OwnershipDenied:
            return False
        self.view.banner(
            f"Redis had lost this console's claim on {agent} (a restart or a flush): "
            "claimed it again; this console still writes",
            level="warn",
        )
        return True

    async def _confirm_loss(self, agent: str) -> None:
        """After a takeover notice: if the claim is still ours, this console writes again."""
        due = self._unconfirmed_loss
        if due is None or time.monotonic() < due:
            return
        self._unconfirmed_loss = None
        handle = self.agent(agent)
        with contextlib.suppress(*CONNECTION_ERRORS):
            if await handle.refresh() and agent == self.attached:
                await handle.acquire()  # ours already: this only marks it held again
                self.read_only = False
                self.view.banner(
                    f"{agent} was not taken over after all (the notice was not confirmed by "
                    "the ownership record): this console writes again",
                    level="warn",
                )

    def _on_connection(self, connected: bool, failures: int) -> None:
        if not connected and failures == 1:
            self.view.banner("connection to Redis lost; reconnecting…", level="warn")
        elif not connected and failures == BACKOFF_WARN_AFTER:
            self.view.banner(f"still no Redis after {failures} attempts; retrying", level="warn")
        elif connected:
            self.view.banner("reconnected to Redis")
            self._owner_news.set()  # a restarted Redis may have forgotten our claim
