"""The console's logic, free of any UI (SPEC §6).

The controller owns the bus connections, the attach/ownership state, the event tail
and the command table. Front ends (plain line mode and the Textual panes) give it
a :class:`ConsoleView` to render into and feed it command lines; tests drive it
directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import socket
import subprocess
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from ateam import fleet
from ateam.bus import bootstrap
from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.codec import unpack
from ateam.bus.connection import RedisTarget, bus_error, ensure_reachable, make_client
from ateam.bus.context import ContextStore
from ateam.bus.events import Event, EventTail, EventType, Gap
from ateam.bus.keys import Keys
from ateam.bus.ownership import OwnerKind, Ownership
from ateam.bus.registry import AgentView, Registry
from ateam.bus.rpc import RpcClient
from ateam.config import CONFIG_DIR, AgentConfig, ProjectConfig, load_project
from ateam.config.schema import check_name
from ateam.console.offload import LONG_FIELDS, OffloadForm
from ateam.console.offsets import OffsetStore
from ateam.console.wizard import AgentWizard
from ateam.constants import HEARTBEAT_INTERVAL_S, OWNER_REFRESH_S, TAKEOVER_GRACE_S
from ateam.errors import AteamError, BadRequest, OwnershipDenied, SpawnFailed, UsageError
from ateam.redact import Redactor, Scrubbed


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

    def table(self, rows: list[dict[str, Any]], columns: list[str]) -> None: ...

    async def ask(self, question: str) -> str:
        """Ask for one line (confirmations); returns "" when there is no answer."""


@dataclass(frozen=True)
class Command:
    name: str
    handler: Callable[[list[str]], Awaitable[None]]
    usage: str
    help: str


_T = TypeVar("_T")

SPAWN_USAGE = "/spawn [PROJECT/]NAME [--cwd D] [--model M] [--worktree] [--remote] [--attach]"
OFFLOAD_USAGE = "/offload [--name N] [--remote] [--worktree] [--attach]"
OFFLOAD_QUESTION = (
    "change a field with FIELD=VALUE ('edit FIELD' opens $EDITOR), 'yes' to start it, "
    "anything else cancels: "
)
SPAWN_TIMEOUT_S = 20.0
"""How long /spawn waits for a new agent to serve before giving up on it."""
STOP_WAIT_S = 15.0
"""How long /stop waits for the agent to leave the registry."""
SERVING_STATES = ("idle", "busy", "waiting")

CONTEXT_USAGE = (
    "/context [ls|post] [--type T] [--urgency U] [--scope S] [--tags A,B] [--content C] [TITLE]"
)
KB_USAGE = (
    "/kb add|search|ls|copy-from [--scope agent|project|user] … "
    "(add PATH…, search QUERY, copy-from ID --ids A,B)"
)
KB_INGEST_TIMEOUT_S = 600.0
"""A large directory takes a while to chunk and embed; progress arrives as events."""
CONTEXT_COLUMNS = ["id", "age", "type", "urgency", "scope", "source", "title"]
ALERT_URGENCIES = {"attention": "warn", "blocking": "alert"}
"""Context items consoles announce, and the banner level of each (``alert`` rings)."""

AUTO_TAIL_BACKLOG = 20
"""Events an automatically tailed agent starts with: its recent screen, not its history."""

OFFSETS_SAVE_S = 0.25
"""Least time between two writes of the console's offsets file."""

REGISTRY_NEWS_MIN_S = 0.2
"""Least time between two registry reads triggered by change notices."""

PS_COLUMNS = [
    "id", "state", "model", "pinned", "ctx_pct", "host", "queue_len", "owner", "tokens", "cost",
    "alert",
]  # fmt: skip


class ConsoleController:
    """One console session: attach to at most one agent, tail any number."""

    def __init__(
        self,
        target: RedisTarget,
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
        self.keys = Keys(target.namespace)
        self.session = (
            session or f"console:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
        self.client: aioredis.Redis = make_client(target)
        self.registry = Registry(self.client, self.keys)
        self.ownership = Ownership(self.client, self.keys, self.session)
        # The token, not the session id, is what the agent accepts as this console's
        # ownership; it never leaves this process except inside our own requests.
        self.rpc = RpcClient(self.client, self.keys, caller=self.session, auth=self.ownership.token)
        self.tail = EventTail(self.client, self.keys, on_connection_change=self._on_connection)
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
        self.known: dict[str, AgentView] = {}
        self.pending_tasks: set[str] = set()
        self._ended: deque[str] = deque(maxlen=1000)
        self.quit_requested = False
        self.front_end = "plain"
        """``plain`` or ``panes``: set by the front end driving this controller."""
        self.panes_possible = False
        """Whether this terminal could show panes (``/ui panes on`` is refused otherwise)."""
        self.switch_to: str | None = None
        """Set by ``/ui``: the front end to continue in once this one has ended."""
        self._tasks_changed = asyncio.Event()
        self._registry_news = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
        self._offsets_writer: asyncio.Task[None] | None = None
        self._keepers: list[subprocess.Popen[bytes]] = []
        """Keepers of agents this console spawned, polled so none lingers as a zombie."""
        self.commands = self._command_table()

    # lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and start watching; raises RedisUnavailable if Redis is not there."""
        await ensure_reachable(self.client, self.target)
        try:
            # Subscribed before anything is read: a notice sent once start() returned
            # (a blocking item, a join) is never missed.
            pubsub = await self._subscribe()
            views = await self.refresh_agents(announce=False)
        except RedisError as exc:
            raise bus_error(exc) from exc
        if self.announce_waiting:
            for view in views:
                if view.connected and view.state == "waiting":
                    self.view.banner(f"agent {view.id} is waiting for approval", level="alert")
        for view in views:
            if view.connected:
                self._announce_blocked(None, view)
        for coro, name in (
            (self._tail_loop(), "tail"),
            (self._watch_loop(pubsub), "watch"),
            (self._registry_poll(), "registry"),
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
            self.view.banner(
                f"console task {task.get_name()} failed: {exc!r}; restart the console",
                level="warn",
            )

    async def aclose(self) -> None:
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._background.clear()
        if self.attached and not self.read_only:
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self.ownership.release(self.attached)
        if self._offsets_writer is not None:
            with contextlib.suppress(Exception):  # never two writers of the file at once
                await self._offsets_writer
        for agent in self.tail.agents:
            position = self.tail.position(agent)
            if position is not None and self.view.unsettled(agent) is None:
                self.offsets.set(agent, position)
        self.offsets.save()
        with contextlib.suppress(Exception):
            await self.client.aclose()

    # input -------------------------------------------------------------------------------

    async def execute(self, line: str) -> None:
        """Run one line typed by the user; raises AteamError on failure."""
        text = line.rstrip("\n")
        if not text.strip():
            return
        try:
            await self._dispatch(text)
        except RedisError as exc:  # NOPERM, LOADING, a dropped link: one line, not a trace
            raise bus_error(exc) from exc

    async def _dispatch(self, text: str) -> None:
        if text.startswith("#"):
            await self.add_overlay_line(text[1:].strip())
            return
        if not text.startswith("/"):
            await self.send_input(text)
            return
        try:
            words = shlex.split(text[1:])
        except ValueError as exc:
            raise UsageError(f"cannot parse command: {exc}") from exc
        if not words:
            raise UsageError("empty command")
        command = self.commands.get(words[0])
        if command is None:
            raise UsageError(f"unknown command /{words[0]}")
        await command.handler(words[1:])

    def _clean(self, *texts: str) -> list[str]:
        """``texts`` with their secrets masked; the user is told once if any were.

        The patterns are the console's and those of the attached agent's project.
        """
        view = self.known.get(self.attached) if self.attached else None
        redactor = redactor_for(view.entry.cwd if view is not None else None, self.redactor)
        scrubbed = [redactor.scrub(text) for text in texts]
        notice = Scrubbed("", sum(s.replaced for s in scrubbed)).notice()
        if notice:
            self.view.banner(notice)
        return [s.text for s in scrubbed]

    async def send_input(self, text: str) -> None:
        agent = self._require_writer()
        (text,) = self._clean(text)
        reply = await self.rpc.call(agent, "input", {"text": text, "source": "console"})
        task_id = str(reply["id"])
        # A fast agent may finish the task before the reply reaches us.
        if task_id not in self._ended:
            self.pending_tasks.add(task_id)
        self._tasks_changed.set()

    async def add_overlay_line(self, text: str) -> None:
        """``# text``: a standing instruction, appended to the overlay for the next turn."""
        if not text:
            raise UsageError("usage: # TEXT (a line for the agent's system prompt overlay)")
        (text,) = self._clean(text)
        reply = await self.rpc.call(self._require_writer(), "prompt.append", {"text": text})
        self.view.info(f"overlay updated (prompt v{reply['version']}); applies to the next turn")

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

    # commands -------------------------------------------------------------------------

    def _command_table(self) -> dict[str, Command]:
        rows = [
            ("help", self._cmd_help, "/help [COMMAND]", "list commands or explain one"),
            ("ps", self._cmd_ps, "/ps [--json] [--state S]", "agents on the bus"),
            ("attach", self._cmd_attach, "/attach ID [--takeover]", "become the agent's writer"),
            ("detach", self._cmd_detach, "/detach", "release the attached agent"),
            ("who", self._cmd_who, "/who [ID]", "which console owns an agent"),
            ("tail", self._cmd_tail, "/tail ID", "watch an agent read-only (several allowed)"),
            ("untail", self._cmd_untail, "/untail ID", "stop watching an agent"),
            ("input", self._cmd_input, "/input TEXT", "send text (or just type it)"),
            ("interrupt", self._cmd_interrupt, "/interrupt", "stop the current task"),
            ("cancel", self._cmd_cancel, "/cancel [--hard]", "cancel the current task"),
            ("queue", self._cmd_queue, "/queue [clear|retry]", "show or change the queue"),
            ("history", self._cmd_history, "/history [N]", "the newest N turns"),
            (
                "clearhistory",
                self._cmd_clearhistory,
                "/clearhistory",
                "erase the attached agent's history for good (asks for its id)",
            ),
            ("ctx", self._cmd_ctx, "/ctx", "tokens in context and ctx %"),
            ("sys", self._cmd_sys, "/sys show|edit", "show the system prompt or edit the overlay"),
            ("reloadsysprompt", self._cmd_reload, "/reloadsysprompt", "reload the prompt files"),
            ("tools", self._cmd_tools, "/tools", "tools the attached agent may call"),
            ("approve", self._cmd_approve, "/approve [REQ]", "approve the waiting tool call"),
            ("apply", self._cmd_approve, "/apply [REQ]", "apply the proposed diff"),
            ("reject", self._cmd_reject, "/reject [REQ]", "reject the waiting call or diff"),
            ("edit", self._cmd_edit, "/edit [REQ]", "edit the proposed file in $EDITOR, apply it"),
            ("pending", self._cmd_pending, "/pending", "requests waiting for an answer"),
            ("models", self._cmd_models, "/models", "models with their health and the route"),
            ("use", self._cmd_use, "/use MODEL|--auto", "pin a model; --auto unpins"),
            ("save", self._cmd_save, "/save", "write the current model to agent.yaml"),
            ("handoff", self._cmd_handoff, "/handoff", "the handoff record, and if it verifies"),
            ("summarize", self._cmd_summarize, "/summarize", "re-summarise the working context"),
            (
                "plan",
                self._cmd_plan,
                "/plan [read|write|append|delete|list] [TEXT]",
                "the attached agent's plan.md; write without TEXT opens $EDITOR",
            ),
            ("kb", self._cmd_kb, KB_USAGE, "the knowledge base of the attached agent"),
            (
                "context",
                self._cmd_context,
                CONTEXT_USAGE,
                "the team's context items; post shares one",
            ),
            (
                "agents",
                self._cmd_agents,
                "/agents",
                "configured agents of the project, running or not",
            ),
            (
                "agent",
                self._cmd_agent,
                "/agent new",
                "create and start a configured agent (wizard)",
            ),
            ("spawn", self._cmd_spawn, SPAWN_USAGE, "start a new agent here or elsewhere (asks)"),
            (
                "offload",
                self._cmd_offload,
                OFFLOAD_USAGE,
                "hand the attached agent's work to a new agent (its proposal, editable; asks)",
            ),
            ("stop", self._cmd_stop, "/stop ID [--takeover]", "stop an agent gracefully (asks)"),
            ("ui", self._cmd_ui, "/ui panes on|off", "switch between panes and plain mode live"),
            ("quit", self._cmd_quit, "/quit", "leave the console (agents keep running)"),
        ]
        return {name: Command(name, fn, usage, text) for name, fn, usage, text in rows}

    async def _cmd_help(self, args: list[str]) -> None:
        if args:
            command = self.commands.get(args[0].lstrip("/"))
            if command is None:
                raise UsageError(f"unknown command /{args[0]}")
            self.view.info(f"{command.usage}  — {command.help}")
            return
        for command in self.commands.values():
            self.view.info(f"{command.usage:<28} {command.help}")
        self.view.info("plain text is sent to the attached agent")

    async def _cmd_ps(self, args: list[str]) -> None:
        views = await self.refresh_agents(announce=False)
        state = _option(args, "--state")
        if state:
            views = [v for v in views if v.state == state]
        rows = ps_rows(views)
        if "--json" in args:
            self.view.info(json.dumps(rows, sort_keys=True))
        else:
            self.view.table(rows, PS_COLUMNS)

    async def _cmd_attach(self, args: list[str]) -> None:
        positional = [a for a in args if not a.startswith("--")]
        if len(positional) != 1:
            raise UsageError("usage: /attach ID [--takeover]")
        agent = await self.resolve_agent(positional[0])
        takeover = "--takeover" in args
        if self.attached and self.attached != agent:
            await self._cmd_detach([])
        if takeover:
            self.view.banner(f"taking over {agent}: the current owner has 2 s to finish")
        previous = await self.ownership.acquire(agent, takeover=takeover)
        self.attached = agent
        self.read_only = False
        self._unconfirmed_loss = None
        self._follow(agent)
        note = f" (took over from {previous.describe()})" if previous else ""
        self.view.banner(f"attached to {agent} as its writer{note}")

    async def _cmd_detach(self, args: list[str]) -> None:
        agent = self._require_attached()
        if not self.read_only:
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self.ownership.release(agent)
        self.attached = None
        self.read_only = False
        self._unconfirmed_loss = None
        self.pending_tasks.clear()
        if agent not in self.tailed:
            self.tail.remove(agent)
        self.view.info(f"detached from {agent}")

    async def _cmd_who(self, args: list[str]) -> None:
        agent = await self.resolve_agent(args[0]) if args else self._require_attached()
        owner = await self.ownership.current(agent)
        me = " (this console)" if owner and owner.session == self.session else ""
        self.view.info(f"{agent}: owner {owner.describe()}{me}" if owner else f"{agent}: no owner")
        self.view.info(f"this console: {self.session}")

    async def _cmd_tail(self, args: list[str]) -> None:
        if len(args) != 1:
            raise UsageError("usage: /tail ID")
        agent = await self.resolve_agent(args[0])
        self.tailed.add(agent)
        self._follow(agent)
        self.view.info(f"tailing {agent} (read-only)")

    async def _cmd_untail(self, args: list[str]) -> None:
        if len(args) != 1:
            raise UsageError("usage: /untail ID")
        agent = await self.resolve_agent(args[0])
        self.tailed.discard(agent)
        if agent != self.attached:
            self.tail.remove(agent)

    async def _cmd_input(self, args: list[str]) -> None:
        if not args:
            raise UsageError("usage: /input TEXT")
        await self.send_input(" ".join(args))

    async def _cmd_interrupt(self, args: list[str]) -> None:
        reply = await self.rpc.call(self._require_writer(), "interrupt")
        self.view.info(f"interrupting {reply['task_id']}" if reply["task_id"] else "agent is idle")

    async def _cmd_cancel(self, args: list[str]) -> None:
        hard = "--hard" in args
        reply = await self.rpc.call(self._require_writer(), "cancel", {"hard": hard})
        what = "hard-cancelled" if hard else "cancelling"
        self.view.info(f"{what} {reply['task_id']}" if reply["task_id"] else "agent is idle")

    async def _cmd_queue(self, args: list[str]) -> None:
        action = args[0] if args else "list"
        if action == "list":
            agent = self._require_attached()
            reply = await self.rpc.call(agent, "queue.list")
            current = reply["current"]
            self.view.info(
                f"current: {current['id']} {current['text']!r}" if current else "current: -"
            )
            for item in reply["pending"]:
                self.view.info(f"pending: {item['id']} {item['text']!r}")
            for item in reply["dead"]:
                self.view.info(f"dead: {item.get('id')} ({item.get('reason')})")
            return
        agent = self._require_writer()
        if action == "clear":
            answer = await self.view.ask(f"clear every pending item of {agent}? type 'yes': ")
            if answer.strip().lower() != "yes":
                self.view.info("queue clear cancelled")
                return
            reply = await self.rpc.call(agent, "queue.clear", {"confirm": True})
            self.view.info(f"cleared {reply['cleared']} item(s)")
        elif action == "retry":
            reply = await self.rpc.call(agent, "queue.retry")
            self.view.info(f"re-queued {len(reply['requeued'])} item(s)")
        else:
            raise UsageError("usage: /queue [clear|retry]")

    async def _cmd_history(self, args: list[str]) -> None:
        agent = self._require_attached()
        try:
            n = int(args[0]) if args else 20
        except ValueError as exc:
            raise UsageError("usage: /history [N]") from exc
        reply = await self.rpc.call(agent, "history.tail", {"n": n})
        for turn in reply["turns"]:
            self.view.info(f"{turn.get('role')}: {turn.get('content')}", agent)

    async def _cmd_ctx(self, args: list[str]) -> None:
        stats = await self.rpc.call(self._require_attached(), "memory.stats")
        self.view.info(
            f"model {stats['model']}: {stats['tokens_in_context']} of {stats['context_window']} "
            f"tokens in context ({stats['ctx_pct']}%), {stats['history_turns']} turns in history"
        )
        if "next_context_tokens" in stats:
            self.view.info(
                f"next context: ~{stats['next_context_tokens']} tokens, "
                f"{stats['turns_in_context']} turns ({stats['turns_dropped']} older left out), "
                f"{stats['summaries']} summaries"
            )
        if "working_context" in stats:
            work = stats["working_context"]
            tokens = work.get("tokens", {})
            budget = work.get("budget", {})
            self.view.info(
                f"switch at {100 * stats['switch_at']:g}%; working context "
                f"{tokens.get('total', 0)} of {budget.get('total', '?')} tokens (summary "
                f"{tokens.get('summary', 0)}/{budget.get('summary', '?')}, decisions "
                f"{tokens.get('decisions', 0)}, failures {tokens.get('failures', 0)}, "
                f"constraints {tokens.get('constraints', 0)})"
            )
        for model, used in (stats.get("usage") or {}).get("per_model", {}).items():
            self.view.info(
                f"usage {model}: {used['tokens_in']} in, {used['tokens_out']} out, "
                f"{used['calls']} calls, est. cost {used['cost']}"
            )

    async def _cmd_sys(self, args: list[str]) -> None:
        action = args[0] if args else "show"
        if action == "show":
            reply = await self.rpc.call(self._require_attached(), "prompt.show")
            for line in str(reply["marked"]).splitlines():
                self.view.info(line)
        elif action == "edit":
            agent = self._require_writer()
            current = await self.rpc.call(agent, "prompt.overlay")
            edited = await self.edit_text(str(current["text"]), suffix=".md")
            if edited is None or edited == current["text"]:
                self.view.info("overlay unchanged")
                return
            (edited,) = self._clean(edited)
            reply = await self.rpc.call(agent, "prompt.set", {"text": edited})
            self.view.info(f"overlay saved (prompt v{reply['version']})")
        else:
            raise UsageError("usage: /sys show|edit")

    async def _cmd_reload(self, args: list[str]) -> None:
        reply = await self.rpc.call(self._require_writer(), "prompt.reload")
        when = "now" if reply["applied"] else "after the current task"
        self.view.info(f"prompt files reload {when}")

    async def _cmd_tools(self, args: list[str]) -> None:
        reply = await self.rpc.call(self._require_attached(), "tools.list")
        for item in reply["tools"]:
            self.view.info(f"{item['name']:<14} [{item['approval']}] {item['description']}")
        if not reply["tools"]:
            self.view.info("no tools allowed (tools.allow in agent.yaml)")

    async def _cmd_pending(self, args: list[str]) -> None:
        reply = await self.rpc.call(self._require_attached(), "approval.list")
        for request in reply["pending"]:
            what = request.get("path") or json.dumps(request.get("args"))
            self.view.info(f"{request['request_id']}: {request['tool']} {what}")
        if not reply["pending"]:
            self.view.info("nothing is waiting")

    async def _answer(self, args: list[str], decision: str, **extra: Any) -> None:
        params: dict[str, Any] = {"decision": decision, **extra}
        if args:
            params["request_id"] = args[0]
        reply = await self.rpc.call(self._require_writer(), "approval.answer", params)
        self.view.info(f"{reply['request_id']}: {reply['decision']}")

    async def _cmd_approve(self, args: list[str]) -> None:
        await self._answer(args, "approve")

    async def _cmd_reject(self, args: list[str]) -> None:
        await self._answer(args, "reject")

    async def _cmd_edit(self, args: list[str]) -> None:
        agent = self._require_writer()
        pending = (await self.rpc.call(agent, "approval.list", {"full": True}))["pending"]
        wanted = [
            r
            for r in pending
            if r.get("kind") == "diff" and (not args or r["request_id"] == args[0])
        ]
        if not wanted:
            raise UsageError(
                "no proposed diff is waiting" + (f" with id {args[0]}" if args else "")
            )
        request = wanted[0]
        suffix = os.path.splitext(str(request.get("path", "")))[1] or ".txt"
        edited = await self.edit_text(str(request.get("new_content", "")), suffix=suffix)
        if edited is None:
            self.view.info("editor failed; nothing was answered")
            return
        await self._answer([request["request_id"]], "edit", content=edited)

    async def edit_text(self, text: str, *, suffix: str) -> str | None:
        """Open ``text`` in ``$VISUAL``/``$EDITOR`` and return what was saved."""
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        fd, name = tempfile.mkstemp(prefix="ateam-", suffix=suffix)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            proc = await asyncio.create_subprocess_exec(*shlex.split(editor), name)
            if await proc.wait() != 0:
                return None
            return await asyncio.to_thread(Path(name).read_text, encoding="utf-8")
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)

    async def _cmd_models(self, args: list[str]) -> None:
        reply = await self.rpc.call(self._require_attached(), "model.list")
        pinned = f", pinned {reply['pinned']}" if reply["pinned"] else ""
        self.view.info(f"route: {' → '.join(reply['route'])}; current {reply['current']}{pinned}")
        for row in reply["models"]:
            mark = "*" if row["current"] else " "
            health = "healthy" if row["healthy"] else f"unhealthy ({row['last_error']})"
            if row["cooling_down_s"]:
                health += f", cooling down {row['cooling_down_s']}s"
            self.view.info(
                f"{mark} {row['id']:<16} {row['provider']:<10} window {row['context_window']:<8} "
                f"{health}; {row['tokens_in']} in / {row['tokens_out']} out, cost {row['cost']}"
            )

    async def _cmd_use(self, args: list[str]) -> None:
        if len(args) != 1:
            raise UsageError("usage: /use MODEL (pins it) or /use --auto (unpins)")
        model = None if args[0] == "--auto" else args[0]
        reply = await self.rpc.call(self._require_writer(), "model.use", {"model": model})
        if reply["pinned"]:
            self.view.info(f"pinned to {reply['pinned']}: no automatic switching until /use --auto")
        else:
            self.view.info(f"automatic switching on; current model {reply['current']}")

    async def _cmd_save(self, args: list[str]) -> None:
        reply = await self.rpc.call(self._require_writer(), "model.save")
        self.view.info(f"saved the current model to {reply['saved']}")

    async def _cmd_handoff(self, args: list[str]) -> None:
        reply = await self.rpc.call(self._require_attached(), "handoff.show")
        verdict = "verifies" if reply["valid"] else f"does NOT verify ({reply['reason']})"
        self.view.info(f"handoff {verdict}")
        if reply["record"] is not None:
            for line in json.dumps(reply["record"], indent=2, ensure_ascii=False).splitlines():
                self.view.info(line)

    async def _cmd_summarize(self, args: list[str]) -> None:
        reply = await self.rpc.call(self._require_writer(), "context.summarize", timeout=120)
        if reply["ok"]:
            self.view.info(f"working context summarised ({reply['attempts']} attempt(s))")
        else:
            self.view.info(f"summary not changed: {reply['reason']}; the raw turns are kept")

    async def _cmd_clearhistory(self, args: list[str]) -> None:
        if args:
            raise UsageError("usage: /clearhistory (erases the attached agent's history)")
        agent = self._require_writer()
        answer = await self.view.ask(
            f"this erases every turn of {agent}'s history and cannot be undone; "
            f"type the agent id {agent} to confirm: "
        )
        if answer.strip() != agent:
            self.view.info("clearhistory cancelled: the answer was not the agent id")
            return
        await self.rpc.call(agent, "history.clear", {"confirm_id": agent})
        self.view.info(f"history of {agent} cleared")

    async def _cmd_plan(self, args: list[str]) -> None:
        action, text = (args[0], " ".join(args[1:])) if args else ("read", "")
        handler = self._plan_actions.get(action)
        if handler is None:
            raise UsageError("usage: /plan [read|write|append|delete|list] [TEXT]")
        await handler(text)

    @property
    def _plan_actions(self) -> dict[str, Callable[[str], Awaitable[None]]]:
        return {
            "read": self._plan_read,
            "show": self._plan_read,
            "write": self._plan_write,
            "append": self._plan_append,
            "delete": self._plan_delete,
            "list": self._plan_list,
        }

    async def _plan_read(self, text: str) -> None:
        agent = await self.resolve_agent(text) if text else self._require_attached()
        reply = await self.rpc.call(agent, "plan.read")
        if not reply["text"]:
            self.view.info(f"{agent} has no plan yet ({reply['path']})")
            return
        for line in str(reply["text"]).splitlines():
            self.view.info(line, agent)

    async def _plan_write(self, text: str) -> None:
        agent = self._require_writer()
        if not text:
            current = await self.rpc.call(agent, "plan.read")
            edited = await self.edit_text(str(current["text"]), suffix=".md")
            if edited is None or edited == current["text"]:
                self.view.info("plan unchanged")
                return
            text = edited
        (text,) = self._clean(text)
        reply = await self.rpc.call(agent, "plan.write", {"text": text})
        self.view.info(f"plan of {agent} written ({reply['bytes']} bytes)")

    async def _plan_append(self, text: str) -> None:
        if not text:
            raise UsageError("usage: /plan append TEXT")
        agent = self._require_writer()
        (text,) = self._clean(text)
        reply = await self.rpc.call(agent, "plan.append", {"text": text})
        self.view.info(f"plan of {agent} now {reply['bytes']} bytes")

    async def _plan_delete(self, text: str) -> None:
        agent = self._require_writer()
        if not await self._confirm(f"delete the plan of {agent} for good?"):
            self.view.info("plan delete cancelled")
            return
        reply = await self.rpc.call(agent, "plan.delete", {"confirm": True})
        self.view.info(f"plan of {agent} deleted" if reply["deleted"] else f"{agent} had no plan")

    async def _plan_list(self, text: str) -> None:
        views = [v for v in await self.refresh_agents(announce=False) if v.connected]

        async def plan_of(agent: str) -> dict[str, Any] | None:
            with contextlib.suppress(AteamError, RedisError):
                reply: dict[str, Any] = await self.rpc.call(agent, "plan.read", timeout=2.0)
                return reply
            return None

        replies = await asyncio.gather(*(plan_of(v.id) for v in views))
        rows = []
        for view, reply in zip(views, replies, strict=True):
            if reply is None:
                rows.append({"id": view.id, "bytes": None, "first_line": "(no answer)"})
            elif reply["text"]:
                first = next((ln for ln in str(reply["text"]).splitlines() if ln.strip()), "")
                rows.append({"id": view.id, "bytes": reply["bytes"], "first_line": first[:60]})
        if rows:
            self.view.table(rows, ["id", "bytes", "first_line"])
        else:
            self.view.info("no running agent has a plan")

    async def _cmd_context(self, args: list[str]) -> None:
        action = args[0] if args and not args[0].startswith("--") else "ls"
        rest = args[1:] if args and args[0] == action else args
        positional, options, _ = _parse_args(
            rest,
            f"usage: {CONTEXT_USAGE}",
            options=("--type", "--urgency", "--scope", "--tags", "--content", "--tag"),
        )
        project = (await self._home_project()).name
        store = ContextStore(self.client, self.keys, redactor=self.redactor)
        if action == "post":
            if not positional:
                raise UsageError(f"usage: {CONTEXT_USAGE} (post needs a TITLE)")
            title, content = self._clean(" ".join(positional), options.get("--content", ""))
            item = await store.post(
                project,
                type=options.get("--type", "status"),
                title=title,
                content=content,
                urgency=options.get("--urgency", "background"),
                scope=options.get("--scope", "project"),
                tags=_csv(options.get("--tags")),
                source_runtime="console",
            )
            self.view.info(f"posted {item.id} to {project} ({item.scope}, {item.urgency})")
            return
        if action != "ls" or positional:
            raise UsageError(f"usage: {CONTEXT_USAGE}")
        items = await store.list(
            project,
            types=_csv(options.get("--type")),
            scopes=_csv(options.get("--scope")),
            tags=_csv(options.get("--tag") or options.get("--tags")),
            min_urgency=options.get("--urgency"),
        )
        if not items:
            self.view.info(f"no context items in {project}")
            return
        now = time.time()
        rows = [
            {
                "id": item.id,
                "age": f"{max(0, int(now - item.created_at))}s",
                "type": str(item.type),
                "urgency": str(item.urgency),
                "scope": str(item.scope),
                "source": item.source_agent or item.source_runtime,
                "title": item.title[:80],
            }
            for item in items
        ]
        self.view.table(rows, CONTEXT_COLUMNS)

    async def _cmd_kb(self, args: list[str]) -> None:
        action = args[0] if args else ""
        handler = self._kb_actions.get(action)
        if handler is None:
            raise UsageError(f"usage: {KB_USAGE}")
        positional, options, _ = _parse_args(
            args[1:], f"usage: {KB_USAGE}", options=("--scope", "--ids", "--k")
        )
        await handler(positional, options)

    @property
    def _kb_actions(self) -> dict[str, Callable[[list[str], dict[str, str]], Awaitable[None]]]:
        return {
            "add": self._kb_add,
            "search": self._kb_search,
            "ls": self._kb_ls,
            "copy-from": self._kb_copy_from,
        }

    async def _kb_add(self, paths: list[str], options: dict[str, str]) -> None:
        if not paths:
            raise UsageError("usage: /kb add [--scope S] PATH…")
        agent = self._require_writer()
        # A path that exists here is sent absolute (the console and the agent usually
        # share a host); anything else is the agent's to resolve against its cwd.
        sent = await asyncio.to_thread(_local_paths, paths)
        params = {"scope": options.get("--scope", "agent"), "paths": sent}
        report = await self.rpc.call(agent, "kb.ingest", params, timeout=KB_INGEST_TIMEOUT_S)
        self.view.info(
            f"kb {params['scope']}: {len(report['ingested'])} document(s) ingested, "
            f"{report['chunks']} chunk(s), {len(report['skipped'])} skipped"
        )
        for item in report["ingested"]:
            self.view.info(f"  + {item['doc_id']} {item['path']} ({item['chunks']} chunks)")
        for item in report["skipped"]:
            dup = f" (duplicate of {item['duplicate_of']})" if item.get("duplicate_of") else ""
            self.view.info(f"  - {item['path']}: {item['reason']}{dup}")

    async def _kb_search(self, words: list[str], options: dict[str, str]) -> None:
        if not words:
            raise UsageError("usage: /kb search [--scope S] QUERY")
        agent = self._require_attached()
        params: dict[str, Any] = {
            "scope": options.get("--scope", "agent"),
            "query": " ".join(words),
        }
        if "--k" in options:
            params["k"] = _int_option(options["--k"], "--k")
        hits = (await self.rpc.call(agent, "kb.search", params))["hits"]
        if not hits:
            self.view.info("no passage scores above the minimum (0.35)")
            return
        self.view.table(kb_hit_rows(hits), list(KB_HIT_COLUMNS))

    async def _kb_ls(self, words: list[str], options: dict[str, str]) -> None:
        agent = self._require_attached()
        scope = options.get("--scope", "agent")
        docs = (await self.rpc.call(agent, "kb.list", {"scope": scope}))["documents"]
        if not docs:
            self.view.info(f"the {scope} knowledge base of {agent} is empty")
            return
        self.view.table(docs, ["doc_id", "path", "chunks", "source_agent"])

    async def _kb_copy_from(self, words: list[str], options: dict[str, str]) -> None:
        ids = list(_csv(options.get("--ids")))
        if len(words) != 1 or not ids:
            raise UsageError("usage: /kb copy-from ID --ids A,B (only chosen documents)")
        target = self._require_writer()
        source = await self.resolve_agent(words[0])
        await self._copy_documents(source, target, ids, options.get("--scope", "agent"))

    async def _copy_documents(self, source: str, target: str, ids: list[str], scope: str) -> None:
        exported = await self.rpc.call(source, "kb.export", {"scope": "agent", "ids": ids})
        report = await self.rpc.call(
            target,
            "kb.import",
            {"scope": scope, "chunks": exported["chunks"], "copied_from": source},
            timeout=KB_INGEST_TIMEOUT_S,
        )
        self.view.info(
            f"copied {len(report['ingested'])} document(s) from {source} into the {scope} "
            f"knowledge base of {target}; {len(report['skipped'])} already there"
        )

    async def _cmd_agents(self, args: list[str]) -> None:
        project = await self._home_project()
        running = {v.id: v for v in await self.refresh_agents(announce=False)}
        rows = []
        for _, config in sorted(project.agents.items()):
            view = running.pop(config.id, None)
            rows.append(
                {
                    "id": config.id,
                    "state": view.state if view else "stopped",
                    "model": view.entry.model if view else config.model,
                    "cwd": str(config.cwd),
                    "description": config.spec.description,
                }
            )
        for agent, view in sorted(running.items()):
            if agent.split("/", 1)[0] == project.name:
                rows.append(
                    {
                        "id": agent,
                        "state": view.state,
                        "model": view.entry.model,
                        "cwd": view.entry.cwd,
                        "description": "(not configured)",
                    }
                )
        if not rows:
            where = project.root or Path.cwd()
            self.view.info(f"no agents configured in {where}; /agent new creates one")
            return
        self.view.table(rows, ["id", "state", "model", "cwd", "description"])

    async def _home_project(self) -> ProjectConfig:
        """The project of the attached agent's cwd, else of the console's cwd."""
        view = self.known.get(self.attached) if self.attached else None
        cwd = Path(view.entry.cwd) if view is not None and view.entry.cwd else Path.cwd()
        project = await asyncio.to_thread(_project_of, cwd)
        if project is None:
            project = await asyncio.to_thread(load_project, Path.cwd())
        return project

    async def _cmd_agent(self, args: list[str]) -> None:
        if args != ["new"]:
            raise UsageError("usage: /agent new")
        project = await self._home_project()
        if project.root is None:
            raise UsageError(
                "no .ateam/ project here to add an agent to; create .ateam/project.yaml first"
            )
        wizard = AgentWizard(project, taken=set(self.known), ask=self.view.ask, say=self.view.info)
        answers = await wizard.run()
        if answers is None:
            self.view.info("agent new cancelled")
            return
        plan = await self._plan_local(
            f"{project.name}/{answers.name}", str(answers.cwd), None, worktree=False
        )
        self._show_spawn(
            plan.request,
            where=plan.where,
            model=answers.model,
            how="this host, detached, restarted if it crashes, log state/agent.log",
        )
        self.view.info(f"  {'config':<8} {project.root / CONFIG_DIR / 'agents' / answers.name}")
        if not await self._confirm("create and start it?"):
            self.view.info("agent new cancelled")
            return
        (overlay,) = self._clean(answers.overlay or "")
        seed = fleet.Seed(system_prompt=overlay or None, source="console")
        await self._launch_local(plan, attach=False, seed=seed, agent_yaml=answers.agent_yaml())

    # fleet ---------------------------------------------------------------------------

    async def _cmd_offload(self, args: list[str]) -> None:
        positional, options, flags = _parse_args(
            args,
            f"usage: {OFFLOAD_USAGE}",
            options=("--name",),
            flags=("--remote", "--worktree", "--attach"),
        )
        if positional:
            raise UsageError(f"usage: {OFFLOAD_USAGE}")
        parent = self._require_writer()
        name = options.get("--name")
        params = {"name": name} if name else {}
        proposal = await self.rpc.call(parent, "offload.propose", params)
        form = OffloadForm.from_proposal(
            proposal,
            where="remote" if "--remote" in flags else "here",
            worktree="--worktree" in flags,
        )
        if name:
            form = form.set("name", name)
        else:
            form = replace(form, name=await self._free_name(form))
        self.view.info(f"{parent} proposes this agent to take over its work:")
        while True:
            for line in form.lines():
                self.view.info(line)
            answer = (await self.view.ask(OFFLOAD_QUESTION)).strip()
            if answer.lower() == "yes":
                try:
                    plan = await self._plan_offload(form)
                except AteamError as exc:  # a value that can't work: fix it, don't start
                    self.view.info(exc.one_line())
                    continue
                await self._start_offload(form, plan, attach="--attach" in flags)
                return
            try:
                if answer.startswith("edit "):
                    form = await self._edit_field(form, answer[5:].strip())
                elif "=" in answer or answer.partition(":")[0].strip() in LONG_FIELDS:
                    form = form.apply(answer)
                else:
                    self.view.info("offload cancelled")
                    return
            except UsageError as exc:
                self.view.info(exc.one_line())

    async def _edit_field(self, form: OffloadForm, name: str) -> OffloadForm:
        if name not in LONG_FIELDS:
            raise UsageError(f"edit works on {', '.join(LONG_FIELDS)}; use {name}=VALUE")
        edited = await self.edit_text(str(getattr(form, name)), suffix=".md")
        if edited is None:
            raise UsageError("the editor failed; the field is unchanged")
        return form.set(name, edited)

    async def _free_name(self, form: OffloadForm) -> str:
        """The proposed name if free, else the first ``NAME-N`` neither running nor configured."""
        await self.refresh_agents(announce=False)
        configured = await asyncio.to_thread(_configured_names, Path(form.cwd))
        base = form.name
        stem, _, number = base.rpartition("-")
        stem = stem if stem and number.isdigit() else base
        for candidate in (base, *(f"{stem}-{n}" for n in range(2, 100))):
            if f"{form.project}/{candidate}" not in self.known and candidate not in configured:
                return candidate
        return base

    async def _plan_offload(self, form: OffloadForm) -> _LocalPlan | None:
        """Validate the form for its destination; ``None`` for a remote start."""
        if form.where == "remote":
            if form.worktree:
                raise UsageError("worktree=yes is for agents on this host, not where=remote")
            await self._refuse_running(form.agent_id)
            return None
        return await self._plan_local(form.agent_id, form.cwd, form.model, worktree=form.worktree)

    async def _start_offload(
        self, form: OffloadForm, plan: _LocalPlan | None, *, attach: bool
    ) -> None:
        # The first task becomes a queue line here or a bootstrap record in Redis.
        system_prompt, first_task = self._clean(form.system_prompt, form.first_task)
        seed = fleet.Seed(system_prompt=system_prompt, first_task=first_task)
        if plan is None:
            request = fleet.SpawnRequest(form.project, form.name, Path(form.cwd), form.model)
            await self._issue_remote(request, with_cwd=True, seed=seed)
            self.view.info(f"{form.parent} keeps working; the new agent starts on the handoff")
            if form.kb_ids:
                # A token is no place for documents: they follow once it has joined.
                self.view.info(
                    f"once it has joined: /attach {form.agent_id}, then /kb copy-from "
                    f"{form.parent} --ids {','.join(form.kb_ids)}"
                )
            return
        if form.kb_ids:
            exported = await self.rpc.call(
                form.parent, "kb.export", {"scope": "agent", "ids": list(form.kb_ids)}
            )
            seed = replace(seed, kb_chunks=tuple(exported["chunks"]), copied_from=form.parent)
        parent = await self._local_config(form.parent, Path(form.cwd))
        agent_yaml = fleet.parent_agent_yaml(parent) if parent is not None else {}
        agent_yaml.pop("cwd", None)  # the new agent's cwd is given on its command line
        agent_yaml["model"] = form.model
        agent_yaml["description"] = f"offloaded from {form.parent}"
        base = None
        if parent is not None and parent.base_prompt_path.is_file():
            base = await asyncio.to_thread(parent.base_prompt_path.read_text, encoding="utf-8")
        view = await self._launch_local(
            plan, attach=attach, seed=seed, agent_yaml=agent_yaml, base_prompt=base
        )
        self.view.info(f"{form.parent} keeps working; {view.id} starts on the handoff")

    async def _local_config(self, agent: str, cwd: Path) -> AgentConfig | None:
        """The configuration ``agent`` has on this host, if its cwd is here."""
        project_name, _, name = agent.partition("/")
        project = await asyncio.to_thread(_project_of, cwd)
        if project is None:
            return None
        return fleet.agent_config_for(project, project_name, name, cwd, explicit_cwd=False)

    async def _cmd_stop(self, args: list[str]) -> None:
        usage = "usage: /stop ID [--takeover]"
        positional, _, flags = _parse_args(args, usage, flags=("--takeover",))
        if len(positional) != 1:
            raise UsageError(usage)
        agent = await self.resolve_agent(positional[0])
        if not await self._confirm(f"stop {agent}? its current task goes back to its queue;"):
            self.view.info("stop cancelled")
            return
        reply = await self._call_as_writer(agent, "shutdown", {}, takeover="--takeover" in flags)
        self.view.info(f"stopping {agent} (pid {reply.get('pid')})")
        gone = await _poll(lambda: self._gone(agent), STOP_WAIT_S)
        if agent == self.attached:
            await self._cmd_detach([])
        if gone:
            self.view.info(f"stopped {agent}")
        else:
            self.view.banner(f"{agent} was asked to stop but is still registered", level="warn")

    async def _gone(self, agent: str) -> bool:
        return await self.registry.get(agent) is None

    async def _call_as_writer(
        self, agent: str, method: str, params: dict[str, Any], *, takeover: bool
    ) -> Any:
        """A mutating call to any agent: as its writer if attached, else owning it briefly.

        Like ``ateam stop``: ownership is taken around the call (SPEC §4.3) and given
        back, so the agent's owner check holds for consoles that never attached.
        """
        if agent == self.attached and not self.read_only:
            return await self.rpc.call(agent, method, params)
        await self.ownership.acquire(agent, takeover=takeover, kind=OwnerKind.CALL)
        try:
            return await self.rpc.call(agent, method, params)
        finally:
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self.ownership.release(agent)

    async def _cmd_spawn(self, args: list[str]) -> None:
        positional, options, flags = _parse_args(
            args,
            f"usage: {SPAWN_USAGE}",
            options=("--cwd", "--model"),
            flags=("--worktree", "--remote", "--attach"),
        )
        if len(positional) != 1:
            raise UsageError(f"usage: {SPAWN_USAGE}")
        if "--remote" in flags:
            if flags & {"--worktree", "--attach"}:
                raise UsageError(
                    "--worktree and --attach are for agents on this host, not --remote"
                )
            await self._spawn_remote(positional[0], options)
        else:
            await self._spawn_local(positional[0], options, flags)

    async def _spawn_local(self, text: str, options: dict[str, str], flags: set[str]) -> None:
        plan = await self._plan_local(
            text, options.get("--cwd"), options.get("--model"), worktree="--worktree" in flags
        )
        self._show_spawn(
            plan.request,
            where=plan.where,
            model=plan.request.model or plan.config.model,
            how="this host, detached, restarted if it crashes, log state/agent.log",
        )
        if not await self._confirm("start it?"):
            self.view.info("spawn cancelled")
            return
        await self._launch_local(plan, attach="--attach" in flags)

    async def _plan_local(
        self, text: str, given_cwd: str | None, model: str | None, *, worktree: bool
    ) -> _LocalPlan:
        """Check everything a local start needs, changing nothing; raises AteamError."""
        cwd = self._spawn_cwd(given_cwd)
        here = await asyncio.to_thread(load_project, cwd)
        project, name = self._spawn_identity(text, here.name)
        request = fleet.SpawnRequest(project, name, cwd, model)
        await self._refuse_running(request.agent_id)
        if here.namespace != self.keys.ns:
            raise UsageError(
                f"{cwd} belongs to namespace {here.namespace!r} but this console is on "
                f"{self.keys.ns!r}; the agent would be invisible here"
            )
        config = fleet.agent_config_for(here, project, name, cwd, explicit_cwd=True)
        config.model_entry(request.model)  # an unknown model fails here, not in the log
        planned = None
        where = str(cwd)
        if worktree:
            planned = await asyncio.to_thread(fleet.plan_worktree, cwd, name, here.root)
            where = f"{planned.cwd} (new git worktree of {planned.repo}, branch {planned.branch})"
        return _LocalPlan(request, config, planned, where)

    async def _launch_local(
        self,
        plan: _LocalPlan,
        *,
        attach: bool,
        seed: fleet.Seed | None = None,
        agent_yaml: dict[str, Any] | None = None,
        base_prompt: str | None = None,
    ) -> AgentView:
        """Start a planned agent under a keeper and wait until it serves.

        ``agent_yaml`` configures the agent in its project's ``.ateam/agents/`` when it
        is not configured there yet (a project-less directory keeps it unconfigured);
        ``seed`` is written before it starts.
        """
        request, config = plan.request, plan.config
        if plan.worktree is not None:
            await asyncio.to_thread(fleet.add_worktree, plan.worktree)
            self.view.info(
                f"created worktree {plan.worktree.path} on branch {plan.worktree.branch}"
            )
            request = replace(request, cwd=plan.worktree.cwd)
        project = await asyncio.to_thread(load_project, request.cwd)
        configured = project.name == request.project and request.name in project.agents
        if agent_yaml is not None and not configured and project.root is not None:
            agents_dir = project.root / CONFIG_DIR / "agents"
            made = await asyncio.to_thread(
                fleet.create_agent_dir,
                agents_dir,
                request.name,
                agent_yaml,
                base_prompt=base_prompt,
            )
            self.view.info(f"configured {request.agent_id} in {made}")
            project = await asyncio.to_thread(load_project, request.cwd)
            # Its agent.yaml names the model: no pin, so automatic switching stays on.
            request = replace(request, model=None)
        config = fleet.agent_config_for(
            project, request.project, request.name, request.cwd, explicit_cwd=True
        )
        if seed is not None:
            await asyncio.to_thread(fleet.seed_agent, config, seed)
        log = config.state_dir / "agent.log"
        # The embedded server's password is not in its URL: let the agent find it itself.
        url = None if self.target.source == "embedded" else self.target.url
        keeper = await asyncio.to_thread(fleet.start_kept, request, log=log, redis_url=url)
        self._keepers.append(keeper)
        view = await self._wait_serving(request.agent_id, keeper, log)
        self.view.info(
            f"spawned {view.id} (pid {view.entry.pid}, model {view.entry.model}, cwd "
            f"{view.entry.cwd}); its keeper is pid {keeper.pid}; log {log}"
        )
        if attach:
            await self._cmd_attach([view.id])
        return view

    async def _spawn_remote(self, text: str, options: dict[str, str]) -> None:
        given = options.get("--cwd")
        project = None if "/" in text or self.attached else await asyncio.to_thread(load_project)
        project_name, name = self._spawn_identity(text, project.name if project else "")
        request = fleet.SpawnRequest(project_name, name, Path(given or "."), options.get("--model"))
        await self._refuse_running(request.agent_id)
        self._show_spawn(
            request,
            where=given or "(where the command is run)",
            model=request.model or "(the agent's configured model)",
            how="another host, admitted once by a bootstrap token valid for 5 minutes",
        )
        if not await self._confirm("issue the token?"):
            self.view.info("spawn cancelled")
            return
        await self._issue_remote(request, with_cwd=given is not None)

    async def _issue_remote(
        self, request: fleet.SpawnRequest, *, with_cwd: bool, seed: fleet.Seed | None = None
    ) -> None:
        """Mint a one-time token for ``request`` and print the command that redeems it."""
        spec: dict[str, Any] = {
            key: value
            for key, value in (
                ("cwd", str(request.cwd) if with_cwd else None),
                ("model", request.model),
            )
            if value
        }
        if seed is not None:
            spec.update(seed.to_spec())
        token = await bootstrap.issue(self.client, self.keys, agent_id=request.agent_id, spec=spec)
        self.view.info("run this on the other host (the token works once, within 5 minutes):")
        self.view.info(
            fleet.remote_command(request, redis_url=self.target.url, token=token, with_cwd=with_cwd)
        )
        if self.target.url.startswith("unix://"):
            self.view.info("note: this Redis is a local unix socket; give the other host a URL")
        elif self.target.password and "@" not in self.target.url:
            self.view.info("note: the Redis password is not in the URL; the other host needs it")

    def _spawn_cwd(self, given: str | None) -> Path:
        attached = self.known.get(self.attached) if self.attached else None
        if given:
            path = Path(given).expanduser()
        elif attached is not None and attached.entry.cwd:
            path = Path(attached.entry.cwd)  # beside the attached agent
        else:
            path = Path.cwd()
        path = path.resolve()
        if not path.is_dir():
            hint = "" if given else "; pass --cwd D"
            raise UsageError(f"{path} is not a directory on this host{hint}")
        return path

    def _spawn_identity(self, text: str, default_project: str) -> tuple[str, str]:
        """``PROJECT/NAME``, or NAME in the attached agent's project, else the cwd's."""
        project, _, name = text.rpartition("/")
        if not project:
            project = self.attached.split("/", 1)[0] if self.attached else default_project
        for value, what in ((project, "project"), (name, "agent")):
            try:
                check_name(value, what)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        return project, name

    async def _refuse_running(self, agent: str) -> None:
        view = await self.registry.get(agent)
        if view is not None and view.connected:
            raise UsageError(
                f"{agent} is already running (pid {view.entry.pid} on {view.entry.host})"
            )

    def _show_spawn(self, request: fleet.SpawnRequest, *, where: str, model: str, how: str) -> None:
        self.view.info(f"spawn {request.agent_id}:")
        for label, value in (
            ("project", request.project),
            ("name", request.name),
            ("cwd", where),
            ("model", model),
            ("runs on", how),
        ):
            self.view.info(f"  {label:<8} {value}")

    async def _confirm(self, question: str) -> bool:
        answer = await self.view.ask(f"{question} type 'yes': ")
        return answer.strip().lower() == "yes"

    async def _wait_serving(
        self, agent: str, keeper: subprocess.Popen[bytes], log: Path
    ) -> AgentView:
        """Until ``agent`` serves; a keeper that gave up or a timeout is a SpawnFailed."""

        async def serving() -> AgentView | None:
            view = await self.registry.get(agent)
            if view is not None and view.connected and view.state in SERVING_STATES:
                return view
            code = keeper.poll()
            if code is not None:
                raise SpawnFailed(
                    f"{agent} exited with {code} before joining: {fleet.last_log_line(log)}"
                    f" (log {log})"
                )
            return None

        view = await _poll(serving, SPAWN_TIMEOUT_S)
        if view is None:
            keeper.terminate()  # never leave a crash-looping agent behind
            raise SpawnFailed(
                f"{agent} did not join within {SPAWN_TIMEOUT_S:g} s and was stopped; "
                f"last log line: {fleet.last_log_line(log)} (log {log})"
            )
        return view

    async def _cmd_quit(self, args: list[str]) -> None:
        self.quit_requested = True

    async def _cmd_ui(self, args: list[str]) -> None:
        modes = {"on": "panes", "off": "plain"}
        if len(args) != 2 or args[0] != "panes" or args[1] not in modes:
            raise UsageError("usage: /ui panes on|off")
        wanted = modes[args[1]]
        if wanted == self.front_end:
            self.view.info(f"already in {wanted} mode")
            return
        if wanted == "panes" and not self.panes_possible:
            raise UsageError(
                "this terminal cannot show panes: it needs a TTY on both ends and a TERM "
                "other than dumb"
            )
        self.switch_to = wanted
        self.quit_requested = True  # this front end ends; the caller starts the other

    # helpers -------------------------------------------------------------------------

    def _require_attached(self) -> str:
        if self.attached is None:
            raise UsageError("not attached to an agent; /attach ID first")
        return self.attached

    def _require_writer(self) -> str:
        agent = self._require_attached()
        if self.read_only:
            raise OwnershipDenied(
                f"this console is read-only for {agent}; /attach {agent} --takeover to write"
            )
        return agent

    async def resolve_agent(self, text: str) -> str:
        """Full id, or a unique prefix / bare name of a known agent."""
        if text not in self.known:
            await self.refresh_agents(announce=False)
        if text in self.known:
            return text
        matches = [a for a in self.known if a.startswith(text) or a.split("/", 1)[-1] == text]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise UsageError(f"{text!r} is ambiguous: {', '.join(sorted(matches))}")
        from ateam.errors import AgentNotFound

        raise AgentNotFound(f"no agent {text!r} on this bus")

    def _follow(self, agent: str) -> None:
        if agent not in self.tail.agents:
            self.tail.add(agent, self.offsets.get(agent))

    async def refresh_agents(self, *, announce: bool = True) -> list[AgentView]:
        views = await self.registry.list()
        fresh = {v.id: v for v in views}
        if announce:
            for agent, view in fresh.items():
                old = self.known.get(agent)
                if old is not None and old.connected and not view.connected:
                    self.view.banner(f"agent {agent} is {view.state}", level="warn")
                elif old is not None and not old.connected and view.connected:
                    self.view.banner(f"agent {agent} is back")
                if (
                    self.announce_waiting
                    and view.state == "waiting"
                    and (old is None or old.state != "waiting")
                ):
                    self.view.banner(f"agent {agent} is waiting for approval", level="alert")
                self._announce_blocked(old, view)
        self.known = fresh
        self._auto_tail()
        return views

    def _announce_blocked(self, old: AgentView | None, view: AgentView) -> None:
        """An agent that cannot write its state (a full disk) is a banner in every front end.

        Its work is paused, not lost, and it resumes by itself: both ends are news.
        """
        was = old is not None and old.state == "blocked"
        if view.state == "blocked" and not was:
            why = view.entry.alert or "blocked"
            self.view.banner(f"agent {view.id} is {why}", level="alert")
        elif was and view.connected and view.state != "blocked":
            self.view.banner(f"agent {view.id} is no longer blocked; its work resumes")

    def _auto_tail(self) -> None:
        """Keep up to :attr:`auto_tail_limit` other live agents followed, busy ones first.

        Started from their recent screen (a short backlog), not their whole history, and
        dropped again when they leave, so the set follows the team as it changes.
        """
        if self.auto_tail_limit <= 0 and not self.auto_tailed:
            return
        live = [
            v
            for v in self.known.values()
            if v.connected and v.id != self.attached and v.id not in self.tailed
        ]
        # Those already shown stay (no flicker as states change); free places go to
        # the agents doing something, then by id.
        wanted = {v.id for v in live if v.id in self.auto_tailed}
        for view in sorted(live, key=lambda v: (v.state not in ("busy", "waiting"), v.id)):
            if len(wanted) >= self.auto_tail_limit:
                break
            wanted.add(view.id)
        wanted = set(sorted(wanted)[: max(self.auto_tail_limit, 0)])
        for agent in self.auto_tailed - wanted:
            if agent not in self.tailed and agent != self.attached:
                self.tail.remove(agent)
        for agent in wanted - self.auto_tailed:
            if agent not in self.tail.agents:
                self.tail.add(agent, None, backlog=AUTO_TAIL_BACKLOG)
        self.auto_tailed = wanted

    # background loops ------------------------------------------------------------------

    async def _tail_loop(self) -> None:
        async for batch in self.tail.batches():
            for item in batch:
                if isinstance(item, Gap):
                    self.view.gap(item)
                    self.offsets.set(item.agent, item.last)
                    continue
                try:
                    self.view.event(item)
                except Exception as exc:  # one bad event must not end the stream
                    self.view.banner(
                        f"could not show event {item.offset} of {item.agent}: {exc!r}",
                        level="warn",
                    )
                pending = self.view.unsettled(item.agent)
                saved = item.offset if pending is None else pending - 1
                # Not past an entry that may yet turn out a stranger's (see EventTail).
                trusted = self.tail.trusted(item.agent)
                self.offsets.set(item.agent, saved if trusted is None else min(saved, trusted))
                if item.type == EventType.TASK_END and item.task_id:
                    self._ended.append(item.task_id)
                    if item.task_id in self.pending_tasks:
                        self.pending_tasks.discard(item.task_id)
                        self._tasks_changed.set()
            # Batches within OFFSETS_SAVE_S share one write, on a worker thread: a
            # console killed with -9 replays at most that much output after a restart.
            self._save_offsets()

    def _save_offsets(self) -> None:
        if self._offsets_writer is None or self._offsets_writer.done():
            self._offsets_writer = asyncio.create_task(self._write_offsets())

    async def _write_offsets(self) -> None:
        await asyncio.sleep(OFFSETS_SAVE_S)
        while (data := self.offsets.snapshot()) is not None:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self.offsets.write, data)

    async def _subscribe(self) -> PubSub:
        pubsub = self.client.pubsub()
        await pubsub.subscribe(
            self.keys.registry_channel,
            self.keys.console_channel(self.session),
            self.keys.context_channel,
        )
        return pubsub

    async def _watch_loop(self, pubsub: PubSub | None) -> None:
        """Registry notices, context items and messages to this console, with reconnects."""
        backoff = Backoff()
        while True:
            try:
                if pubsub is None:
                    pubsub = await self._subscribe()
                backoff.reset()
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None:
                        self._on_notice(message["channel"], message["data"])
            except CONNECTION_ERRORS:
                await asyncio.sleep(backoff.next_delay())
            finally:
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()  # type: ignore[no-untyped-call]
                pubsub = None

    def _on_notice(self, channel: bytes, data: bytes) -> None:
        try:
            notice = unpack(data)
        except BadRequest:
            return
        agent = str(notice.get("agent", ""))
        kind = notice.get("event")
        if channel.decode() == self.keys.context_channel:
            self._on_context_item(notice)
            return
        if channel.decode() == self.keys.registry_channel:
            if kind == "join":
                self.view.banner(f"agent {agent} joined")
                self._tasks_changed.set()
            elif kind == "update":
                self._registry_news.set()
            elif kind == "leave":
                self.view.banner(f"agent {agent} left")
                self.known.pop(agent, None)
                self._tasks_changed.set()
            return
        if kind in ("takeover", "lost") and agent == self.attached and not self.read_only:
            self.read_only = True
            # Anyone who can reach Redis can publish this: once the takeover's grace is
            # over, the claim itself decides (see _owner_refresh).
            self._unconfirmed_loss = time.monotonic() + TAKEOVER_GRACE_S + 1.0
            self.view.banner(
                f"console {notice.get('by')} took over {agent}: this console is now read-only",
                level="warn",
            )

    def _on_context_item(self, notice: dict[str, Any]) -> None:
        """An ``attention`` or ``blocking`` item is a banner; ``blocking`` also rings."""
        level = ALERT_URGENCIES.get(str(notice.get("urgency")))
        if level is None:
            return
        source = notice.get("source_agent") or "a console"
        self.view.banner(
            f"{str(notice.get('urgency')).upper()} {notice.get('type')} from {source}: "
            f"{notice.get('title')} (/context ls)",
            level=level,
        )

    async def _registry_poll(self) -> None:
        while True:
            # Every heartbeat interval, or at once when an agent announced a change (a
            # new state such as `waiting` must not wait for the next poll).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HEARTBEAT_INTERVAL_S):
                    await self._registry_news.wait()
            self._registry_news.clear()
            # A burst of notices (many agents changing at once) costs one read, not many.
            await asyncio.sleep(REGISTRY_NEWS_MIN_S)
            self._keepers = [keeper for keeper in self._keepers if keeper.poll() is None]
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self.refresh_agents()

    async def _owner_refresh(self) -> None:
        while True:
            await asyncio.sleep(OWNER_REFRESH_S)
            agent = self.attached
            if agent is None:
                continue
            if self.read_only:
                await self._confirm_loss(agent)
                continue
            try:
                still_mine = await self.ownership.refresh(agent)
            except CONNECTION_ERRORS:
                continue
            if not still_mine and agent == self.attached and not self.read_only:
                self.read_only = True
                self.view.banner(
                    f"lost ownership of {agent}: this console is now read-only", level="warn"
                )

    async def _confirm_loss(self, agent: str) -> None:
        """After a takeover notice: if the claim is still ours, this console writes again."""
        due = self._unconfirmed_loss
        if due is None or time.monotonic() < due:
            return
        self._unconfirmed_loss = None
        with contextlib.suppress(*CONNECTION_ERRORS):
            if await self.ownership.refresh(agent) and agent == self.attached:
                self.read_only = False
                self.view.banner(
                    f"{agent} was not taken over after all (the notice was not confirmed by "
                    "the ownership record): this console writes again",
                    level="warn",
                )

    def _on_connection(self, connected: bool, failures: int) -> None:
        if not connected and failures == 1:
            self.view.banner("connection to Redis lost; reconnecting…", level="warn")
        elif not connected and failures == Backoff().warn_after:
            self.view.banner(f"still no Redis after {failures} attempts; retrying", level="warn")
        elif connected:
            self.view.banner("reconnected to Redis")


@dataclass(frozen=True)
class _LocalPlan:
    """A checked local start: who, where, with which configuration, in which worktree."""

    request: fleet.SpawnRequest
    config: AgentConfig
    worktree: fleet.Worktree | None
    where: str
    """The cwd as shown to people (with the worktree's repository and branch)."""


def redactor_for(cwd: str | None, base: Redactor) -> Redactor:
    """``base`` plus the ``redact.yaml`` patterns of the project an agent runs in.

    Text sent to an agent is masked before it reaches Redis, so the sender needs the
    agent's own patterns, not only those of wherever the sender stands; they can be read
    when the agent's working directory is on this host.
    """
    project = _project_of(Path(cwd)) if cwd else None
    if project is None or not project.redact_patterns:
        return base
    return Redactor((*base.extra, *project.redact_patterns))


def _project_of(cwd: Path) -> ProjectConfig | None:
    """The project configuration for ``cwd``; ``None`` if it is not a directory here."""
    if not cwd.is_dir():
        return None
    try:
        return load_project(cwd)
    except AteamError:
        return None


def _configured_names(cwd: Path) -> set[str]:
    project = _project_of(cwd)
    return set(project.agents) if project is not None else set()


def ps_rows(views: list[AgentView]) -> list[dict[str, Any]]:
    """Registry views as rows, with compact ``tokens`` and ``cost`` cells for tables."""
    rows = [v.to_json() for v in views]
    for row in rows:
        usage = row.get("usage") or {}
        row["tokens"] = f"{usage.get('tokens_in', 0)}/{usage.get('tokens_out', 0)}"
        row["cost"] = usage.get("cost", 0)
    return rows


def table_lines(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    """``rows`` as aligned text: an upper-case header line, then one line per row."""
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    widths = [max(len(col), *(len(r[i]) for r in cells)) for i, col in enumerate(columns)]
    header = "  ".join(col.upper().ljust(w) for col, w in zip(columns, widths, strict=True))
    body = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return [header, *body]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def kb_progress_line(data: dict[str, Any]) -> str:
    """A ``kb.progress`` event as one line: ``kb agent: 3/10 docs/a.md``."""
    return f"kb {data.get('scope')}: {data.get('done')}/{data.get('total')} {data.get('path')}"


KB_HIT_COLUMNS = ("score", "doc", "path", "title", "text")


def kb_hit_rows(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``kb.search`` hits as table rows, title and text cut to fit a line."""
    return [
        {
            "score": hit["score"],
            "doc": hit["doc_id"],
            "path": hit["path"],
            "title": (hit.get("title") or "")[:40],
            "text": " ".join(str(hit.get("text", "")).split())[:60],
        }
        for hit in hits
    ]


def handoff_line(data: dict[str, Any]) -> str | None:
    """A ``handoff`` event as one line; ``None`` for a refresh (one each turn, no news)."""
    if data.get("action") != "used":
        return None
    checksum = str(data.get("checksum") or "")
    return (
        f"handoff #{data.get('sequence')} ({checksum.removeprefix('sha256:')[:12]}) verified "
        f"and given to {data.get('to')}"
    )


def _local_paths(paths: list[str]) -> list[str]:
    return [str(Path(p).expanduser().resolve()) if Path(p).exists() else p for p in paths]


def _int_option(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{name} needs a whole number") from None


def _csv(value: str | None) -> tuple[str, ...]:
    """``a,b`` → ``("a", "b")``; ``None`` → ``()``."""
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def _option(args: list[str], name: str) -> str | None:
    if name in args:
        index = args.index(name)
        if index + 1 < len(args):
            return args[index + 1]
        raise UsageError(f"{name} needs a value")
    return None


def _parse_args(
    args: list[str],
    usage: str,
    *,
    options: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
) -> tuple[list[str], dict[str, str], set[str]]:
    """Split command words into positionals, ``--option VALUE`` pairs and ``--flag`` s."""
    positional: list[str] = []
    values: dict[str, str] = {}
    seen: set[str] = set()
    words = iter(args)
    for word in words:
        if word in options:
            value = next(words, None)
            if value is None:
                raise UsageError(f"{word} needs a value; {usage}")
            values[word] = value
        elif word in flags:
            seen.add(word)
        elif word.startswith("--"):
            raise UsageError(f"unknown option {word}; {usage}")
        else:
            positional.append(word)
    return positional, values, seen


async def _poll(probe: Callable[[], Awaitable[_T | None]], timeout: float) -> _T | None:
    """``probe()`` every 100 ms until it returns something; ``None`` after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if value is not None and value is not False:
            return value
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(0.1)


def describe_error(error: AteamError) -> str:
    return error.one_line()


def local_redactor() -> Redactor:
    """The redactor of the project here (the cwd): built-ins plus its redact.yaml."""
    try:
        return Redactor.from_config(load_project())
    except AteamError:
        return Redactor()  # no project, or a broken one: the built-in patterns still hold
