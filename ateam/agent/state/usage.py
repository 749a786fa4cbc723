"""Tokens and cost per model, kept in ``state/usage.json`` across restarts (SPEC §11).

The router counts every model call in memory (:class:`Usage` per model); the agent hands
those counts to a :class:`UsageLedger`, which writes them atomically (temp file, fsync,
rename) so that ``ateam ps --json`` reports the same totals before and after a restart::

    ledger = UsageLedger(state_dir)
    router.usage = ledger.load()          # on start
    ledger.save(router.usage)             # after work, and on shutdown

The file::

    {"schema_version": 1, "updated_at": 1764064800.5,
     "models": {"gpt": {"tokens_in": 1200, "tokens_out": 300, "calls": 4, "cost": 0.0021}}}
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ateam._fs import DamageLog, Problem, atomic_write, file_key
from ateam._jsonl import storage_error
from ateam.agent.state.fence import Fenced, unfenced
from ateam.errors import StorageError
from ateam.paths import private_dir

__all__ = ["USAGE_FILE", "Usage", "UsageLedger"]

log = logging.getLogger(__name__)

USAGE_FILE = "usage.json"
_SCHEMA_VERSION = 1


@dataclass
class Usage:
    """Tokens and estimated cost spent on one model."""

    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0
    cost: float = 0.0
    """Estimated from the prices in ``models.yaml``; 0 where none are given."""

    def to_wire(self) -> dict[str, Any]:
        return {
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "calls": self.calls,
            "cost": round(self.cost, 6),
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Usage | None:
        """The counts in ``data``; ``None`` if any is missing, negative or of a wrong type."""
        counts = [data.get(name) for name in ("tokens_in", "tokens_out", "calls")]
        cost = data.get("cost", 0.0)
        if not all(type(n) is int and n >= 0 for n in counts):
            return None
        if type(cost) not in (int, float) or not math.isfinite(cost) or cost < 0:
            return None
        tokens_in, tokens_out, calls = counts
        return cls(tokens_in, tokens_out, calls, float(cost))  # type: ignore[arg-type]


class UsageLedger:
    """``state/usage.json`` of one agent.

    Args:
        state_dir: the agent's ``state/`` directory.
        fence: checked before each write (a fenced-off agent writes nothing).
    """

    def __init__(self, state_dir: Path, *, fence: Fenced = unfenced) -> None:
        self.path = Path(state_dir) / USAGE_FILE
        self._fence = fence
        self.damage = DamageLog("usage")
        """A damaged file is kept aside and reported here before it is replaced."""
        self._last_error: str | None = None

    def load(self) -> dict[str, Usage]:
        """The stored counts per model; empty when there is no file yet.

        A damaged file is reported through :attr:`damage` (and copied aside, before the
        next save replaces it); what can be read of it is kept, the rest starts at zero.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("usage: cannot read %s: %s; counting from zero", self.path, exc)
            return {}
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError):
            self._damaged(data, Problem.NOT_JSON, "is not valid JSON")
            return {}
        models = raw.get("models") if isinstance(raw, dict) else None
        if not isinstance(models, dict):
            self._damaged(data, Problem.WRONG_SHAPE, "holds no 'models' mapping")
            return {}
        usage: dict[str, Usage] = {}
        bad = 0
        for name, entry in models.items():
            parsed = Usage.from_wire(entry) if isinstance(entry, dict) else None
            if parsed is None:
                bad += 1
                continue
            usage[str(name)] = parsed
        if bad:
            self._damaged(data, Problem.WRONG_SHAPE, f"has {bad} malformed model entries", bad)
        return usage

    def _damaged(self, data: bytes, problem: Problem, what: str, count: int = 1) -> None:
        # A start that ended before a save replaced the file meets it again at the next.
        key = file_key(self.path)
        if self.damage.already(self.path, key):
            return
        self.damage.report(
            self.path,
            problem,
            f"{self.path.name} {what}; those counts start again from zero",
            count=count,
            data=data,
            key=key,
        )

    def save(self, usage: Mapping[str, Usage]) -> None:
        """Write the counts, replacing the file atomically.

        Raises:
            StorageError: the file could not be written; the previous one is intact.
            LockLost: the agent was fenced off.
        """
        record = {
            "schema_version": _SCHEMA_VERSION,
            "updated_at": time.time(),
            "models": {name: item.to_wire() for name, item in sorted(usage.items())},
        }
        data = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8")
        self._fence("the usage ledger")
        try:
            if not self.path.parent.exists():
                private_dir(self.path.parent)
            atomic_write(self.path, data, mode=0o600)
        except OSError as exc:
            raise storage_error("usage", "cannot write", self.path, exc) from exc

    def save_quietly(self, usage: Mapping[str, Usage]) -> bool:
        """:meth:`save`, logging a failure once until it changes; ``True`` if written.

        Usage is bookkeeping: a full disk must not stop the agent over it, and the
        counts stay in memory for the next try.
        """
        try:
            self.save(usage)
        except StorageError as exc:
            if exc.message != self._last_error:
                log.warning("%s", exc.one_line())
            self._last_error = exc.message
            return False
        self._last_error = None
        return True
