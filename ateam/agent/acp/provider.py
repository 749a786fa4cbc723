"""A runtime seen as a model: what the router builds for a ``provider: acp`` entry.

The router holds one provider per model of the agent's route and asks a model that
failed whether it answers again (the probe before switching back). A runtime runs
whole tasks through :class:`~ateam.agent.acp.runner.AcpRunner`, so its provider does
only that probe: a throwaway process of the runtime, a new session, the last user
message as the prompt, no tools (every permission is refused, no file or terminal is
served), the answer streamed back as text. Its context window is the entry's, or the
known runtime's when the entry leaves the default.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import acp

from ateam.agent.acp.catalog import known_for, runtime_env
from ateam.agent.acp.editor import EditorClient
from ateam.agent.acp.session import RuntimeSession
from ateam.config.schema import ModelEntry
from ateam.providers.base import Chunk, Message, TextDelta
from ateam.tools.exec_values import ExecLimits
from ateam.tools.fs import Sandbox

__all__ = ["RuntimeProvider", "probe_client"]

_DEFAULT_WINDOW = ModelEntry.model_fields["context_window"].default


class _Collector(EditorClient):
    """An editor that serves nothing and keeps the answer's text."""

    def __init__(self, name: str, sandbox: Sandbox, limits: ExecLimits) -> None:
        super().__init__(
            name,
            events=None,
            sandbox=sandbox,
            exec_limits=limits,
            policy=None,
            approvals=None,
            approval_timeout_s=1.0,
        )
        self.text: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            text = getattr(update.content, "text", None)
            if isinstance(text, str):
                self.text.append(text)


def probe_client(name: str, cwd: Path, limits: ExecLimits) -> _Collector:
    """An editor for a look at a runtime that must do nothing: no file, command or tool."""
    return _Collector(name, Sandbox(cwd), limits)


class RuntimeProvider:
    """The router's handle on a runtime (see the module docstring)."""

    def __init__(self, entry: ModelEntry, *, cwd: Path, limits: ExecLimits) -> None:
        self.entry = entry
        self.model = entry.id
        known = known_for(entry)
        window = entry.context_window
        if window == _DEFAULT_WINDOW and known is not None:
            window = known.context_window
        self.context_window = window
        self._cwd = cwd
        self._limits = limits

    async def stream(
        self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None
    ) -> AsyncIterator[Chunk]:
        prompt = next((m.content for m in reversed(messages) if m.role == "user"), "ping")
        client = probe_client(self.model, self._cwd, self._limits)
        session = RuntimeSession(
            self.entry,
            client,
            env=runtime_env(self.entry, self._limits),
            cwd=self._cwd,
            state_dir=None,
        )
        try:
            await session.open(None)
            response = await session.prompt([acp.text_block(prompt)])
        finally:
            await session.stop()
        yield TextDelta("".join(client.text) or str(response.stop_reason))
