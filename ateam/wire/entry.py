"""The base of every RPC result, and the registry entry (SPEC §4.3, §4.4).

Apart from :mod:`ateam.wire.results`, which holds the model of every method's reply and
re-exports these: ``ateam ps`` reads the registry and calls no method, and need not
build fifty models to do it.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ateam.errors import BadRequest
from ateam.wire._validate import bad_request

Rows = list[dict[str, Any]]
"""Open-ended rows (hits, documents, chunks) as the agent sends them."""


class Result(BaseModel):
    """Base of every method's result (and of the rows inside one)."""

    # defer_build: a validator is built on first use, not at import: a process
    # meets few of these models, and each built one costs start-up and memory.
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True, defer_build=True)

    def wire(self) -> dict[str, object]:
        """The value as it travels: aliases such as ``from`` restored, and only the fields
        that were given, so a handler's reply has the keys it always had and a reply read
        by a client comes back as the agent sent it.

        Serialisation warnings are off: a damaged row kept unchecked (a hand-edited
        ``dead.jsonl`` line) is sent as it was found, which is what it is kept for.
        """
        return self.model_dump(by_alias=True, exclude_unset=True, warnings=False)

    def __getitem__(self, key: str) -> object:
        """``result["field"]``, as the wire names it: kept for callers written against the
        plain-dict replies of earlier versions (``report["ingested"]``); new code reads
        attributes."""
        return self.model_dump(by_alias=True, warnings=False)[key]


R = TypeVar("R", bound=Result)


def parse_result(model: type[R], method: str, raw: object) -> R:
    """``raw`` (a reply's value) read as ``model``; raises BadRequest naming the field."""
    if not isinstance(raw, dict):
        raise BadRequest(f"reply to {method}: must be a map, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise bad_request(f"reply to {method}", exc) from None


# the registry entry -----------------------------------------------------------------


class TaskFailure(Result):
    """The agent's last task failed: which, how (its stable code) and when."""

    task_id: str
    code: str
    """The task's error code (``provider.auth``, ``runtime.missing``, ``internal`` ...)."""
    message: str
    """The error for people, masked."""
    at: float = 0.0
    """When it ended, in seconds since the epoch."""


class AgentEntry(Result):
    """What an agent publishes about itself.

    Mutable: the agent's parts set its fields as they change (the heartbeat publishes
    the entry when it differs from the one last written), without validation on
    assignment. Read leniently: fields of a newer agent are ignored, missing ones take
    their defaults.
    """

    model_config = ConfigDict(extra="ignore", frozen=False, populate_by_name=True)

    id: str
    name: str
    project: str
    model: str = ""
    cwd: str = ""
    host: str = ""
    pid: int = 0
    started_at: float = 0.0
    state: str = "init"
    ctx_pct: float = 0.0
    queue_len: int = 0
    current_task: str | None = None
    last_error: str | None = None
    fence: int = 0
    owner: str | None = None
    usage: dict[str, Any] = {}
    """The router's usage, in total and per model (:class:`~ateam.wire.results.UsageTotals`)."""
    primary: str = ""
    """The model the agent returns to; ``model`` differs after a switch."""
    pinned: str | None = None
    """The model ``/use`` pinned, if any: no automatic switch while set."""
    last_switch: dict[str, Any] | None = None
    """The newest ``model.switch``: ``{from, to, reason, ts}``."""
    alert: str | None = None
    """The standing alerts (a stalled worker, a model that cannot work, a failed last
    task ...), joined; shown by ``ps`` until they clear."""
    failure: TaskFailure | None = None
    """The last task's failure; cleared when a task succeeds (its alert with it)."""
    runtime_mode: str | None = None
    """A coding agent's own mode (Claude Code's ``default``, Codex's ``read-only`` ...)."""
    plan: str | None = None
    """``awaiting approval`` or ``approved``: the plan of the newest task that needed one."""
    delegate: bool = False
    """Delegate mode: coordination tools only."""
    damage: list[dict[str, Any]] = []
    """Damaged files this process found (each a ``storage.damaged`` warning's fields and
    ``msg``): ``ps`` shows ALERT until someone acknowledges them (``alert.ack``, ``ateam
    ack``) or the next start finds none."""

    def to_wire(self) -> dict[str, object]:
        """Every field, as the heartbeat writes it."""
        return self.model_dump()

    @classmethod
    def from_wire(cls, data: object) -> AgentEntry:
        """The entry in ``data`` (a decoded payload).

        Raises:
            pydantic.ValidationError: ``data`` is not an entry.
        """
        return cls.model_validate(data)
