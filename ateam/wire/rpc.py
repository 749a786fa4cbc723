"""Parameters of every agent RPC method, as typed models (SPEC §4.4).

The RPC server validates a request's ``params`` map against its method's model before
the handler runs, so a handler reads typed attributes instead of probing a dict, and
every method refuses a malformed request alike (``bad_request``, one line naming the
field). Unknown fields are ignored: a newer client may send more than this agent knows.
Values are checked strictly (``true`` is not the integer 1, ``"3"`` is not 3), as the
hand-written checks before them did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ateam.wire._validate import bad_request

MAX_HISTORY_TAIL = 1000
"""Most turns one ``history.tail`` returns (the reply must stay under the RPC size cap)."""
KB_MAX_K = 50


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty string")
    return value


Text = Annotated[str, AfterValidator(_not_blank)]
"""A string with something in it besides whitespace."""


class Params(BaseModel):
    """Base of every method's parameters."""

    # defer_build: a validator is built on first use, not at import: a process
    # meets few of these models, and each built one costs start-up and memory.
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore", defer_build=True)

    def wire(self) -> dict[str, object]:
        """The ``params`` map of a request: the fields that were given."""
        return self.model_dump(exclude_unset=True)


P = TypeVar("P", bound=Params)


def parse_params(model: type[P], method: str, raw: Mapping[str, object]) -> P:
    """``raw`` checked against ``model``; raises BadRequest naming the first bad field."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise bad_request(method, exc) from None


def build_params(model: type[P], method: str, /, **fields: object) -> P:
    """Parameters a client sends, checked as the agent checks them: a bad one is the same
    one-line ``bad_request``, raised before anything is sent. Only the fields given travel
    (:meth:`Params.wire`), so an agent's own defaults apply to the rest.

    ``model`` and ``method`` are positional only, so a method's own field of either name
    (``model.use`` takes a ``model``) can be given as a keyword."""
    return parse_params(model, method, fields)


class NoParams(Params):
    """A method that takes nothing (extra fields are ignored, as everywhere)."""


class InputParams(Params):
    text: Text
    source: str = "console"
    trace_id: str | None = None


MAX_HOPS_CEILING = 64
"""No configuration may let a thread between agents run longer than this."""


class TeamInputParams(Params):
    """``team.input``: text from another agent or an external runtime (SPEC §9).

    Unlike ``input`` it needs no ownership: the agent decides by the ``source`` kind
    (``agent:NAME`` from a teammate, ``mcp:RUNTIME`` from an MCP client) whether to
    queue it, and refuses a thread that went round more than its hop limit.
    """

    text: Text
    source: Annotated[str, Field(pattern=r"^(agent|mcp):[A-Za-z0-9._/@:-]{1,120}$")]
    hops: int = Field(default=1, ge=1, le=MAX_HOPS_CEILING)
    """How many agent-to-agent steps this message is into its thread (1: the first)."""
    trace_id: str | None = Field(default=None, max_length=64)
    """The thread: the sender's task trace, so the whole exchange shares one id."""
    reply: bool = False
    """The sender wants the final answer back, as a message of its own (issue 26)."""
    in_reply_to: str | None = Field(default=None, max_length=64)
    """This message is the answer to the item the receiver sent as ``reply``: its id
    at the teammate. A reply never asks for a reply."""


class CancelParams(Params):
    hard: bool = False


class ConfirmParams(Params):
    """A destructive method: nothing happens unless ``confirm`` is true."""

    confirm: bool = False


class HistoryTailParams(Params):
    n: int = Field(default=20, ge=0, le=MAX_HISTORY_TAIL)


class HistoryClearParams(Params):
    confirm_id: str | None = None
    """Must equal the agent's id: clearing a history cannot be undone."""


class ModelUseParams(Params):
    model: str | None = None
    """A model id to pin, or null to unpin."""


class ApprovalListParams(Params):
    full: bool = False
    """Include bulky fields (a patch's whole new file) — for ``/edit`` only."""


class ApprovalAnswerParams(Params):
    request_id: str | None = None
    decision: Any = None
    """A decision word (``approve``, ``reject`` …); the approvals module parses it."""
    content: str | None = None


class TextParams(Params):
    """``prompt.append``, ``plan.append``: a line with something in it."""

    text: Text


class AnyTextParams(Params):
    """``prompt.set``, ``plan.write``: a whole text, which may be empty."""

    text: str


class KbScopeParams(Params):
    scope: str | None = None
    """``agent``, ``project`` or ``user``; the knowledge base checks it (default ``agent``)."""


class KbIngestParams(KbScopeParams):
    paths: list[str] = Field(min_length=1)


class KbSearchParams(KbScopeParams):
    query: Text
    k: int | None = Field(default=None, ge=1, le=KB_MAX_K)


class KbExportParams(KbScopeParams):
    ids: list[str]
    """The documents to export; there is deliberately no copy-all."""


class KbImportParams(KbScopeParams):
    chunks: list[dict[str, Any]]
    copied_from: Text


class OffloadProposeParams(Params):
    name: str | None = None


class ShutdownParams(Params):
    restart: bool = False
