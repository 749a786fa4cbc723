"""What a successor needs: the handoff kept current, the block it reads, the offload proposal.

A successor is either another model of the same agent (a switch, SPEC §7) or a fresh
agent taking the work over (``/offload``, SPEC §11). :class:`HandoffKeeper` refreshes the
handoff record after every turn and task, renders the block the first call after a switch
carries, and builds the spec of an offload; :class:`HandoffMirror` copies each record into
Redis, so a console can read it while the agent is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from ateam.agent.context.handoff import HandoffStore
from ateam.agent.context.prompts import Prompts
from ateam.agent.context.working import WorkingContext
from ateam.agent.models.router import ModelRouter
from ateam.agent.state.plan import PLAN_FILE, read_plan
from ateam.agent.state.queue import DurableQueue
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.events import EventType
from ateam.bus.keys import Keys
from ateam.bus.publisher import EventPublisher
from ateam.config import AgentConfig
from ateam.constants import HANDOFF_BLOCK_TOKENS
from ateam.errors import AteamError
from ateam.wire.registry import AgentEntry
from ateam.wire.turns import Turn

__all__ = ["NEXT_STEPS_MAX", "HandoffKeeper", "HandoffMirror"]

log = logging.getLogger(__name__)

NEXT_STEPS_MAX = 5
"""Next steps a handoff carries: enough to go on, few enough to stay in budget."""


class HandoffMirror:
    """Mirrors the handoff record into Redis: one sender, always the newest bytes, in order."""

    def __init__(self, client: aioredis.Redis, keys: Keys, agent_id: str) -> None:
        self._client = client
        self._key = keys.handoff(agent_id)
        self._next: bytes | None = None
        self.task: asyncio.Task[None] | None = None
        """The sender while one runs."""

    def __call__(self, data: bytes) -> None:
        self._next = data
        if self.task is not None and not self.task.done():
            return
        with contextlib.suppress(RuntimeError):  # no running loop (shutdown)
            self.task = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        while self._next is not None:
            data, self._next = self._next, None
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self._client.set(self._key, data)


class HandoffKeeper:
    """Keeps the handoff current as work goes, and builds what a successor reads."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        handoff: HandoffStore,
        workctx: WorkingContext,
        queue: DurableQueue,
        router: ModelRouter,
        entry: AgentEntry,
        events: EventPublisher,
        prompts: Prompts,
    ) -> None:
        self._config = config
        self._handoff = handoff
        self._workctx = workctx
        self._queue = queue
        self._router = router
        self._entry = entry
        self._events = events
        self._prompts = prompts
        self._recent_actions: list[str] = []
        self._files_touched: list[str] = []

    def on_turn(self, item: QueueItem, turn: Turn) -> None:
        """After every recorded turn: keep the handoff current (SPEC §7)."""
        for call in turn.tool_calls:
            args = call.args
            what = args.get("cmd") or args.get("path") or ""
            self._recent_actions.append(f"{call.name} {what}".strip()[:200])
            if call.name in ("fs.write", "fs.patch") and args.get("path"):
                if args["path"] not in self._files_touched:
                    self._files_touched.append(str(args["path"]))
        del self._recent_actions[:-10]
        del self._files_touched[:-50]
        self.refresh(status="in_progress", description=item.text)

    def task_finished(self, item: QueueItem, ok: bool) -> None:
        self.refresh(status="done" if ok else "failed", description=item.text)

    def refresh(self, *, status: str, description: str | None = None) -> None:
        """Rewrite the record from what the agent knows now; a failure is only logged."""
        task: dict[str, Any] = {"status": status, "project": self._config.project}
        if description is not None:
            task["description"] = description[:2000]
        decisions = [d.get("decision", "") for d in self._workctx.decisions()[-5:]]
        failures = [
            {key: f.get(key, "") for key in ("description", "root_cause", "resolution")}
            for f in self._workctx.failures()[-3:]
        ]
        # A failure nobody resolved yet still blocks; a resolved one is a lesson.
        blockers = [f["description"] for f in failures if not f["resolution"]]
        model = {"current": self._router.current, "usage_percent": self._entry.ctx_pct}
        try:
            record = self._handoff.update(
                {
                    "model": model,
                    "task": task,
                    "context": {
                        "recent_actions": list(self._recent_actions),
                        "decisions": decisions,
                        "next_steps": self._next_steps(),
                        "blockers": blockers,
                        "failures": failures,
                    },
                    "files_touched": list(self._files_touched),
                },
                author=self._router.current,
            )
        except AteamError as exc:  # a handoff that cannot be written must not stop work
            log.warning("handoff not written: %s", exc)
            return
        self.announce("refreshed", record)

    def announce(self, action: str, record: Mapping[str, Any], **ids: Any) -> None:
        """The ``handoff`` event: written (``refreshed``) or taken up by a switch (``used``)."""
        context = record.get("context") or {}
        self._events.emit(
            EventType.HANDOFF,
            action=action,
            sequence=record.get("sequence"),
            checksum=record.get("checksum"),
            ready=record.get("handoff_ready"),
            next_steps=len(context.get("next_steps") or ()),
            **ids,
        )

    def _next_steps(self) -> list[str]:
        """What comes next: the plan's open items, else the queued inputs (SPEC §7)."""
        steps = _plan_steps(read_plan(self._config.dir / PLAN_FILE))
        if not steps:
            steps = [item.text for item in self._queue.pending()[:NEXT_STEPS_MAX]]
        return [_one_line(step, 200) for step in steps[:NEXT_STEPS_MAX]]

    def handoff_context(self) -> str:
        """The block the first call after a switch carries: the handoff and the summary."""
        record = self._handoff.read() or {}
        lines = [
            "## Handoff",
            f"You are taking over from model {record.get('author', '?')} mid-work.",
            *_handoff_lines(record),
        ]
        # The rolling summary is already in the working-context block every turn carries;
        # this block stays small so the first context after a switch stays in budget.
        block = "\n".join(lines)
        limit = HANDOFF_BLOCK_TOKENS * 4  # ~4 characters a token
        return block if len(block) <= limit else block[: limit - 1] + "…"

    def propose_offload(self, name: str | None = None) -> dict[str, Any]:
        """A spec for a fresh agent to take over this one's work (SPEC §11 ``/offload``).

        The handoff is refreshed first, so the new agent starts from this moment; it is
        its first task, beside the overlay as its system prompt. Nothing changes here:
        this agent keeps working, and the console decides what (if anything) is started.
        """
        agent_id = self._config.id
        current = self._queue.current
        if current is not None:
            self.refresh(status="in_progress", description=current.text)
        else:
            with contextlib.suppress(AteamError):  # re-stamped so it is not stale
                self._handoff.update({}, author=self._router.current)
        record, validity = self._handoff.show()
        record = record or {}
        checksum = str(record.get("checksum", "none"))
        state = "verified" if validity.ok else f"not verified: {validity.reason}"
        summary = self._workctx.summary().strip()
        lines = [
            f"You take over work offloaded by agent {agent_id} (its handoff {checksum}, {state}).",
            *_handoff_lines(record),
        ]
        if summary:
            lines += ["Summary of its work so far:", summary]
        pending = [item.text for item in self._queue.pending()][:5]
        if pending:
            lines.append(f"Still queued at {agent_id} (it keeps these unless you are told):")
            lines.extend(f"- {text[:300]}" for text in pending)
        lines.append("Continue the task from here; say what you do first.")
        return {
            "from": agent_id,
            "project": self._config.project,
            "name": name or f"{self._config.name}-2",
            "cwd": str(self._config.cwd),
            "model": self._router.current,
            "system_prompt": self._prompts.overlay_text(),
            "kb_ids": [],
            "task": current.text if current is not None else "",
            "first_task": "\n".join(lines),
            "handoff": {"checksum": checksum, "valid": validity.ok, "reason": validity.reason},
        }


_CHECKLIST = re.compile(r"^\s*[-*+]\s+\[( |x|X)\]\s+(.+)$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.+)$")


def _plan_steps(plan: str) -> list[str]:
    """The open checklist items of a Markdown plan, or its list items if it has no boxes."""
    boxes = [_CHECKLIST.match(line) for line in plan.splitlines()]
    if any(boxes):
        return [m.group(2).strip() for m in boxes if m is not None and m.group(1) == " "]
    items = (_LIST_ITEM.match(line) for line in plan.splitlines())
    return [m.group(1).strip() for m in items if m is not None]


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _handoff_lines(record: Mapping[str, Any]) -> list[str]:
    """The task, context lists and touched files of a handoff record, as prompt lines."""
    task = record.get("task") or {}
    context = record.get("context") or {}
    lines = [f"Task: {task.get('description', '')} (status: {task.get('status', '?')})"]
    for title, key in (
        ("Recent actions", "recent_actions"),
        ("Decisions", "decisions"),
        ("Next steps", "next_steps"),
        ("Blockers", "blockers"),
    ):
        items = context.get(key) or []
        if items:
            lines.append(f"{title}:")
            lines.extend(f"- {item}" for item in items)
    failures = [f for f in context.get("failures") or () if isinstance(f, Mapping)]
    if failures:
        lines.append("Failures (root cause → resolution, where known):")
        for failure in failures:
            cause = failure.get("root_cause") or "cause unknown"
            fix = failure.get("resolution") or "unresolved"
            lines.append(f"- {failure.get('description', '')} ({cause} → {fix})")
    if record.get("files_touched"):
        lines.append("Files touched: " + ", ".join(record["files_touched"][-20:]))
    return lines
