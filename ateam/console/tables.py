"""Rows and one-line summaries that both the consoles and the ``ateam`` verbs print.

Kept apart from the console session so that ``ateam ps`` or ``ateam kb search`` can
format their output without loading the console (or Textual).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ateam._json import JsonObject

__all__ = [
    "KB_HIT_COLUMNS",
    "PS_COLUMNS",
    "damage_alert",
    "handoff_line",
    "kb_hit_rows",
    "kb_progress_line",
    "mode_cell",
    "ps_rows",
    "table_lines",
]

PS_COLUMNS = [
    "id", "state", "model", "pinned", "ctx_pct", "host", "queue_len", "owner", "tokens", "cost",
    "mode", "alert",
]  # fmt: skip
"""The columns of ``ateam ps`` and ``/ps``, in order."""

KB_HIT_COLUMNS = ("score", "doc", "path", "title", "text")
"""The columns of a ``kb search`` table (see :func:`kb_hit_rows`)."""


class KbProgress(Protocol):
    """A ``kb.progress`` payload, as the event model and the client's callback both give it."""

    @property
    def scope(self) -> str: ...
    @property
    def done(self) -> int: ...
    @property
    def total(self) -> int: ...
    @property
    def path(self) -> str: ...


class Handoff(Protocol):
    """The fields of a ``handoff`` event payload that its one line shows."""

    @property
    def action(self) -> str | None: ...
    @property
    def sequence(self) -> int | None: ...
    @property
    def checksum(self) -> str | None: ...
    @property
    def to(self) -> str | None: ...


class _Jsonable(Protocol):
    """A registry view: anything that reads as a ``ps`` row."""

    def to_json(self) -> dict[str, Any]: ...


def ps_rows(views: Iterable[_Jsonable], *, table: bool = True) -> list[JsonObject]:
    """Registry views as rows, with compact ``tokens``, ``cost`` and ``alert`` cells.

    The ``alert`` cell joins the live alert (a stall, a full disk) and the damaged files
    the agent found (see :func:`damage_alert`), so one column says what needs a person.
    For a ``table``, a coding agent's ``model`` cell also names its mode; ``--json``
    keeps ``model`` the entry id and the mode in ``runtime_mode``.
    """
    rows = [v.to_json() for v in views]
    for row in rows:
        usage = row.get("usage") or {}
        row["tokens"] = f"{usage.get('tokens_in', 0)}/{usage.get('tokens_out', 0)}"
        row["cost"] = usage.get("cost", 0)
        if table and row.get("runtime_mode"):  # a coding agent's mode is part of what it is
            row["model"] = f"{row.get('model')} ({row['runtime_mode']})"
        row["mode"] = mode_cell(row)
        damage = damage_alert(row.get("id", ""), row.get("damage") or [])
        alerts = [text for text in (row.get("alert"), damage) if text]
        row["alert"] = "; ".join(alerts) if alerts else None
    return rows


def mode_cell(row: Mapping[str, Any]) -> str | None:
    """The MODE cell: delegate mode and where the plan stands (``plan: approved``)."""
    parts = [
        "delegate" if row.get("delegate") else "",
        f"plan: {row['plan']}" if row.get("plan") else "",
    ]
    return ", ".join(part for part in parts if part) or None


def damage_alert(agent: str, damage: Sequence[Mapping[str, Any]]) -> str | None:
    """The ALERT text for damaged files an agent found; ``None`` for none.

    Names each file and problem once; the copies kept aside are in the log and events.
    """
    if not damage:
        return None
    found = dict.fromkeys(
        f"{Path(str(d.get('file', '?'))).name} {d.get('problem', 'damaged')}" for d in damage
    )
    return f"damaged: {', '.join(found)} (see its log; `ateam ack {agent}` clears)"


def table_lines(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> list[str]:
    """``rows`` as aligned text: an upper-case header line, then one line per row."""
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    widths = [max(len(col), *(len(r[i]) for r in cells)) for i, col in enumerate(columns)]
    header = "  ".join(col.upper().ljust(w) for col, w in zip(columns, widths, strict=True))
    body = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return [header, *body]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def kb_progress_line(progress: KbProgress) -> str:
    """A ``kb.progress`` event as one line: ``kb agent: 3/10 docs/a.md``."""
    return f"kb {progress.scope}: {progress.done}/{progress.total} {progress.path}"


def kb_hit_rows(hits: Iterable[Mapping[str, Any]]) -> list[JsonObject]:
    """``kb.search`` hits as table rows, title and text cut to fit a line."""
    return [
        {
            "score": hit["score"],
            "doc": hit["doc_id"],
            "path": hit["path"],
            "title": (hit.get("title") or "")[:40],
            "text": " ".join(str(hit.get("text", "")).split())[:60],
        }
        for hit in hits
    ]


def handoff_line(handoff: Handoff) -> str | None:
    """A ``handoff`` event as one line; ``None`` for a refresh (one each turn, no news)."""
    if handoff.action != "used":
        return None
    checksum = handoff.checksum or ""
    return (
        f"handoff #{handoff.sequence} ({checksum.removeprefix('sha256:')[:12]}) verified "
        f"and given to {handoff.to}"
    )
