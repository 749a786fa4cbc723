"""The ``/offload`` form: an agent's proposal for a new agent, edited before it starts.

The agent proposes (RPC ``offload.propose``); the console shows the proposal as fields
the owner may change one at a time (``FIELD=VALUE``, or ``edit FIELD`` for the long
texts) before confirming. Every field has a parser here, so a bad value is refused when
typed, not when the agent would start.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ateam.config.names import check_name
from ateam.errors import UsageError

__all__ = ["LONG_FIELDS", "OffloadForm"]

WHERE = ("here", "remote")
_DOC_ID = re.compile(r"d-[0-9a-f]{6,64}")
LONG_FIELDS = ("system_prompt", "first_task")
"""Fields holding whole texts: shown folded, edited in ``$EDITOR`` or replaced whole."""

_YES = {"yes": True, "y": True, "true": True, "on": True, "no": False, "n": False,
        "false": False, "off": False}  # fmt: skip


def _name(value: str) -> str:
    try:
        return check_name(value, "agent")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _where(value: str) -> str:
    if value not in WHERE:
        raise UsageError(f"where must be one of {', '.join(WHERE)}")
    return value


def _flag(value: str) -> bool:
    try:
        return _YES[value.lower()]
    except KeyError:
        raise UsageError("worktree must be yes or no") from None


def _ids(value: str) -> tuple[str, ...]:
    ids = tuple(
        part.strip() for part in value.split(",") if part.strip() and part.strip() != "none"
    )
    bad = [i for i in ids if not _DOC_ID.fullmatch(i)]
    if bad:
        raise UsageError(f"kb_ids: {', '.join(bad)} are not document ids (d-…, see /kb ls)")
    return ids


def _text(value: str) -> str:
    return value


def _nonempty(value: str) -> str:
    if not value.strip():
        raise UsageError("this field cannot be empty")
    return value.strip()


_PARSERS: dict[str, Callable[[str], Any]] = {
    "name": _name,
    "cwd": _nonempty,
    "model": _nonempty,
    "where": _where,
    "worktree": _flag,
    "kb_ids": _ids,
    "system_prompt": _text,
    "first_task": _nonempty,
}


@dataclass(frozen=True)
class OffloadForm:
    """One proposal, as the owner currently wants it."""

    parent: str
    """The proposing agent's id."""
    project: str
    name: str
    cwd: str
    model: str
    first_task: str
    system_prompt: str = ""
    kb_ids: tuple[str, ...] = ()
    where: str = "here"
    """``here`` (a kept process on this host) or ``remote`` (a one-line command + token)."""
    worktree: bool = False
    handoff: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_proposal(cls, proposal: dict[str, Any], **overrides: Any) -> OffloadForm:
        """The form for an ``offload.propose`` reply, with some fields preset."""
        form = cls(
            parent=str(proposal["from"]),
            project=str(proposal["project"]),
            name=str(proposal["name"]),
            cwd=str(proposal["cwd"]),
            model=str(proposal["model"]),
            first_task=str(proposal["first_task"]),
            system_prompt=str(proposal.get("system_prompt") or ""),
            kb_ids=tuple(str(i) for i in proposal.get("kb_ids") or ()),
            handoff=dict(proposal.get("handoff") or {}),
        )
        return replace(form, **overrides)

    @property
    def agent_id(self) -> str:
        return f"{self.project}/{self.name}"

    def set(self, name: str, value: str) -> OffloadForm:
        """A copy with field ``name`` parsed from ``value``; raises UsageError if it can't be."""
        parser = _PARSERS.get(name)
        if parser is None:
            raise UsageError(f"no field {name!r}; fields: {', '.join(_PARSERS)}")
        return replace(self, **{name: parser(value)})

    def apply(self, answer: str) -> OffloadForm:
        """``FIELD=VALUE`` (or ``FIELD: VALUE``) from the owner's answer."""
        for separator in ("=", ":"):
            name, found, value = answer.partition(separator)
            if found and name.strip() in _PARSERS:
                return self.set(name.strip(), value.strip())
        raise UsageError(f"expected FIELD=VALUE with FIELD one of {', '.join(_PARSERS)}")

    def lines(self) -> list[str]:
        """The form for people: one line a field, long texts folded to their first line."""
        shown = []
        for item in fields(self):
            if item.name not in _PARSERS:
                continue
            value = getattr(self, item.name)
            if item.name in LONG_FIELDS:
                text = str(value)
                first = text.strip().splitlines()[0] if text.strip() else "(empty)"
                count = len(text.splitlines())
                value = f"{first[:70]}{'…' if len(first) > 70 or count > 1 else ''} ({count} lines)"
            elif item.name == "worktree":
                value = "yes" if value else "no"
            elif item.name == "kb_ids":
                value = ", ".join(value) or "(none)"
            shown.append(f"  {item.name:<14} {value}")
        checksum = self.handoff.get("checksum", "none")
        verdict = "verifies" if self.handoff.get("valid") else f"{self.handoff.get('reason')}"
        shown.append(f"  {'handoff':<14} {checksum} ({verdict})")
        return shown
