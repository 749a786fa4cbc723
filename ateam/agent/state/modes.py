"""``state/modes.json``: the agent's plan approval and delegate mode, kept across restarts.

One small JSON file, rewritten atomically on every change::

    {"delegate": true,
     "plans": [{"task": "trace:9f2c…", "trace_id": "9f2c…", "status": "rejected",
                "feedback": "split the migration", "by": "console:…", "at": 1764064800.5,
                "reply_to": null, "rid": "plan:trace:9f2c…:rejected:1764064790.1"}]}

``delegate`` is the run-time toggle (``/delegate on|off``); absent, ``agent.yaml`` decides.
``plans`` holds one record per task that needed a plan (its key, see
:mod:`ateam.agent.loop.modes`), oldest first: a new task's record never overwrites a
waiting one (a held board task's above all). Only the newest :data:`KEPT_PLANS` are kept,
plus every board task's that still waits. A file of the older one-record shape
(``"plan": {…}``) is read as a list of one. A damaged file is reported and read as empty,
so the worst a damaged file costs is asking again.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ateam._fs import atomic_write
from ateam._jsonl import storage_error
from ateam.agent.state.fence import Fenced, unfenced

__all__ = ["KEPT_PLANS", "MODES_FILE", "ModeStore", "PlanRecord", "PlanStatus"]

log = logging.getLogger(__name__)

MODES_FILE = "modes.json"

KEPT_PLANS = 16
"""Records kept besides the waiting board tasks': the file stays small."""


class PlanStatus(StrEnum):
    PENDING = "pending"
    """Written or being written; nobody has answered yet."""
    APPROVED = "approved"
    REJECTED = "rejected"
    """Sent back with feedback; the agent revises it and waits again."""


@dataclass
class PlanRecord:
    """Where the plan of one task stands."""

    task: str
    """The task's key: ``board:<id>`` for a board task, else ``trace:<trace id>``."""
    trace_id: str | None = None
    """The thread the task runs in: the answer's input continues it."""
    status: PlanStatus = PlanStatus.PENDING
    feedback: str = ""
    """The rejection's words, for the model and for ``plan show``."""
    by: str = ""
    """Who answered: a console session, ``cli``, or a lead ``agent:P/NAME``."""
    at: float = field(default_factory=time.time)
    """When it was created or last answered (an answer's request id is derived from it)."""
    reply_to: str | None = None
    """The teammate that asked for the task's answer: the answer's input carries it on."""
    rid: str | None = None
    """The request id the last answer's input was queued under (queued again under it)."""

    @property
    def approved(self) -> bool:
        return self.status is PlanStatus.APPROVED

    @classmethod
    def from_wire(cls, data: Any) -> PlanRecord | None:
        if not isinstance(data, dict) or not isinstance(data.get("task"), str):
            return None
        try:
            return cls(
                task=data["task"],
                trace_id=data.get("trace_id") if isinstance(data.get("trace_id"), str) else None,
                status=PlanStatus(data.get("status", "pending")),
                feedback=str(data.get("feedback") or ""),
                by=str(data.get("by") or ""),
                at=float(data.get("at") or 0.0),
                reply_to=_text(data.get("reply_to")),
                rid=_text(data.get("rid")),
            )
        except (TypeError, ValueError):
            return None


class ModeStore:
    """``state/modes.json`` of one agent.

    Args:
        state_dir: the agent's ``state/`` directory.
        fence: checked before each write (a fenced-off agent writes nothing).
    """

    def __init__(self, state_dir: Path, *, fence: Fenced = unfenced) -> None:
        self.path = state_dir / MODES_FILE
        self._fence = fence
        self.delegate: bool | None = None
        """The run-time toggle; ``None``: ``agent.yaml`` decides."""
        self.plans: dict[str, PlanRecord] = {}
        """One record per task key, oldest first."""
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable, starting without it: %s", self.path, exc)
            return
        if not isinstance(data, dict):
            log.warning("%s is not a JSON object, starting without it", self.path)
            return
        delegate = data.get("delegate")
        self.delegate = delegate if isinstance(delegate, bool) else None
        raw = data.get("plans")
        listed = raw if isinstance(raw, list) else [data.get("plan")]
        for record in filter(None, map(PlanRecord.from_wire, listed)):
            self.plans[record.task] = record

    @property
    def plan(self) -> PlanRecord | None:
        """The newest record."""
        return next(reversed(self.plans.values()), None)

    def put(self, record: PlanRecord) -> None:
        """Add (or move to the end) ``record``; the oldest make room, but never a board
        task's that waits (its task stays claimed until the answer)."""
        self.plans.pop(record.task, None)
        self.plans[record.task] = record
        # "board:" is the board task's key prefix (the loop's; state cannot import it).
        keep = [r for r in self.plans.values() if r.task.startswith("board:") and not r.approved]
        rest = [r for r in self.plans.values() if r not in keep][-KEPT_PLANS:]
        kept = {id(r) for r in (*keep, *rest)}
        self.plans = {k: r for k, r in self.plans.items() if id(r) in kept}

    def save(self) -> None:
        """Write both values, atomically; raises a storage error when the disk refuses."""
        self._fence("state/modes.json")
        plans = [{**asdict(r), "status": r.status.value} for r in self.plans.values()]
        data = {"delegate": self.delegate, "plans": plans}
        try:
            atomic_write(self.path, json.dumps(data, indent=1).encode("utf-8"))
        except OSError as exc:
            raise storage_error("state", "cannot write", self.path, exc) from exc


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
