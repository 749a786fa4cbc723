"""Results of every agent RPC method, as typed models (SPEC §4.4).

A client reads a reply through its method's model (:func:`parse_result`), so the
front ends read attributes instead of probing a dict. Replies are read leniently, like
event payloads: an agent of another version may add fields (kept, under
``model_extra``) or leave optional ones out (defaults); a reply that does not fit at all
becomes a one-line ``bad_request`` naming the method and the field, never a KeyError.

The agent's handlers return these models and the RPC server sends :meth:`Result.wire`
(the fields the handler gave), so both ends hold one typed shape; the registry entry
(:class:`AgentEntry`) is one too, which the ``status`` reply extends.
``tests/unit/wire/test_rpc_contract.py`` calls every method of a real agent and holds each
reply to its model strictly. Open-ended parts (a router's usage per model, a
knowledge-base hit, a handoff record) stay maps.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo
from pydantic.functional_validators import BeforeValidator

# Defined with the registry entry, light for readers of the registry; re-exported here,
# where every result lives.
from ateam.wire.entry import AgentEntry as AgentEntry
from ateam.wire.entry import R as R
from ateam.wire.entry import Result as Result
from ateam.wire.entry import Rows as Rows
from ateam.wire.entry import TaskFailure as TaskFailure
from ateam.wire.entry import parse_result as parse_result

STRICT_ROWS = "strict_rows"
"""Validation context key: rows that do not fit fail the reply (the contract tests)."""

_Row = TypeVar("_Row", bound=Result)


def _rows_of(model: type[_Row]) -> BeforeValidator:
    """Read each row on its own: one that does not fit keeps its fields unchecked.

    One damaged row (a hand-edited ``dead.jsonl`` line, a model entry of another version)
    must not turn a whole listing into an error, and what it holds is still shown. The
    contract tests pass the :data:`STRICT_ROWS` context to hold every row to its model.
    """

    def each(raw: Any, info: ValidationInfo) -> Any:
        if not isinstance(raw, list) or (info.context or {}).get(STRICT_ROWS):
            return raw
        rows: list[Any] = []
        for item in raw:
            try:
                rows.append(model.model_validate(item))
            except ValidationError:
                fields = (
                    {k: v for k, v in item.items() if isinstance(k, str)}
                    if isinstance(item, dict)
                    else {}
                )
                rows.append(model.model_construct(**fields))
        return rows

    return BeforeValidator(each)


class Empty(Result):
    """A result nobody reads beyond its being there."""


# status, input, stopping a task -------------------------------------------------------


class StatusResult(AgentEntry):
    """``status``: the registry entry with the live state, queue length and offsets."""

    # defer_build: a validator is built on first use, not at import: a process
    # meets few of these models, and each built one costs start-up and memory.
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True, defer_build=True)

    last_offset: int = 0
    bus_connected: bool = False
    redis: str = ""


class InputResult(Result):
    id: str
    """The task id: its ``task.start`` and ``task.end`` events carry it."""
    trace_id: str | None = None
    queued: int = 0
    created: bool = True
    """False when the request id had been queued before (a resend)."""
    redacted: int = 0
    """Secrets the agent masked on receipt."""


class InterruptResult(Result):
    task_id: str | None = None
    """The task stopped, or None when the agent was idle."""


class CancelResult(InterruptResult):
    hard: bool = False


class ShutdownResult(Result):
    stopping: bool = True
    pid: int | None = None


# the queue and the history -------------------------------------------------------------


class QueueEntry(Result):
    """An item of the queue (a dead-lettered one adds its ``reason``)."""

    id: str | None = None
    text: str = ""
    source: str = ""
    enqueued_at: float = 0.0
    priority: int = 0
    rid: str | None = None
    caller: str | None = None
    trace_id: str | None = None
    attempts: int = 0
    kills: int = 0
    hops: int = 0
    """Agent-to-agent steps that brought it (``team.send``); 0 for a person's input."""
    reply_to: str | None = None
    """The teammate its final answer goes back to (``team.send`` with ``reply: true``)."""
    reason: str | None = None
    """Why a dead-lettered item was given up on."""
    dead_at: float | None = None


class QueueListResult(Result):
    current: QueueEntry | None = None
    pending: Annotated[list[QueueEntry], _rows_of(QueueEntry)] = []
    dead: Annotated[list[QueueEntry], _rows_of(QueueEntry)] = []


class QueueCurrentResult(Result):
    """``queue.current``: the item being worked on (the thread a ``team.send`` made now
    continues), or None when idle."""

    current: QueueEntry | None = None


class QueueClearResult(Result):
    cleared: int = 0


class QueueRetryResult(Result):
    requeued: list[str] = []


class AlertAckResult(Result):
    acknowledged: int = 0
    """Damage reports cleared from the registry entry."""


class HistoryTailResult(Result):
    turns: Rows = []
    """Read as :class:`~ateam.wire.turns.Turn` by :func:`~ateam.wire.turns.parse_turns`,
    which skips a line that fits nothing rather than refusing the whole reply."""


class HistoryClearResult(Result):
    cleared: bool = True


class Usage(Result):
    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0
    cost: float = 0.0


class UsageTotals(Usage):
    per_model: dict[str, Usage] = {}


class MemoryStatsResult(Result):
    model: str = "?"
    context_window: int = 0
    tokens_in_context: int = 0
    ctx_pct: float = 0.0
    next_context_tokens: int | None = None
    """None from an agent too old to preview its next context."""
    turns_in_context: int = 0
    turns_dropped: int = 0
    history_turns: int = 0
    summaries: int = 0
    rate_limit_headroom: float | None = None
    switch_at: float = 0.0
    working_context: dict[str, Any] | None = None
    """Tokens, budget and counts of the working-context block (open-ended)."""
    # All defaults, so made unchecked: a validator built for it at import would be
    # one more an agent pays at start (issue 28 §2).
    usage: UsageTotals = UsageTotals.model_construct()


# approvals -----------------------------------------------------------------------------


class PendingApproval(Result):
    """A request waiting for the owner."""

    request_id: str
    kind: str = ""
    tool: str = ""
    args: dict[str, Any] = {}
    task_id: str | None = None
    trace_id: str | None = None
    created: float | None = None
    expires: float | None = None
    path: str | None = None
    """A diff's: the file the patch changes (also ``diff`` and ``patch_id``)."""
    diff: str | None = None
    patch_id: str | None = None
    new_content: str | None = None
    """A diff's whole proposed file: only in ``approval.list {full: true}``, for ``/edit``."""


class ApprovalListResult(Result):
    pending: Annotated[list[PendingApproval], _rows_of(PendingApproval)] = []


class ApprovalAnswerResult(Result):
    request_id: str
    decision: str


# prompts and tools ---------------------------------------------------------------------


class PromptShowResult(Result):
    text: str = ""
    marked: str = ""
    """The prompt with each part marked by where it comes from."""
    version: int = 0


class PromptOverlayResult(Result):
    text: str = ""
    path: str = ""


class PromptVersionResult(Result):
    """``prompt.append``, ``prompt.set``: the prompt's version after the change."""

    version: int = 0


class PromptReloadResult(PromptVersionResult):
    applied: bool = False
    deferred: bool = False


class ToolInfo(Result):
    name: str
    description: str = ""
    approval: str = ""


class ToolsListResult(Result):
    tools: Annotated[list[ToolInfo], _rows_of(ToolInfo)] = []
    allow: list[str] = []
    deny: list[str] = []


# models and the handoff ----------------------------------------------------------------


class ModelRow(Result):
    """A model the agent knows: its place on the route, its health, its usage."""

    id: str
    provider: str = ""
    context_window: int = 0
    route: int | None = None
    current: bool = False
    pinned: bool = False
    failures: int = 0
    last_error: str | None = None
    cooling_down_s: float = 0.0
    healthy: bool = True
    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0
    cost: float = 0.0


class ModelListResult(Result):
    current: str = ""
    primary: str = ""
    pinned: str | None = None
    route: list[str] = []
    models: Annotated[list[ModelRow], _rows_of(ModelRow)] = []


class ModelUseResult(Result):
    current: str = ""
    pinned: str | None = None


class ModelSaveResult(Result):
    saved: str
    """The ``agent.yaml`` written."""


class HandoffShowResult(Result):
    record: dict[str, Any] | None = None
    valid: bool = False
    reason: str | None = None


# the knowledge base --------------------------------------------------------------------


class IngestedDoc(Result):
    doc_id: str
    path: str = ""
    chunks: int = 0
    replaced: str | None = None


class SkippedFile(Result):
    path: str = ""
    reason: str = ""
    duplicate_of: str | None = None


class KbReport(Result):
    """``kb.ingest`` and ``kb.import``: what was stored, document by document."""

    ingested: Annotated[list[IngestedDoc], _rows_of(IngestedDoc)] = []
    skipped: Annotated[list[SkippedFile], _rows_of(SkippedFile)] = []
    chunks: int = 0


class KbSearchResult(Result):
    hits: Rows = []


class KbListResult(Result):
    documents: Rows = []


class KbExportResult(Result):
    chunks: Rows = []
    from_: str | None = Field(default=None, alias="from")


# the plan, offloading, the working context ----------------------------------------------


class PlanReadResult(Result):
    """``plan.read``: the agent's ``plan.md``."""

    text: str = ""
    path: str = ""
    """Where it lives on the agent's host."""
    bytes: int = 0


class PlanWriteResult(Result):
    """``plan.write``, ``plan.append``: the plan's size after the change."""

    bytes: int = 0
    redacted: int = 0
    """Secrets masked on the way: the agent masks the text again but reports no count,
    so this is what the client's :class:`~ateam.client.PlanApi` masked before sending."""


class PlanDeleteResult(Result):
    deleted: bool = False


class OffloadProposal(Result):
    """A spec for a fresh agent to take over the proposer's work."""

    from_: str = Field(default="", alias="from")
    project: str = ""
    name: str = ""
    cwd: str = ""
    model: str = ""
    system_prompt: str = ""
    kb_ids: list[str] = []
    task: str = ""
    first_task: str = ""
    handoff: dict[str, Any] = {}


class SummarizeResult(Result):
    ok: bool = False
    attempts: int = 0
    reason: str | None = None
