"""The agent's working context (SPEC §8): what it should remember across tasks, kept small.

Four small JSON files under ``state/context/``, each replaced atomically and readable only
by the user:

* ``summary.json`` — ``{summary, updated, tasks_covered, model}``: the running summary of
  the work so far, at most :data:`SUMMARY_MAX_TOKENS`;
* ``decisions.json`` — the newest :data:`DECISIONS_KEEP` key decisions
  ``{decision, rationale, impact, task, ts}``;
* ``failures.json`` — the newest :data:`FAILURES_KEEP` failures ``{description,
  root_cause, resolution, prevention, severity, task, ts}``;
* ``constraints.json`` — standing constraints ``{text, expires, added}``; one whose
  ``expires`` has passed is no longer active and is pruned at the next write.

``progress.json`` counts the tasks finished since the summary was last rewritten, so the
every-:data:`RESUMMARIZE_EVERY`-tasks rhythm survives a restart.

Each turn, :meth:`WorkingContext.render` turns these into one block for the system prompt
that never exceeds :attr:`Budget.total` tokens. Claims on that budget are served in this
order: all active constraints (they are rules, so they are never dropped while they fit
at all), then the top decisions and failures (each cut to a fair share), and the summary
takes what is left, up to :attr:`Budget.summary`.

Reads never raise: a missing or corrupt file reads as empty, because a damaged memory
must not stop the agent from working; a corrupt one is reported through
:attr:`WorkingContext.damage` and copied aside before a write replaces it. Writes raise
:class:`~ateam.errors.StorageError`.
One asyncio loop owns the files (the agent's); the class holds no state in memory, so
two instances on the same directory see each other's writes.

The budget fitting lives in :mod:`ateam.agent.context._fit`, the summary request and the reading
of its reply in :mod:`ateam.agent.context.summary_prompt`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ateam._fs import DamageLog, Problem, atomic_write, file_key, fsync_dir
from ateam._json import JsonObject
from ateam._jsonl import storage_error
from ateam.agent.context._fit import (
    MIN_LINE_TOKENS,
    Section,
    cost,
    cut_to,
    fit_constraints,
    fit_items,
    fit_summary,
)
from ateam.agent.context.summary_prompt import (
    SUMMARY_MAX_TOKENS,
    echoes_request,
    read_summary,
    summary_messages,
)
from ateam.agent.state.fence import Fenced, unfenced
from ateam.errors import ProviderError
from ateam.paths import private_dir
from ateam.providers.base import Provider, estimate_tokens
from ateam.wire.turns import Turn

__all__ = [
    "DECISIONS_KEEP",
    "DEFAULT_BUDGET",
    "FAILURES_KEEP",
    "RESUMMARIZE_EVERY",
    "SEVERITIES",
    "SUMMARY_MAX_TOKENS",
    "Budget",
    "SummaryOutcome",
    "WorkingContext",
]

DEFAULT_BUDGET = 2000
"""Tokens the working context may add to each turn's system prompt."""
RESUMMARIZE_EVERY = 5
"""Tasks between two automatic re-summarisations."""
DECISIONS_KEEP = 20
FAILURES_KEEP = 10
SEVERITIES = ("low", "medium", "high", "critical")

CONTEXT_DIR = "context"
SUMMARY_FILE = "summary.json"
DECISIONS_FILE = "decisions.json"
FAILURES_FILE = "failures.json"
CONSTRAINTS_FILE = "constraints.json"
PROGRESS_FILE = "progress.json"

_SHAPES: dict[str, type] = {
    SUMMARY_FILE: dict,
    DECISIONS_FILE: list,
    FAILURES_FILE: list,
    CONSTRAINTS_FILE: list,
    PROGRESS_FILE: dict,
}
"""What each file holds at its top level; anything else is a damaged file."""

HEADER = "## Working context"
_SUMMARY_HEADING = "### Summary"
_DECISIONS_HEADING = "### Key decisions (newest first)"
_FAILURES_HEADING = "### Past failures (newest first)"
_CONSTRAINTS_HEADING = "### Active constraints (always apply)"


@dataclass(frozen=True)
class Budget:
    """How :meth:`WorkingContext.render` splits its tokens (SPEC §8)."""

    total: int = DEFAULT_BUDGET
    """Hard ceiling of the rendered block, in estimated tokens."""
    summary: int = 1500
    """Most tokens the summary may take; it gets less when the rest needs the room."""
    decisions: int = 3
    """How many of the newest decisions are shown."""
    failures: int = 2
    """How many of the newest failures are shown."""

    def __post_init__(self) -> None:
        if self.total < 1 or self.summary < 0 or self.decisions < 0 or self.failures < 0:
            raise ValueError(f"invalid working-context budget: {self}")
        if self.summary > self.total:
            raise ValueError("the summary's share cannot exceed the total budget")

    @property
    def item_tokens(self) -> int:
        """Most tokens one decision or failure line may take: the non-summary share split."""
        items = max(1, self.decisions + self.failures)
        return max(MIN_LINE_TOKENS, (self.total - self.summary) // items)


@dataclass(frozen=True)
class SummaryOutcome:
    """What :meth:`WorkingContext.summarize` did."""

    ok: bool
    """Whether a new summary was stored."""
    summary: str | None
    """The stored summary when ``ok``."""
    attempts: int
    """Model calls made: 1, or 2 when the first reply was too long."""
    reason: str | None
    """Why it failed (``"too long twice"``, ``"empty reply"``, ``"provider error: ..."``)."""


@dataclass
class _Rendered:
    """The working context as text, and its sections."""

    text: str
    sections: dict[str, Section] = field(default_factory=dict)


class WorkingContext:
    """The working-context files of one agent, and the block they render to.

    Args:
        state_dir: the agent's ``state/`` directory; files live in ``state_dir/context``.
        budget: how the injected block is split.
    """

    # A frozen Budget, so one default instance can be shared safely.
    def __init__(
        self,
        state_dir: Path,
        *,
        budget: Budget = Budget(),
        fence: Fenced = unfenced,
        scrub: Callable[[Any], Any] | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self._fence = fence
        self._scrub = scrub
        """Masks secrets in every file written (summaries, decisions, failures)."""
        self.dir = self.state_dir / CONTEXT_DIR
        self.budget = budget
        self.damage = DamageLog("context")
        """Corrupt files found by a read: reported once each, copied aside first."""

    # -- reads ------------------------------------------------------------------------

    def summary(self) -> str:
        """The running summary, ``""`` when there is none.

        A stored summary that is a summary request fed back (written before such
        replies were refused) reads as none, so it is never nested into the next one.
        """
        text = str(self._summary_record().get("summary") or "")
        return "" if echoes_request(text) else text

    def decisions(self) -> list[JsonObject]:
        """Kept decisions, oldest first."""
        return _entries(self._read(DECISIONS_FILE), "decision")

    def failures(self) -> list[JsonObject]:
        """Kept failures, oldest first."""
        return _entries(self._read(FAILURES_FILE), "description")

    def constraints(self, *, now: float | None = None) -> list[JsonObject]:
        """Constraints still active at ``now`` (default: the current time), oldest first."""
        moment = time.time() if now is None else now
        return [c for c in self._all_constraints() if _active(c, moment)]

    @property
    def tasks_since_summary(self) -> int:
        """Tasks finished since the summary was last rewritten (persisted)."""
        value = self._progress().get("tasks_since_summary")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    # -- writes -----------------------------------------------------------------------

    def add_decision(
        self, decision: str, *, rationale: str = "", impact: str = "", task: str | None = None
    ) -> None:
        """Record a key decision; only the newest :data:`DECISIONS_KEEP` are kept.

        Raises:
            ValueError: ``decision`` is blank.
            StorageError: the file could not be written.
        """
        if not decision.strip():
            raise ValueError("a decision needs text")
        entry = {
            "decision": decision.strip(),
            "rationale": rationale.strip(),
            "impact": impact.strip(),
            "task": task,
            "ts": time.time(),
        }
        self._write(DECISIONS_FILE, [*self.decisions(), entry][-DECISIONS_KEEP:])

    def add_failure(
        self,
        description: str,
        *,
        root_cause: str = "",
        resolution: str = "",
        prevention: str = "",
        severity: str = "medium",
        task: str | None = None,
    ) -> None:
        """Record a failure and what it taught; only the newest :data:`FAILURES_KEEP` are kept.

        Raises:
            ValueError: ``description`` is blank or ``severity`` is not one of
                :data:`SEVERITIES`.
            StorageError: the file could not be written.
        """
        if not description.strip():
            raise ValueError("a failure needs a description")
        level = severity.strip().lower()
        if level not in SEVERITIES:
            raise ValueError(f"severity must be one of {', '.join(SEVERITIES)}, not {severity!r}")
        entry = {
            "description": description.strip(),
            "root_cause": root_cause.strip(),
            "resolution": resolution.strip(),
            "prevention": prevention.strip(),
            "severity": level,
            "task": task,
            "ts": time.time(),
        }
        self._write(FAILURES_FILE, [*self.failures(), entry][-FAILURES_KEEP:])

    def add_constraint(self, text: str, *, expires: float | None = None) -> None:
        """Add a standing constraint, active until ``expires`` (unix time) or for good.

        Adding a constraint whose text is already listed replaces it (a new expiry).

        Raises:
            ValueError: ``text`` is blank.
            StorageError: the file could not be written.
        """
        clean = text.strip()
        if not clean:
            raise ValueError("a constraint needs text")
        now = time.time()
        kept = [c for c in self.constraints(now=now) if c["text"] != clean]
        self._write(CONSTRAINTS_FILE, [*kept, {"text": clean, "expires": expires, "added": now}])

    def remove_constraint(self, text: str) -> bool:
        """Lift a constraint before its expiry; returns whether one was listed.

        Raises:
            StorageError: the file could not be written.
        """
        now = time.time()
        active = self.constraints(now=now)
        kept = [c for c in active if c["text"] != text.strip()]
        if len(kept) == len(active):
            return False
        self._write(CONSTRAINTS_FILE, kept)
        return True

    def set_summary(self, text: str, *, model: str, tasks_covered: int) -> None:
        """Replace the running summary.

        Args:
            text: the new summary.
            model: the model that wrote it.
            tasks_covered: how many finished tasks it accounts for in all.

        Raises:
            ValueError: the text is over :data:`SUMMARY_MAX_TOKENS`, or ``tasks_covered``
                is negative.
            StorageError: the file could not be written.
        """
        clean = text.strip()
        tokens = estimate_tokens(clean)
        if echoes_request(clean):
            raise ValueError("a summary must not contain the summary request's headings")
        if tokens > SUMMARY_MAX_TOKENS:
            raise ValueError(f"summary is {tokens} tokens, over the {SUMMARY_MAX_TOKENS} limit")
        if tasks_covered < 0:
            raise ValueError("tasks_covered must not be negative")
        record = {
            "summary": clean,
            "updated": time.time(),
            "tasks_covered": tasks_covered,
            "model": model,
        }
        self._write(SUMMARY_FILE, record)

    def note_task_done(self) -> bool:
        """Count one finished task; ``True`` once a re-summarisation is due.

        Due every :data:`RESUMMARIZE_EVERY` tasks. After a failed summary the next try
        waits another :data:`RESUMMARIZE_EVERY` tasks: a model that cannot summarise
        (or answers slowly) must cost the queue one attempt per rhythm, not one per task.

        Raises:
            StorageError: the counter could not be written.
        """
        count = self.tasks_since_summary + 1
        progress = self._progress()
        due_at = _int(progress.get("next_try")) or RESUMMARIZE_EVERY
        self._write(PROGRESS_FILE, {**progress, "tasks_since_summary": count})
        return count >= due_at

    # -- injection --------------------------------------------------------------------

    def render(self, *, now: float | None = None) -> str:
        """The block injected into each turn's system prompt; ``""`` when there is nothing.

        Never more than :attr:`Budget.total` tokens by ``estimate_tokens``.
        """
        return self._compose(now).text

    def stats(self, *, now: float | None = None) -> JsonObject:
        """Tokens per part of the rendered block, the budget split and the counts (``/ctx``)."""
        rendered = self._compose(now)
        parts = ("summary", "decisions", "failures", "constraints")
        sections = {name: rendered.sections.get(name, Section()) for name in parts}
        return {
            "tokens": {
                "header": estimate_tokens(HEADER) if rendered.text else 0,
                **{name: estimate_tokens(section.text) for name, section in sections.items()},
                "total": estimate_tokens(rendered.text),
            },
            "budget": {**asdict(self.budget), "item_tokens": self.budget.item_tokens},
            "counts": {
                "decisions": len(self.decisions()),
                "failures": len(self.failures()),
                "constraints": len(self.constraints(now=now)),
                **{f"{name}_shown": section.shown for name, section in sections.items()},
            },
            "cut": {name: section.cut for name, section in sections.items()},
            "summary_tokens": estimate_tokens(self.summary()),
            "tasks_since_summary": self.tasks_since_summary,
            "tasks_covered": _int(self._summary_record().get("tasks_covered")),
        }

    # -- summarisation ----------------------------------------------------------------

    async def summarize(
        self, provider: Provider, turns: list[Turn], *, model: str
    ) -> SummaryOutcome:
        """Fold ``turns`` into the running summary with one model call (two if too long).

        Nothing changes unless a summary within :data:`SUMMARY_MAX_TOKENS` comes back:
        the caller keeps the raw turns whenever this fails.

        Args:
            provider: the model to ask.
            turns: history turns, oldest first.
            model: the model id recorded as the summary's author.

        Raises:
            StorageError: a summary was produced but could not be stored.

        Errors other than :class:`~ateam.errors.ProviderError` (a provider that is
        misconfigured, say) propagate: they are not this summary's failure to report.
        """
        current = self.summary()
        since = self.tasks_since_summary
        too_long: int | None = None
        outcome = SummaryOutcome(False, None, 2, "too long twice")
        for attempt, limit in enumerate((SUMMARY_MAX_TOKENS, SUMMARY_MAX_TOKENS // 2), start=1):
            messages = summary_messages(current, turns, limit=limit, previous_tokens=too_long)
            try:
                reply = await read_summary(provider, messages)
            except ProviderError as exc:
                outcome = SummaryOutcome(False, None, attempt, f"provider error: {exc.message}")
                break
            if reply.refused is not None:
                outcome = SummaryOutcome(False, None, attempt, reply.refused)
                break
            if reply.tokens <= SUMMARY_MAX_TOKENS:
                covered = _int(self._summary_record().get("tasks_covered")) + since
                self.set_summary(reply.text, model=model, tasks_covered=covered)
                # Tasks noted while the model was writing are not in this summary yet.
                left = max(0, self.tasks_since_summary - since)
                self._write(PROGRESS_FILE, {"tasks_since_summary": left})
                return SummaryOutcome(True, reply.text, attempt, None)
            too_long = reply.tokens
        # Failed: keep counting (the raw turns stay), try again a full rhythm later.
        count = self.tasks_since_summary
        self._write(
            PROGRESS_FILE,
            {"tasks_since_summary": count, "next_try": count + RESUMMARIZE_EVERY},
        )
        return outcome

    # -- internals --------------------------------------------------------------------

    def _compose(self, now: float | None) -> _Rendered:
        b = self.budget
        summary = self.summary()
        decisions = [_decision_line(d) for d in reversed(self.decisions())][: b.decisions]
        failures = [_failure_line(f) for f in reversed(self.failures())][: b.failures]
        constraints = [_constraint_line(c) for c in self.constraints(now=now)]
        if not (summary or decisions or failures or constraints):
            return _Rendered("")
        room = b.total - estimate_tokens(HEADER)
        if room <= 0:
            return _Rendered("")
        sections = {"header": Section(HEADER)}
        # Claims in order of importance: rules first, then the newest lessons, and the
        # summary, the only part that shortens gracefully, takes what is left.
        sections["constraints"] = fit_constraints(_CONSTRAINTS_HEADING, constraints, room)
        room -= cost(sections["constraints"])
        for name, heading, lines in (
            ("decisions", _DECISIONS_HEADING, decisions),
            ("failures", _FAILURES_HEADING, failures),
        ):
            sections[name] = fit_items(heading, lines, room, b.item_tokens)
            room -= cost(sections[name])
        summary_room = min(b.summary, room - estimate_tokens(_SUMMARY_HEADING) - 2)
        order = ("header", "summary", "decisions", "failures", "constraints")
        while True:
            sections["summary"] = fit_summary(_SUMMARY_HEADING, summary, summary_room)
            text = "\n\n".join(sections[n].text for n in order if sections[n].text)
            over = estimate_tokens(text) - b.total
            # The costs above bound the joined text for the ~4-characters estimate, so this
            # only runs should the estimate change; the summary gives way, not the rules.
            if over <= 0 or not sections["summary"].text:
                break
            body = sections["summary"].text.split("\n", 1)[1]
            summary_room = min(summary_room, estimate_tokens(body)) - over
        if over > 0:
            text = cut_to(text, b.total)
        if text == HEADER:
            return _Rendered("")
        return _Rendered(text, sections)

    def _summary_record(self) -> JsonObject:
        data = self._read(SUMMARY_FILE)
        return data if isinstance(data, dict) else {}

    def _progress(self) -> JsonObject:
        data = self._read(PROGRESS_FILE)
        return data if isinstance(data, dict) else {}

    def _all_constraints(self) -> list[JsonObject]:
        out = []
        for entry in _entries(self._read(CONSTRAINTS_FILE), "text"):
            expires = entry.get("expires")
            if expires is None or (
                isinstance(expires, int | float) and not isinstance(expires, bool)
            ):
                out.append(entry)
        return out

    def _read(self, name: str) -> Any:
        path = self.dir / name
        try:
            data = path.read_bytes()
        except OSError:
            # Missing or unreadable: an empty memory beats a stopped agent.
            return None
        try:
            value = json.loads(data)
        except (ValueError, RecursionError):
            self._damaged(path, data, Problem.NOT_JSON, "is not valid JSON")
            return None
        shape = _SHAPES.get(name, object)
        if not isinstance(value, shape):
            what = f"holds a JSON {type(value).__name__}, not a {shape.__name__}"
            self._damaged(path, data, Problem.WRONG_SHAPE, what)
            return None
        return value

    def _damaged(self, path: Path, data: bytes, problem: Problem, what: str) -> None:
        # Read on every turn: the same version of the file is reported once.
        key = file_key(path)
        if self.damage.already(path, key):
            return
        self.damage.report(
            path, problem, f"{path.name} {what}; it reads as empty", key=key, data=data
        )

    def _write(self, name: str, data: Any) -> None:
        path = self.dir / name
        self._fence(f"the working context ({name})")
        try:
            if not self.dir.exists():
                private_dir(self.dir)
                fsync_dir(self.dir.parent)
            if self._scrub is not None:
                data = self._scrub(data)
            payload = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
            atomic_write(path, payload.encode("utf-8"), mode=0o600)
        except OSError as exc:
            raise storage_error("context", "cannot write", path, exc) from exc


# --- rendering -------------------------------------------------------------------------


def _decision_line(entry: dict[str, Any]) -> str:
    line = f"- {entry['decision']}"
    if entry.get("rationale"):
        line += f" — why: {entry['rationale']}"
    if entry.get("impact"):
        line += f" — impact: {entry['impact']}"
    if entry.get("task"):
        line += f" (task {entry['task']})"
    return _one_line(line)


def _failure_line(entry: dict[str, Any]) -> str:
    line = f"- [{entry.get('severity') or 'medium'}] {entry['description']}"
    for key, label in (
        ("root_cause", "cause"),
        ("resolution", "fixed by"),
        ("prevention", "avoid by"),
    ):
        if entry.get(key):
            line += f"; {label}: {entry[key]}"
    if entry.get("task"):
        line += f" (task {entry['task']})"
    return _one_line(line)


def _constraint_line(entry: dict[str, Any]) -> str:
    line = f"- {entry['text']}"
    if entry.get("expires") is not None:
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(entry["expires"]))
        line += f" (until {until})"
    return _one_line(line)


def _one_line(text: str) -> str:
    # A stored newline would break the list; the block is for a model, not a layout.
    return " ".join(text.split())


def _entries(data: Any, key: str) -> list[JsonObject]:
    """The well-formed entries of a stored list: dicts whose ``key`` is non-blank text."""
    if not isinstance(data, list):
        return []
    return [e for e in data if isinstance(e, dict) and isinstance(e.get(key), str) and e[key]]


def _active(entry: dict[str, Any], now: float) -> bool:
    expires = entry.get("expires")
    return expires is None or float(expires) > now


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
