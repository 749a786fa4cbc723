"""The coding agents ateam knows by name (issue 24): what ``ateam init --runtime`` writes.

A runtime is a ``models.yaml`` entry with ``provider: acp``; for the well-known ones
this table adds what the entry need not spell out — how to install the command when it
is missing, how to log in — and the entry ``ateam init --runtime ID`` writes. Anything
else that speaks the Agent Client Protocol works from its entry alone.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KNOWN", "Known"]


@dataclass(frozen=True)
class Known:
    """One coding agent ateam knows by name."""

    id: str
    """The entry id ``ateam init --runtime`` writes."""
    command: tuple[str, ...]
    install: str
    """What installs the command when it is missing."""
    login: str
    """What logs the runtime in (its own login: ateam stores no key)."""
    context_window: int
    name: str
    """What people call it."""

    def entry_yaml(self, *, commented: bool = False) -> str:
        """Its ``models.yaml`` entry, indented for the ``models:`` list."""
        command = ", ".join(self.command)
        lines = [
            f"# {self.name} over the Agent Client Protocol: it runs whole tasks with its own",
            "# tools; files, commands and approvals go through ateam.",
            f"# Install: {self.install}",
            f"# Log in:  {self.login}",
            f"- id: {self.id}",
            "  provider: acp",
            f"  command: [{command}]",
            f"  context_window: {self.context_window}",
        ]
        lead = "  # " if commented else "  "
        return "\n".join(
            (f"  {line}" if line.startswith("#") else f"{lead}{line}") for line in lines
        )


KNOWN: dict[str, Known] = {
    known.id: known
    for known in (
        Known(
            id="claude-code",
            command=("claude-code-acp",),
            install="npm install -g @anthropic-ai/claude-code @zed-industries/claude-code-acp",
            login="claude /login (or set ANTHROPIC_API_KEY and pass it with env_passthrough)",
            context_window=200_000,
            name="Claude Code",
        ),
        Known(
            id="codex",
            command=("codex-acp",),
            install="npm install -g @openai/codex @zed-industries/codex-acp",
            login="codex login (or set OPENAI_API_KEY and pass it with env_passthrough)",
            context_window=272_000,
            name="Codex",
        ),
        Known(
            id="gemini",
            command=("gemini", "--experimental-acp"),
            install="npm install -g @google/gemini-cli",
            login="gemini (choose a login once), or set GEMINI_API_KEY",
            context_window=1_000_000,
            name="Gemini CLI",
        ),
    )
}
"""By entry id; :func:`ateam.agent.acp.catalog.known_for` also matches an entry by its
command's program name."""
