"""The agent list's rows: marker, id and state over model, ctx %, host and queue."""

from __future__ import annotations

from rich.text import Text

from ateam.client import AgentStatus

STATE_STYLES = {
    "idle": "green",
    "busy": "cyan",
    "waiting": "bold yellow",
    "disconnected": "red",
    "restarting": "yellow",
    "shutdown": "dim",
}


def agent_prompt(view: AgentStatus, state: str, *, attached: bool) -> Text:
    """Two lines of the agent list: marker, id and state; model, ctx %, host, queue."""
    entry = view.entry
    marker = "⏳" if state == "waiting" else ("▸ " if attached else "  ")
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(marker, "bold yellow" if state == "waiting" else "bold")
    text.append(entry.id, "bold" if attached else "")
    text.append(f" {state}\n", STATE_STYLES.get(state, "dim"))
    model = entry.model or "-"
    if entry.pinned:
        model += " (pinned)"
    details = f"  {model} · {entry.ctx_pct:.0f}% · {entry.host or '-'} · q{entry.queue_len}"
    text.append(details, "dim")
    return text
