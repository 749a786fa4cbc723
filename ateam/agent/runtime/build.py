"""The agent's composition root: every part of one agent process, built and wired in one place.

Long on purpose: one place that builds everything is the point (a test swaps any part).

:func:`build_parts` constructs the parts in dependency order — the bus client and the
instance lock, the durable stores behind the write fence, the event publisher, the
model router, the tools, the knowledge bases, then the pieces that work with them (the
handoff keeper, the context window, compaction, model switching, the task loop and its
hooks, the stall watch, the worker, the bus upkeep) — and returns them as one
:class:`Parts`. :class:`~ateam.agent.runtime.process.Agent` runs them; it builds nothing itself.

A test swaps a part by name: ``build_parts(..., queue=my_queue)`` builds everything else
around the given object, so every part that uses the queue gets that one. The RPC
service and the local REPL are wired in here too: :class:`Parts` holds their
:class:`~ateam.agent.runtime.port.ServicePort`, each of its protocols satisfied by the
part that owns the behaviour (the worker, the bus upkeep, the prompt reloader) or by a
small object over several (:class:`~ateam.agent.runtime.reporter.Reporter`,
:class:`~ateam.agent.runtime.steering.Steering`), and the factories that serve it.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import redis.asyncio as aioredis

from ateam._fs import DamageLog, DamageMemory
from ateam.agent.context.compaction import MARKER_FILE, Compactor, read_marker
from ateam.agent.context.handoff import HandoffStore
from ateam.agent.context.notices import NoticeFeed
from ateam.agent.context.prompts import Prompts
from ateam.agent.context.successor import HandoffKeeper, HandoffMirror
from ateam.agent.context.teamfeed import TeamFeed
from ateam.agent.context.window import ContextWindow
from ateam.agent.context.working import WorkingContext
from ateam.agent.loop.board_puller import BoardPuller
from ateam.agent.loop.gates import GatedBoard, GatedTasks, Gates
from ateam.agent.loop.modes import WorkModes
from ateam.agent.loop.notices import Notifier
from ateam.agent.loop.prompt_reload import PromptReloader
from ateam.agent.loop.status import AgentState, AgentStatus, Alert
from ateam.agent.loop.switching import ModelSwitcher
from ateam.agent.loop.task import TaskRunner
from ateam.agent.loop.upkeep import BusUpkeep
from ateam.agent.loop.watchdog import StallWatch
from ateam.agent.loop.worker import Worker
from ateam.agent.loop.workspaces import Workspaces, WorkspaceTasks
from ateam.agent.models.router import ModelRouter
from ateam.agent.native.hooks import AgentHooks, AgentSources
from ateam.agent.native.runner import NativeRunner
from ateam.agent.native.tools import default_registry
from ateam.agent.runtime.dispatch import ModelDispatch, TaskSessionsEnd
from ateam.agent.runtime.messenger import TeamMessenger
from ateam.agent.runtime.port import ServicePort
from ateam.agent.runtime.replies import Replier
from ateam.agent.runtime.reporter import Reporter
from ateam.agent.runtime.service import build_methods
from ateam.agent.runtime.snapshot_keeper import SnapshotKeeper
from ateam.agent.runtime.steering import Steering
from ateam.agent.state.fence import StateDirLock, WriteFence
from ateam.agent.state.history import History, SummaryLog
from ateam.agent.state.knowledge import AgentKb
from ateam.agent.state.modes import ModeStore
from ateam.agent.state.queue import DurableQueue
from ateam.agent.state.usage import UsageLedger
from ateam.bus.board import TaskBoard
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.context_items import ContextStore
from ateam.bus.events import EventType
from ateam.bus.identity import AgentIdentity
from ateam.bus.keys import Keys
from ateam.bus.lock import FENCE_FILE, InstanceLock
from ateam.bus.notices import NoticeBox
from ateam.bus.owner_lag import owner_lag
from ateam.bus.plan_review import PlanReviewer
from ateam.bus.publisher import EventPublisher
from ateam.bus.registry import Heartbeat, Registry
from ateam.bus.rpc import Refused, RpcServer
from ateam.config import AgentConfig
from ateam.config.schema import ModelEntry
from ateam.constants import HANDOFF_LOCK_WAIT_S
from ateam.errors import AteamError
from ateam.exits import agent_exit_code
from ateam.kb.similar import configured_ranker
from ateam.paths import ateam_home
from ateam.providers import build_provider
from ateam.providers.base import Provider
from ateam.redact import Redactor
from ateam.tools.approvals import Answer, ApprovalRequest, Approvals
from ateam.tools.exec_values import ExecLimits
from ateam.tools.fs import Sandbox
from ateam.tools.hooks import HookRunner
from ateam.tools.registry import ToolPolicy, ToolRegistry
from ateam.wire.registry import AgentEntry

if TYPE_CHECKING:
    from ateam.agent.acp.runner import AcpRunner

__all__ = ["Parts", "ReplRunner", "RpcFactory", "build_parts", "model_factory"]

T = TypeVar("T")

RpcFactory = Callable[[ServicePort], RpcServer]
"""Builds the (not yet started) RPC server over the agent's port."""
ReplRunner = Callable[[ServicePort], Awaitable[None]]
"""Runs the local REPL over the agent's port until it is closed."""


@dataclass(frozen=True, eq=False)
class Parts:
    """Every part of one agent process, as :func:`build_parts` wired them."""

    config: AgentConfig
    target: RedisTarget
    keys: Keys
    redactor: Redactor
    client: aioredis.Redis
    lock: InstanceLock
    write_fence: WriteFence
    """Every durable store checks it before writing (issue 9: fencing covers files)."""
    state_lock: StateDirLock
    events: EventPublisher
    status: AgentStatus
    queue: DurableQueue
    history: History
    summaries: SummaryLog
    ledger: UsageLedger
    router: ModelRouter
    heartbeat: Heartbeat
    identity: AgentIdentity
    """This instance's proof for teammates: its heartbeat publishes the hash, its
    ``team.send`` presents the token (:mod:`ateam.bus.identity`)."""
    mirror: HandoffMirror
    handoff: HandoffStore
    team: TeamFeed
    board: TaskBoard
    """The team's task board (issue 12): the ``tasks.*`` tools and the upkeep's reconcile."""
    puller: BoardPuller
    """Takes board tasks when idle (``take_tasks``)."""
    modes: WorkModes
    """Plan approval and delegate mode (issue 26): the tool calls' gate."""
    workctx: WorkingContext
    tool_registry: ToolRegistry
    plugin_warnings: list[str]
    policy: ToolPolicy
    prompts: Prompts
    approvals: Approvals
    sandbox: Sandbox
    kb: AgentKb
    exec_limits: ExecLimits
    keeper: HandoffKeeper
    window: ContextWindow
    compactor: Compactor
    switcher: ModelSwitcher
    runner: NativeRunner
    """ateam's own loop, for model APIs."""
    tasks: ModelDispatch
    """What the worker runs tasks with: the native runner above, or the runner of coding
    agents over ACP (``tasks.acp``, built at its first use: the ACP SDK takes a second
    to import, which an agent that never runs one does not pay)."""
    stall: StallWatch
    reloader: PromptReloader
    upkeep: BusUpkeep
    worker: Worker
    snapshot: SnapshotKeeper
    """Keeps ``~/.ateam/session.json`` while this agent holds the host's writer seat."""
    port: ServicePort
    """What the RPC service and the REPL use of the parts above."""
    rpc: RpcFactory
    repl: ReplRunner | None
    """``None``: no local REPL (no terminal, or ``--no-repl``)."""

    def damage_logs(self) -> tuple[DamageLog, ...]:
        """Every store's damage reports (issue 10: damage is reported, never absorbed)."""
        return (
            self.queue.damage,
            self.history.damage,
            self.summaries.damage,
            self.handoff.damage,
            self.workctx.damage,
            self.ledger.damage,
        )


DAMAGE_MEMORY_FILE = "damage.json"
"""In the agent's ``state/``: the damage already reported (see :class:`DamageMemory`)."""


class _Swaps:
    """The parts a caller handed in, taken by name as the parts are built."""

    def __init__(self, given: dict[str, Any]) -> None:
        unknown = sorted(set(given) - set(Parts.__dataclass_fields__))
        if unknown:
            raise TypeError(f"build_parts: no part named {', '.join(unknown)}")
        self._given = given

    def __call__(self, name: str, make: Callable[[], T]) -> T:
        if name in self._given:
            part: T = self._given.pop(name)
            return part
        return make()

    def check_all_taken(self) -> None:
        """A part given but never asked for (``config``, say) is a mistake, not a no-op."""
        if self._given:
            raise TypeError(f"build_parts: {', '.join(sorted(self._given))} cannot be swapped")


class _EventScrub:
    """Masks secrets in every event, and counts the task's events on the way."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self.task_events = 0
        """Events that belong to a task: the stall watch's sign of progress."""

    def __call__(self, fields: dict[str, Any]) -> dict[str, Any]:
        # Every event passes here once, so this is where a task's progress is counted;
        # ownership and registry notices carry no task id and do not count.
        if "task_id" in fields:
            self.task_events += 1
        scrubbed: dict[str, Any] = self._redactor.redact_obj(fields)
        return scrubbed


def build_parts(
    config: AgentConfig,
    target: RedisTarget,
    provider: Provider,
    *,
    redactor: Redactor | None = None,
    tools: ToolRegistry | None = None,
    repl: bool = False,
    project_root: Path | None = None,
    **swaps: Any,
) -> Parts:
    """Build and wire every part of the agent ``config`` describes.

    Args:
        config: The agent.
        target: The bus it joins.
        provider: Its current model (the router builds the others on demand).
        redactor: Masks secrets everywhere; a default one without.
        tools: The tool registry; the built-ins and plugins without.
        repl: Run the local REPL on this process's terminal once serving.
        project_root: The project's root, for the ``project`` knowledge base.
        **swaps: Parts given ready-made, by their :class:`Parts` field name.
    """
    swap = _Swaps(swaps)
    redactor = redactor or Redactor()
    agent_id = config.id
    state_dir = config.state_dir
    keys = swap("keys", lambda: Keys(target.namespace))
    client = swap("client", lambda: make_client(target))
    # Fences stay above any this agent issued, even after Redis forgets them (issue 13).
    lock = swap(
        "lock",
        lambda: InstanceLock(client, keys, agent_id, fence_file=config.state_dir / FENCE_FILE),
    )
    fence = swap("write_fence", lambda: WriteFence(lock, agent_id))
    state_lock = swap("state_lock", lambda: StateDirLock(state_dir, agent_id))
    queue = swap("queue", lambda: DurableQueue(state_dir, fence=fence))
    history = swap("history", lambda: History(state_dir, fence=fence))
    ledger = swap("ledger", lambda: UsageLedger(state_dir, fence=fence))
    router = swap("router", lambda: _router(config, provider))
    entry = AgentEntry(
        id=agent_id,
        name=config.name,
        project=config.project,
        model=provider.model,
        primary=config.model,
        cwd=str(config.cwd),
        host=socket.gethostname(),
        pid=os.getpid(),
        started_at=time.time(),
    )
    scrub = _EventScrub(redactor)

    # The publisher reports a fenced write and a lost or regained bus to parts that need
    # the publisher themselves, so they are built after it; it calls neither before start.
    def fenced() -> None:
        status.fenced()

    def bus_changed(connected: bool, failures: int) -> None:
        upkeep.bus_changed(connected, failures)

    events = swap(
        "events",
        lambda: EventPublisher(
            client,
            keys,
            agent_id,
            offset_file=state_dir / "offset",
            fence=lambda: lock.fence,
            on_fenced=fenced,
            on_connection_change=bus_changed,
            scrub=scrub,
            file_fence=fence,  # state/offset too: a fenced-off instance writes no file
        ),
    )
    status = swap("status", lambda: AgentStatus(entry, events, fence))
    entry = status.entry
    identity = AgentIdentity(agent_id)
    heartbeat = swap("heartbeat", lambda: Heartbeat(client, keys, entry, identity=identity))
    summaries = swap("summaries", lambda: SummaryLog(state_dir, fence=fence, scrub=redactor.redact))
    mirror = swap("mirror", lambda: HandoffMirror(client, keys, agent_id))
    handoff = swap(
        "handoff",
        lambda: HandoffStore(
            state_dir,
            model=provider.model,
            project=config.project,
            mirror=mirror,
            lock_timeout_s=HANDOFF_LOCK_WAIT_S,
            fence=fence,
            scrub=redactor.redact_obj,
        ),
    )
    # context.search ranks with the embedder its knowledge bases use (found the same way).
    ranker = configured_ranker(project_root or config.cwd)
    context_items = ContextStore(client, keys, redactor=redactor, ranker=ranker)
    board = swap("board", lambda: TaskBoard(client, keys, redactor=redactor))
    team = swap(
        "team",
        lambda: TeamFeed(
            context_items, client, keys, config.project, agent_id, config.spec.context, events.emit
        ),
    )
    puller = swap(
        "puller",
        lambda: BoardPuller(
            board, client, keys, config.project, agent_id, enabled=config.spec.take_tasks
        ),
    )
    modes = swap(
        "modes",
        lambda: WorkModes(
            config,
            ModeStore(state_dir, fence=fence),
            status,
            functools.partial(board.get, config.project),
            redact=redactor.redact,
        ),
    )
    workctx = swap(
        "workctx", lambda: WorkingContext(state_dir, fence=fence, scrub=redactor.redact_obj)
    )
    tool_registry, plugin_warnings = (tools, []) if tools is not None else default_registry()
    policy = swap(
        "policy",
        lambda: tool_registry.for_agent(config.tools_allow, config.tools_deny, config.approval),
    )
    prompts = swap(
        "prompts",
        lambda: Prompts(
            config.base_prompt_path,
            config.overlay_prompt_path,
            agent_id=agent_id,
            toolbox=policy.schemas,
        ),
    )
    approvals = swap(
        "approvals",
        lambda: Approvals(
            on_change=status.approvals_changed,
            announce=functools.partial(_announce_approval, events),
            resolved=functools.partial(_approval_resolved, events),
        ),
    )
    sandbox = swap("sandbox", lambda: Sandbox(config.cwd, config.fs_whitelist))
    kb = swap(
        "kb",
        lambda: AgentKb(
            agent_id=agent_id,
            agent_dir=config.dir,
            project_root=project_root,
            home=ateam_home(),
            allowed_roots=[sandbox.root, *sandbox.whitelist],
            redact=redactor.redact,
        ),
    )
    exec_limits = swap("exec_limits", lambda: _exec_limits(config))
    # worktree: agent|task (issue 27); start_workspace checked the repository already.
    spaces = None
    if config.spec.worktree != "none" and project_root is not None:
        spaces = Workspaces(config, project_root, board, events)
    gates = Gates(  # the hooks get the environment policy of os.exec, and its cwd
        HookRunner(config.hooks, cwd=config.cwd, limits=exec_limits),
        agent_id=agent_id,
        events=events,
        history=history,
        redactor=redactor,
        fence=lambda: lock.fence,
    )
    keeper = swap(
        "keeper",
        lambda: HandoffKeeper(
            config=config,
            handoff=handoff,
            workctx=workctx,
            queue=queue,
            router=router,
            entry=entry,
            events=events,
            prompts=prompts,
        ),
    )
    window = swap(
        "window",
        lambda: ContextWindow(
            history,
            AgentSources(prompts, workctx, summaries, team, keeper),
            router.provider,
            compacted_until=read_marker(state_dir / MARKER_FILE),
        ),
    )
    compactor = swap(
        "compactor",
        lambda: Compactor(
            config=config,
            history=history,
            summaries=summaries,
            workctx=workctx,
            window=window,
            router=router,
            entry=entry,
            events=events,
            write_fence=fence,
        ),
    )
    switcher = swap(
        "switcher",
        lambda: ModelSwitcher(
            config=config,
            router=router,
            handoff=handoff,
            keeper=keeper,
            window=window,
            compactor=compactor,
            status=status,
            events=events,
        ),
    )
    messenger = TeamMessenger(client, keys, identity, config.spec.team.max_hops)
    hooks = AgentHooks(
        config=config,
        lock=lock,
        redactor=redactor,
        sandbox=sandbox,
        exec_limits=exec_limits,
        workctx=workctx,
        context_items=context_items,
        kb=kb,
        list_agents=functools.partial(_list_agents, client, keys),
        board=GatedBoard(board, gates),
        teammates=messenger,
        keeper=keeper,
        switcher=switcher,
        compactor=compactor,
        plan_reviews=PlanReviewer(client, keys, identity),
        workspaces=spaces,
        # Held while the owning console lags (issue 28 §3); only a real publisher counts.
        output_room=owner_lag(client, keys, agent_id, events.ledger, config.exec.owner_lag_bytes),
    )
    runner = swap(
        "runner",
        lambda: NativeRunner(
            events,
            history,
            provider,
            window,
            hooks,
            policy=policy,
            approvals=approvals,
            router=router,
            max_iterations=config.spec.max_iterations,
            approval_timeout_s=config.spec.tools.approval_timeout_s,
            gate=modes,
            before_tool=gates.before_tool,
        ),
    )

    def acp_runner() -> AcpRunner:
        # Imported here: see Parts.tasks.
        from ateam.agent.acp.runner import AcpRunner
        from ateam.agent.acp.teammate import ateam_mcp_server

        return AcpRunner(
            config=config,
            events=events,
            history=history,
            window=window,
            sources=AgentSources(prompts, workctx, summaries, team, keeper),
            team_block=team.render,
            hooks=hooks,
            router=router,
            sandbox=sandbox,
            exec_limits=exec_limits,
            policy=policy,
            approvals=approvals,
            mcp_servers=[ateam_mcp_server(config, target, identity)],
            on_mode=status.runtime_mode,
            on_alert=status.runtime_alert,
            cwd_for=spaces.cwd_for if spaces is not None else lambda _: None,
        )

    tasks = swap(
        "tasks",
        lambda: ModelDispatch(
            router, runner, acp_runner, on_alert=functools.partial(status.alert, Alert.MODEL)
        ),
    )
    watch = config.spec.watchdog
    stall = swap(
        "stall",
        lambda: StallWatch(
            progress=lambda: scrub.task_events,
            paused=lambda: status.state is AgentState.WAITING,
            alert=lambda stall: status.stalled(stall, queue.current),
            clear=status.stall_cleared,
            stall_after_s=watch.stall_after_s,
            cancel_after_s=watch.cancel_after_s,
        ),
    )
    reloader = swap("reloader", lambda: PromptReloader(prompts, status, events))
    upkeep = swap(
        "upkeep",
        lambda: BusUpkeep(
            client=client,
            keys=keys,
            lock=lock,
            heartbeat=heartbeat,
            status=status,
            events=events,
            queue=queue,
            router=router,
            ledger=ledger,
            write_fence=fence,
            board=board,
        ),
    )
    router.on_usage = upkeep.usage_changed
    worker = swap(
        "worker",
        lambda: Worker(
            config=config,
            queue=queue,
            history=history,
            runner=_in_workspaces(
                GatedTasks(tasks, gates, held=modes.holds_back, holds=puller.holds),
                spaces,
                events,
                tasks,
            ),
            stall=stall,
            team=team,
            puller=puller,
            workctx=workctx,
            status=status,
            events=events,
            redactor=redactor,
            keeper=keeper,
            compactor=compactor,
            switcher=switcher,
            reloader=reloader,
            upkeep=upkeep,
            write_fence=fence,
            modes=modes,
            gates=gates,
            workspaces=spaces,
        ),
    )
    if spaces is not None:
        gates.task_cwd = spaces.task_cwd  # task_done judges the task's worktree

    # The stream takes this agent's events only while it holds the lock; when it refuses
    # them the publisher asks the upkeep, since only the lock can tell a successor (stop)
    # from a Redis that lost the lock (take it again).
    events.lock_value = lock.value
    events.on_fence_doubt = upkeep.fence_doubted
    events.on_refused = upkeep.on_refused = functools.partial(_refused, status)
    # A teammate that asked (team.send with reply) gets the answer before the item is done.
    worker.answer_back = Replier(messenger, status, events, redactor.redact).answer_back
    team.on_blocking = worker.wake  # a blocking item wakes an idle worker to take it
    puller.on_news = worker.wake  # so does news on the board, when it takes tasks
    # Teammates' notices (issue 26): heard beside the team's items, sent at a task's end
    # and on going idle.
    notice_box = NoticeBox(client, keys)
    team.notices = NoticeFeed(notice_box, client, keys, agent_id, events.emit)
    notifier = Notifier(notice_box, agent_id, config.spec.team.notify, events.emit, redactor.redact)
    puller.on_finished = notifier.finished
    worker.on_idle = notifier.idle
    modes.enqueue = worker.enqueue  # an answer to a plan is the agent's next input

    snapshot = swap(
        "snapshot",
        lambda: SnapshotKeeper(
            client,
            keys,
            agent_id=agent_id,
            project=config.project,
            home=ateam_home(),
            bus=target.describe(),
        ),
    )

    port = swap(
        "port",
        lambda: ServicePort(
            config=config,
            redactor=redactor,
            events=events,
            intake=worker,
            doors=upkeep,
            reports=Reporter(
                status=status,
                events=events,
                queue=queue,
                history=history,
                compactor=compactor,
                headroom=lambda: runner.headroom,
                bus_connected=lambda: upkeep.bus_connected,
                bus=target.describe(),
            ),
            prompting=reloader,
            control=Steering(switcher=switcher, keeper=keeper, compactor=compactor, status=status),
            kb=kb,
            router=router,
            handoff=handoff,
            approvals=approvals,
            policy=policy,
            modes=modes,
        ),
    )

    def serve(port: ServicePort) -> RpcServer:
        return RpcServer(
            client,
            keys,
            agent_id,
            build_methods(port),
            current_owner=upkeep.current_owner,
            on_bad_request=functools.partial(_bad_request, events),
        )

    parts = Parts(
        config=config,
        target=target,
        keys=keys,
        redactor=redactor,
        client=client,
        lock=lock,
        write_fence=fence,
        state_lock=state_lock,
        events=events,
        status=status,
        queue=queue,
        history=history,
        summaries=summaries,
        ledger=ledger,
        router=router,
        heartbeat=heartbeat,
        identity=identity,
        mirror=mirror,
        handoff=handoff,
        team=team,
        board=board,
        puller=puller,
        modes=modes,
        workctx=workctx,
        tool_registry=tool_registry,
        plugin_warnings=plugin_warnings,
        policy=policy,
        prompts=prompts,
        approvals=approvals,
        sandbox=sandbox,
        kb=kb,
        exec_limits=exec_limits,
        keeper=keeper,
        window=window,
        compactor=compactor,
        switcher=switcher,
        runner=runner,
        tasks=tasks,
        stall=stall,
        reloader=reloader,
        upkeep=upkeep,
        worker=worker,
        snapshot=snapshot,
        port=port,
        rpc=swap("rpc", lambda: serve),
        repl=swap("repl", lambda: _run_repl if repl else None),
    )
    swap.check_all_taken()
    # One memory for every store, so damage met again at a later start is not news.
    memory = DamageMemory(state_dir / DAMAGE_MEMORY_FILE)
    for damage in parts.damage_logs():
        damage.memory = memory
    return parts


def model_factory(config: AgentConfig) -> Callable[[ModelEntry], Provider]:
    """Builds the provider of a ``models.yaml`` entry: a model API, or a coding agent."""

    def build(entry: ModelEntry) -> Provider:
        if entry.is_runtime:
            from ateam.agent.acp.provider import RuntimeProvider  # see Parts.tasks

            return RuntimeProvider(entry, cwd=config.cwd, limits=_exec_limits(config))
        return build_provider(entry)

    return build


def _in_workspaces(
    runner: TaskRunner, spaces: Workspaces | None, events: EventPublisher, tasks: ModelDispatch
) -> TaskRunner:
    """``runner``, its board tasks run in their worktrees with ``worktree: task`` (a
    coding agent's too, in a session of the task's own, stopped at its end)."""
    if spaces is None or not spaces.per_task:
        return runner
    return WorkspaceTasks(TaskSessionsEnd(runner, tasks), spaces, events)


def _router(config: AgentConfig, provider: Provider) -> ModelRouter:
    router = ModelRouter(config, factory=model_factory(config), current=provider.model)
    router.providers[provider.model] = provider
    return router


def _exec_limits(config: AgentConfig) -> ExecLimits:
    spec = config.exec
    return ExecLimits(
        timeout_s=spec.timeout_s,
        cpu_s=spec.cpu_s,
        output_limit=spec.output_limit_bytes,
        inherit_env=spec.inherit_env,
        # Passed-through secrets reach the tools; their values are masked (runtime/main.py).
        env_allow=(*spec.env_allow, *config.spec.tools.env_passthrough),
    )


async def _list_agents(client: aioredis.Redis, keys: Keys) -> list[dict[str, Any]]:
    views = await Registry(client, keys).list()
    return [view.to_json() for view in views]


def _announce_approval(events: EventPublisher, request: ApprovalRequest) -> None:
    kind = EventType.DIFF_PROPOSED if request.kind == "diff" else EventType.APPROVAL_REQUEST
    events.emit(kind, **request.to_wire())


def _approval_resolved(events: EventPublisher, request: ApprovalRequest, answer: Answer) -> None:
    events.emit(
        EventType.APPROVAL_RESOLVED,
        request_id=request.id,
        decision=answer.decision.value,
        by=answer.by,
        reason=answer.reason,
        task_id=request.task_id,
        trace_id=request.trace_id,
    )


def _refused(status: AgentStatus, error: AteamError) -> None:
    """A refusal waiting will not cure (an ACL without a permission): stop, finally."""
    print(f"ateam agent {status.id}: stopping: {error.one_line()}", file=sys.stderr)
    status.request_shutdown(agent_exit_code(error))


def _bad_request(events: EventPublisher, refused: Refused) -> None:
    if refused.count == 1:
        msg = f"rejected a request: {refused.message}"
    else:
        msg = (
            f"rejected {refused.count} requests in {refused.span_s:.0f} s "
            f"(folded; the latest: {refused.message})"
        )
    events.emit(EventType.WARN, msg=msg, code="bad_request", count=refused.count)


async def _run_repl(port: ServicePort) -> None:
    # Imported here: prompt-toolkit costs start-up time an agent without a terminal saves.
    from ateam.agent.runtime.repl import AgentRepl

    await AgentRepl(port).run()
