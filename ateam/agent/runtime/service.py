"""The agent's RPC methods: the whole catalogue in one table (SPEC §4.4).

Long on purpose: the table is kept whole, one row per method naming its handler, its
parameter and result models (:mod:`ateam.wire`), whether it mutates and what it does.

Mutating methods are checked against the console owner by :class:`ateam.bus.rpc.RpcServer`
before their handler runs; handlers here only do the work and return quickly.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

from ateam._fs import atomic_write
from ateam.agent.loop.worker import Queued
from ateam.agent.runtime.inbox import FROM_HEADINGS, asked_by, team_input_text
from ateam.agent.runtime.mode_methods import mode_methods
from ateam.agent.runtime.port import ServicePort
from ateam.agent.state.knowledge import check_scope
from ateam.agent.state.plan import PLAN_FILE, append_plan, delete_plan, read_plan, write_plan
from ateam.bus.events import EventType
from ateam.bus.rpc import Call, Method
from ateam.config import AgentConfig
from ateam.constants import KB_DEFAULT_K
from ateam.errors import AteamError, BadRequest, HopLimit, OwnershipDenied, StorageIoError
from ateam.tools.approvals import parse_decision
from ateam.wire.results import (
    AlertAckResult,
    ApprovalAnswerResult,
    ApprovalListResult,
    CancelResult,
    HandoffShowResult,
    HistoryClearResult,
    HistoryTailResult,
    InputResult,
    InterruptResult,
    KbExportResult,
    KbListResult,
    KbReport,
    KbSearchResult,
    MemoryStatsResult,
    ModelListResult,
    ModelSaveResult,
    ModelUseResult,
    OffloadProposal,
    PlanDeleteResult,
    PlanReadResult,
    PlanWriteResult,
    PromptOverlayResult,
    PromptReloadResult,
    PromptShowResult,
    PromptVersionResult,
    QueueClearResult,
    QueueCurrentResult,
    QueueListResult,
    QueueRetryResult,
    Result,
    ShutdownResult,
    StatusResult,
    SummarizeResult,
    ToolInfo,
    ToolsListResult,
)
from ateam.wire.rpc import (
    MAX_HISTORY_TAIL,
    AnyTextParams,
    ApprovalAnswerParams,
    ApprovalListParams,
    CancelParams,
    ConfirmParams,
    HistoryClearParams,
    HistoryTailParams,
    InputParams,
    KbExportParams,
    KbImportParams,
    KbIngestParams,
    KbScopeParams,
    KbSearchParams,
    ModelUseParams,
    NoParams,
    OffloadProposeParams,
    Params,
    ShutdownParams,
    TeamInputParams,
    TextParams,
)

__all__ = ["MAX_HISTORY_TAIL", "AgentService", "build_methods", "save_model"]

MAX_OFFLOAD_DOCS = 5
"""KB documents an offload proposal suggests copying (the owner may change them)."""


def save_model(config: AgentConfig, model: str) -> str:
    """Set ``model:`` in the agent's ``agent.yaml`` (comments and order kept); returns the path."""
    path = config.source or (config.dir / "agent.yaml")
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except OSError as exc:
        raise StorageIoError(f"cannot read {path}: {exc.strerror}") from None
    line = f"model: {model}"
    new, count = _MODEL_LINE.subn(line, text, count=1)
    if count == 0:
        new = f"{line}\n{text}"
    try:
        atomic_write(path, new.encode("utf-8"))
    except OSError as exc:
        raise StorageIoError(f"cannot write {path}: {exc.strerror}") from None
    return str(path)


_MODEL_LINE = re.compile(r"^model:.*$", re.MULTILINE)

_TEAM_SOURCES = tuple(f"{kind}:" for kind in FROM_HEADINGS)
"""Sources only ``team.input`` may queue under: ``input`` refuses them."""


class AgentService:
    """RPC handlers of one agent; :func:`build_methods` lays them out as the catalogue."""

    def __init__(self, port: ServicePort) -> None:
        self.port = port
        self._admit: dict[str, Callable[[Call, str], Awaitable[None]]] = {
            "agent": self._admit_teammate,
            "mcp": self._admit_external,
        }
        """Who may send ``team.input`` as each source kind; each raises when refused."""

    async def _admit_teammate(self, call: Call, sender: str) -> None:
        """A message "from agent:X" must come from agent X of this project, proven.

        The caller names X, and the request carries X's identity token, which only X's
        running instance holds (:mod:`ateam.bus.identity`): a console, a script or an
        MCP client cannot pass for a teammate to skip ownership, whatever it names.
        """
        teammate = f"{self.port.config.project}/{sender}"
        if teammate == self.port.id:
            # team.send refuses it before sending: only a forger names the receiver.
            raise OwnershipDenied(
                f"source agent:{sender} is {teammate} itself: an agent never sends itself work",
                detail={"caller": call.caller},
            )
        if call.caller != f"agent:{teammate}":
            raise OwnershipDenied(
                f"source agent:{sender} must be sent by {teammate} itself "
                "(consoles and scripts send with `input`, MCP clients as mcp:NAME)",
                detail={"caller": call.caller},
            )
        if not await self.port.doors.teammate_proven(teammate, call.auth_sha256):
            raise OwnershipDenied(
                f"{call.caller} did not prove it is {teammate}: a teammate's message carries "
                "the identity token of its running instance, which only its own team.send "
                f"holds (no token, a wrong one, or no agent {teammate} is running)",
                detail={"caller": call.caller},
            )

    async def _admit_external(self, call: Call, sender: str) -> None:
        if not await self.port.doors.external_input_allowed():
            raise OwnershipDenied(
                f"{self.port.id} is owned by a console that has not allowed external input "
                "(its owner can run /allow external on)",
                detail={"owner": self.port.doors.owner},
            )

    async def status(self, call: Call) -> StatusResult:
        return self.port.reports.status()

    async def input_(self, call: Call) -> InputResult:
        params = call.args(InputParams)
        if params.source.startswith(_TEAM_SOURCES):
            # The owner may write anything, but not under a teammate's or a runtime's
            # name: those sources are team.input's, where the sender is checked.
            raise OwnershipDenied(
                f"source {params.source!r} names a teammate or an external runtime: only "
                "team.input queues as one, and only for that sender itself",
                detail={"caller": call.caller, "source": params.source},
            )
        queued = self.port.intake.enqueue(
            params.text,
            source=params.source,
            rid=call.id,
            caller=call.caller,
            trace_id=params.trace_id,
        )
        return self._accepted(queued)

    def _accepted(self, queued: Queued) -> InputResult:
        return InputResult(
            id=queued.item.id,
            trace_id=queued.item.trace_id,
            queued=len(self.port.intake.queue),
            created=queued.created,
            redacted=queued.redacted,
        )

    async def team_input(self, call: Call) -> InputResult:
        """Text from a teammate (``agent:NAME``) or an external runtime (``mcp:NAME``).

        No ownership is needed: a teammate's message is part of the team's work and
        its source is shown to the owner, but the teammate must prove it is that agent
        (its identity token); an external runtime gets in only while nobody owns the
        agent or the owner allowed external input.
        """
        params = call.args(TeamInputParams)
        kind, sender = params.source.split(":", 1)
        await self._admit[kind](call, sender)
        limit = self.port.config.spec.team.max_hops
        hops = params.hops
        if params.in_reply_to is not None:
            # An answer this agent asked for ends its thread: kept within the limit (no
            # send may follow it past there) rather than lost to it.
            hops = min(hops, limit)
        elif hops > limit:
            raise HopLimit(
                f"message refused: hop {params.hops} of its thread, over {self.port.id}'s "
                f"limit of {limit} (team.max_hops)",
                detail={"hops": params.hops, "max_hops": limit},
            )
        queued = self.port.intake.enqueue(
            team_input_text(kind, sender, params.text, in_reply_to=params.in_reply_to),
            source=params.source,
            rid=call.id,
            caller=call.caller,
            trace_id=params.trace_id,
            hops=hops if kind == "agent" else 0,
            reply_to=asked_by(self.port.config.project, kind, sender, params),
        )
        return self._accepted(queued)

    async def interrupt(self, call: Call) -> InterruptResult:
        return InterruptResult(task_id=self.port.intake.interrupt())

    async def cancel(self, call: Call) -> CancelResult:
        hard = call.args(CancelParams).hard
        return CancelResult(task_id=self.port.intake.interrupt(hard=hard), hard=hard)

    async def queue_list(self, call: Call) -> QueueListResult:
        current = self.port.intake.queue.current
        # Validated as the client reads it: a damaged dead-lettered line is kept as found.
        return QueueListResult.model_validate(
            {
                "current": current.to_dict() if current else None,
                "pending": [item.to_dict() for item in self.port.intake.queue.pending()],
                "dead": self.port.intake.queue.dead_items(),
            }
        )

    async def queue_current(self, call: Call) -> QueueCurrentResult:
        """The item in hand only: what ``ateam mcp --as`` reads for the hops and the trace
        of a message its runtime sends as this agent (the whole queue may be large)."""
        current = self.port.intake.queue.current
        return QueueCurrentResult.model_validate(
            {"current": current.to_dict() if current else None}
        )

    async def queue_clear(self, call: Call) -> QueueClearResult:
        if not call.args(ConfirmParams).confirm:
            raise BadRequest("queue.clear needs confirm=true: it drops every pending item")
        cleared = self.port.intake.queue.clear()
        self.port.reports.touch()
        return QueueClearResult(cleared=cleared)

    async def queue_retry(self, call: Call) -> QueueRetryResult:
        items = self.port.intake.queue.retry_dead()
        if items:
            self.port.intake.wakeup()
        return QueueRetryResult(requeued=[item.id for item in items])

    async def alert_ack(self, call: Call) -> AlertAckResult:
        return AlertAckResult(acknowledged=self.port.reports.acknowledge_alerts())

    async def history_tail(self, call: Call) -> HistoryTailResult:
        return HistoryTailResult(
            turns=self.port.reports.history.tail(call.args(HistoryTailParams).n)
        )

    async def history_clear(self, call: Call) -> HistoryClearResult:
        if call.args(HistoryClearParams).confirm_id != self.port.id:
            raise BadRequest(
                "history.clear is irreversible: pass confirm_id equal to the agent id "
                f"{self.port.id!r}"
            )
        self.port.reports.history.clear()
        return HistoryClearResult(cleared=True)

    async def memory_stats(self, call: Call) -> MemoryStatsResult:
        return self.port.reports.memory_stats()

    # models and the handoff ------------------------------------------------------------

    async def model_list(self, call: Call) -> ModelListResult:
        router = self.port.router
        return ModelListResult.model_validate(
            {
                "current": router.current,
                "primary": router.primary,
                "pinned": router.pinned,
                "route": router.route,
                "models": router.models_view(),
            }
        )

    async def model_use(self, call: Call) -> ModelUseResult:
        return await self.port.control.use_model(call.args(ModelUseParams).model)

    async def model_save(self, call: Call) -> ModelSaveResult:
        pinned = self.port.router.pinned
        if pinned is None:
            # The current model may be an automatic fallback: saving that as the primary
            # would make a passing outage permanent.
            raise BadRequest("nothing is pinned: /use MODEL first, then /save")
        return ModelSaveResult(saved=save_model(self.port.config, pinned))

    async def handoff_show(self, call: Call) -> HandoffShowResult:
        record, validity = self.port.handoff.show()
        return HandoffShowResult(record=record, valid=validity.ok, reason=validity.reason)

    # the plan ---------------------------------------------------------------------------

    @property
    def _plan_path(self) -> Path:
        return self.port.config.dir / PLAN_FILE

    async def plan_read(self, call: Call) -> PlanReadResult:
        text = await asyncio.to_thread(read_plan, self._plan_path)
        return PlanReadResult(text=text, path=str(self._plan_path), bytes=len(text.encode("utf-8")))

    async def plan_write(self, call: Call) -> PlanWriteResult:
        return PlanWriteResult(bytes=await self._plan_op(write_plan, call.args(AnyTextParams).text))

    async def plan_append(self, call: Call) -> PlanWriteResult:
        return PlanWriteResult(bytes=await self._plan_op(append_plan, call.args(TextParams).text))

    async def plan_delete(self, call: Call) -> PlanDeleteResult:
        if not call.args(ConfirmParams).confirm:
            raise BadRequest("plan.delete needs confirm=true: the plan is removed for good")
        return PlanDeleteResult(deleted=await asyncio.to_thread(delete_plan, self._plan_path))

    async def _plan_op(self, op: Callable[[Path, str], int], text: str) -> int:
        text = self.port.redactor.redact(text)  # a console redacts too; other callers may not
        try:
            return await asyncio.to_thread(op, self._plan_path, text)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        except OSError as exc:
            raise StorageIoError(f"cannot write {self._plan_path}: {exc.strerror}") from None

    # the knowledge base ------------------------------------------------------------------

    async def kb_ingest(self, call: Call) -> KbReport:
        params = call.args(KbIngestParams)
        scope = check_scope(params.scope)
        loop = asyncio.get_running_loop()
        events = self.port.events

        def progress(done: int, total: int, path: str) -> None:
            # Called on the ingesting thread; the publisher belongs to the loop.
            loop.call_soon_threadsafe(
                lambda: events.emit(
                    EventType.KB_PROGRESS, scope=scope, done=done, total=total, path=path
                )
            )

        report = await self.port.kb.ingest(scope, list(params.paths), progress=progress)
        return KbReport.model_validate(report)

    async def kb_search(self, call: Call) -> KbSearchResult:
        params = call.args(KbSearchParams)
        k = KB_DEFAULT_K if params.k is None else params.k
        hits = await self.port.kb.search(check_scope(params.scope), params.query, k=k)
        return KbSearchResult(hits=hits)

    async def kb_list(self, call: Call) -> KbListResult:
        scope = check_scope(call.args(KbScopeParams).scope)
        return KbListResult(documents=await self.port.kb.documents(scope))

    async def kb_export(self, call: Call) -> KbExportResult:
        params = call.args(KbExportParams)
        chunks = await self.port.kb.export(check_scope(params.scope), list(params.ids))
        return KbExportResult.model_validate({"chunks": chunks, "from": self.port.id})

    async def kb_import(self, call: Call) -> KbReport:
        params = call.args(KbImportParams)
        report = await self.port.kb.import_documents(
            check_scope(params.scope), list(params.chunks), copied_from=params.copied_from
        )
        return KbReport.model_validate(report)

    async def offload_propose(self, call: Call) -> OffloadProposal:
        proposal = self.port.control.propose_offload(call.args(OffloadProposeParams).name)
        kb_ids = await self._relevant_documents(proposal.task)
        return proposal.model_copy(update={"kb_ids": kb_ids})

    async def _relevant_documents(self, task: str) -> list[str]:
        """Up to 5 of the agent's own documents about ``task``, best first; none without a KB."""
        if not task or not (self.port.config.dir / "kb").is_dir():
            return []  # never create a store just to propose from it
        try:
            hits = await self.port.kb.search("agent", task[:2000], k=MAX_OFFLOAD_DOCS * 3)
        except AteamError:
            return []
        return list(dict.fromkeys(hit["doc_id"] for hit in hits))[:MAX_OFFLOAD_DOCS]

    async def context_summarize(self, call: Call) -> SummarizeResult:
        return await self.port.control.summarize("/summarize")

    # approvals --------------------------------------------------------------------------

    async def approval_list(self, call: Call) -> ApprovalListResult:
        full = call.args(ApprovalListParams).full
        pending = [req.to_wire(full=full) for req in self.port.approvals.pending()]
        if full:
            # /edit: the whole proposed file, which the owner edits and sends back; a
            # masked copy would write **** into the file. Only this reply carries it.
            return ApprovalListResult.model_validate({"pending": pending})
        return ApprovalListResult.model_validate(
            {"pending": self.port.redactor.redact_obj(pending)}
        )

    async def approval_answer(self, call: Call) -> ApprovalAnswerResult:
        params = call.args(ApprovalAnswerParams)
        decision = parse_decision(params.decision)
        request = self.port.approvals.answer(
            params.request_id, decision, content=params.content, by=call.caller
        )
        return ApprovalAnswerResult(request_id=request.id, decision=decision.value)

    # prompts ----------------------------------------------------------------------------

    async def prompt_show(self, call: Call) -> PromptShowResult:
        prompts = self.port.prompting.prompts
        return PromptShowResult(
            text=prompts.effective(), marked=prompts.show(), version=prompts.version
        )

    async def prompt_overlay(self, call: Call) -> PromptOverlayResult:
        return PromptOverlayResult(
            text=self.port.prompting.prompts.overlay_text(),
            path=str(self.port.config.overlay_prompt_path),
        )

    async def prompt_append(self, call: Call) -> PromptVersionResult:
        text = self.port.redactor.redact(call.args(TextParams).text)
        self.port.prompting.prompts.append_overlay(text)
        self.port.prompting.changed("overlay line added")
        return PromptVersionResult(version=self.port.prompting.prompts.version)

    async def prompt_set(self, call: Call) -> PromptVersionResult:
        text = call.args(AnyTextParams).text
        self.port.prompting.prompts.set_overlay(self.port.redactor.redact(text))
        self.port.prompting.changed("overlay edited")
        return PromptVersionResult(version=self.port.prompting.prompts.version)

    async def prompt_reload(self, call: Call) -> PromptReloadResult:
        applied = self.port.prompting.request("/reloadsysprompt")
        return PromptReloadResult(
            applied=applied, deferred=not applied, version=self.port.prompting.prompts.version
        )

    async def tools_list(self, call: Call) -> ToolsListResult:
        policy = self.port.policy
        return ToolsListResult(
            tools=[
                ToolInfo(
                    name=item.name,
                    description=item.description.split("\n", 1)[0],
                    approval=policy.approval_for(item.name).value,
                )
                for item in policy.available()
            ],
            allow=list(policy.allow),
            deny=list(policy.deny),
        )

    async def shutdown(self, call: Call) -> ShutdownResult:
        if call.args(ShutdownParams).restart:
            await self.port.doors.restart_marker()
        # Reply first, then stop: the caller deserves to hear that it worked.
        asyncio.get_running_loop().call_later(0.05, self.port.control.request_shutdown)
        return ShutdownResult(stopping=True, pid=os.getpid())


def build_methods(port: ServicePort) -> dict[str, Method]:
    """Bind the catalogue to one agent. Adding a method means adding a row here."""
    svc = AgentService(port)
    Row = tuple[str, Callable[[Call], Awaitable[Result]], type[Params], type[Result], bool, str]
    table: list[Row] = [
        (
            "status",
            svc.status,
            NoParams,
            StatusResult,
            False,
            "registry entry, state, queue length, last event offset",
        ),
        (
            "input",
            svc.input_,
            InputParams,
            InputResult,
            True,
            "queue text as a task {text, source?, trace_id?}",
        ),
        (
            "team.input",
            svc.team_input,
            TeamInputParams,
            InputResult,
            False,
            "queue text from a teammate or external runtime {text, source, hops?, trace_id?}",
        ),
        (
            "interrupt",
            svc.interrupt,
            NoParams,
            InterruptResult,
            True,
            "stop the current task after the current chunk",
        ),
        (
            "cancel",
            svc.cancel,
            CancelParams,
            CancelResult,
            True,
            "stop the current task {hard}: hard stops it at once",
        ),
        (
            "queue.list",
            svc.queue_list,
            NoParams,
            QueueListResult,
            False,
            "current, pending and dead-lettered items",
        ),
        (
            "queue.current",
            svc.queue_current,
            NoParams,
            QueueCurrentResult,
            False,
            "the item being worked on (hops, trace_id), or null",
        ),
        (
            "queue.clear",
            svc.queue_clear,
            ConfirmParams,
            QueueClearResult,
            True,
            "drop pending items {confirm: true}",
        ),
        (
            "queue.retry",
            svc.queue_retry,
            NoParams,
            QueueRetryResult,
            True,
            "re-queue dead-lettered items",
        ),
        (
            "alert.ack",
            svc.alert_ack,
            NoParams,
            AlertAckResult,
            True,
            "clear the damage alerts ps shows (damaged files found at start)",
        ),
        (
            "history.tail",
            svc.history_tail,
            HistoryTailParams,
            HistoryTailResult,
            False,
            "newest turns {n}",
        ),
        (
            "history.clear",
            svc.history_clear,
            HistoryClearParams,
            HistoryClearResult,
            True,
            "erase history {confirm_id: agent id}",
        ),
        (
            "memory.stats",
            svc.memory_stats,
            NoParams,
            MemoryStatsResult,
            False,
            "tokens in context and ctx %",
        ),
        (
            "approval.list",
            svc.approval_list,
            ApprovalListParams,
            ApprovalListResult,
            False,
            "requests waiting for the owner",
        ),
        (
            "approval.answer",
            svc.approval_answer,
            ApprovalAnswerParams,
            ApprovalAnswerResult,
            True,
            "{request_id?, decision, content?}",
        ),
        (
            "prompt.show",
            svc.prompt_show,
            NoParams,
            PromptShowResult,
            False,
            "effective system prompt, plain and marked",
        ),
        (
            "prompt.overlay",
            svc.prompt_overlay,
            NoParams,
            PromptOverlayResult,
            False,
            "the overlay file's text and path",
        ),
        (
            "prompt.append",
            svc.prompt_append,
            TextParams,
            PromptVersionResult,
            True,
            "add a line to the overlay {text}",
        ),
        (
            "prompt.set",
            svc.prompt_set,
            AnyTextParams,
            PromptVersionResult,
            True,
            "replace the overlay, validated {text}",
        ),
        (
            "prompt.reload",
            svc.prompt_reload,
            NoParams,
            PromptReloadResult,
            True,
            "reload prompt files (after the task if busy)",
        ),
        (
            "tools.list",
            svc.tools_list,
            NoParams,
            ToolsListResult,
            False,
            "tools this agent may call, with approvals",
        ),
        (
            "model.list",
            svc.model_list,
            NoParams,
            ModelListResult,
            False,
            "models, their health, the route and the current",
        ),
        (
            "model.use",
            svc.model_use,
            ModelUseParams,
            ModelUseResult,
            True,
            "pin a model {model}; null unpins",
        ),
        (
            "model.save",
            svc.model_save,
            NoParams,
            ModelSaveResult,
            True,
            "write the current model to agent.yaml",
        ),
        (
            "handoff.show",
            svc.handoff_show,
            NoParams,
            HandoffShowResult,
            False,
            "the handoff record and whether it verifies",
        ),
        (
            "kb.ingest",
            svc.kb_ingest,
            KbIngestParams,
            KbReport,
            True,
            "add files to a KB {scope?, paths}; kb.progress events",
        ),
        (
            "kb.search",
            svc.kb_search,
            KbSearchParams,
            KbSearchResult,
            False,
            "top hits in a KB {scope?, query, k?}",
        ),
        ("kb.list", svc.kb_list, KbScopeParams, KbListResult, False, "documents of a KB {scope?}"),
        (
            "kb.export",
            svc.kb_export,
            KbExportParams,
            KbExportResult,
            False,
            "chosen documents' chunks {scope?, ids}",
        ),
        (
            "kb.import",
            svc.kb_import,
            KbImportParams,
            KbReport,
            True,
            "store exported chunks {scope?, chunks, copied_from}",
        ),
        (
            "plan.read",
            svc.plan_read,
            NoParams,
            PlanReadResult,
            False,
            "the agent's plan.md {text, path, bytes}",
        ),
        (
            "plan.write",
            svc.plan_write,
            AnyTextParams,
            PlanWriteResult,
            True,
            "replace the plan {text}",
        ),
        (
            "plan.append",
            svc.plan_append,
            TextParams,
            PlanWriteResult,
            True,
            "add a line to the plan {text}",
        ),
        (
            "plan.delete",
            svc.plan_delete,
            ConfirmParams,
            PlanDeleteResult,
            True,
            "remove the plan {confirm: true}",
        ),
        (
            "offload.propose",
            svc.offload_propose,
            OffloadProposeParams,
            OffloadProposal,
            True,
            "a spec for a new agent to take over {name?}",
        ),
        (
            "context.summarize",
            svc.context_summarize,
            NoParams,
            SummarizeResult,
            True,
            "re-summarise the working context",
        ),
        (
            "shutdown",
            svc.shutdown,
            ShutdownParams,
            ShutdownResult,
            True,
            "graceful stop {restart?}",
        ),
    ]
    rows = {
        name: Method(name, fn, mutating, doc, params, result)
        for name, fn, params, result, mutating, doc in table
    }
    return {**rows, **mode_methods(port)}  # plan approval, delegate mode: their own module
