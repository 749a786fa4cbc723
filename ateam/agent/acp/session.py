"""The connection to one runtime: its process, the handshake, the session, each prompt.

:class:`RuntimeSession` starts the runtime lazily (at the first task), checks what it
says at ``initialize`` (a newer protocol is refused, naming both versions), opens a
session — loading the stored one when the runtime can, so the conversation continues
across restarts of the agent — sets the runtime's own mode from the agent's approval
policy, and sends prompts. Every failure becomes one of the typed ``runtime.*`` errors
(or the provider error a rate limit or overload is, so the router switches on it): the
task fails with a clear line, the runtime is restarted at the next task, and the agent
stays up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acp
from acp import RequestError, schema
from acp.client.connection import ClientSideConnection

from ateam import __version__
from ateam.agent.acp.catalog import find_command, install_hint, login_hint
from ateam.agent.acp.channel import LineChannel
from ateam.agent.acp.editor import EditorClient
from ateam.agent.acp.process import RuntimeProcess
from ateam.config.schema import ModelEntry
from ateam.errors import (
    ContextTooLong,
    Overloaded,
    ProviderError,
    RateLimited,
    RuntimeAuth,
    RuntimeCrashed,
    RuntimeError_,
    RuntimeMissing,
    RuntimeProtocol,
    RuntimeTimeout,
)

__all__ = ["McpServer", "RuntimeInfo", "RuntimeSession", "classify"]

McpServer = schema.HttpMcpServer | schema.SseMcpServer | schema.AcpMcpServer | schema.McpServerStdio

log = logging.getLogger(__name__)

INIT_TIMEOUT_S = 30.0
"""How long ``initialize`` and opening a session may take (a runtime that hangs there)."""

_AUTH_REQUIRED = -32000

AFTER_ERROR_S = 0.5
"""The pause before a prompt that follows a failed one on the same session."""

# What a runtime's error says decides how the router treats it; runtimes report a
# provider's 429 or 529 only in words (the code is a generic -32603).
_CLASSES: tuple[tuple[re.Pattern[str], type[ProviderError]], ...] = (
    (re.compile(r"rate.?limit|\b429\b|quota|too many requests|usage limit", re.I), RateLimited),
    (re.compile(r"overload|\b529\b|\b503\b|capacity", re.I), Overloaded),
    (re.compile(r"context.{0,20}(length|window|limit)|prompt is too long", re.I), ContextTooLong),
)


@dataclass
class RuntimeInfo:
    """What a runtime said about itself at ``initialize``."""

    name: str | None = None
    version: str | None = None
    protocol_version: int | None = None
    auth_methods: list[dict[str, Any]] = field(default_factory=list)
    load_session: bool = False
    resume_session: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "protocol_version": self.protocol_version,
            "auth_methods": self.auth_methods,
            "load_session": self.load_session,
            "resume_session": self.resume_session,
        }


def classify(exc: BaseException, name: str) -> ProviderError:
    """The typed error for a failed request to runtime ``name``."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, RequestError):
        data = exc.data
        said = _said(exc)
        if exc.code == _AUTH_REQUIRED:
            return RuntimeAuth(f"runtime {name} needs a login: {said}", provider="acp", model=name)
        for pattern, cls in _CLASSES:
            if pattern.search(said):
                return cls(f"runtime {name}: {said}", provider="acp", model=name)
        return RuntimeError_(
            f"runtime {name}: {said}", provider="acp", model=name, detail={"data": data}
        )
    return RuntimeError_(f"runtime {name}: {type(exc).__name__}: {exc}", provider="acp", model=name)


def _said(exc: RequestError) -> str:
    """The runtime's own words for a failure: its message and the data's message."""
    parts = [str(exc)]
    data = exc.data
    if isinstance(data, dict):
        for key in ("message", "details", "error"):
            value = data.get(key)
            if isinstance(value, str) and value not in parts:
                parts.append(value)
    elif isinstance(data, str):
        parts.append(data)
    return ": ".join(parts)[:500]


class RuntimeSession:
    """One agent's connection to its runtime, kept across tasks.

    Args:
        entry: The runtime's ``models.yaml`` entry.
        client: The editor side (files, terminals, permissions, updates).
        env: The runtime's environment.
        cwd: The agent's working directory (the session's too).
        state_dir: The agent's ``state/`` (the process group is recorded there).
        mcp_servers: The MCP servers every session gets (ateam's own, as this agent).
        scrub: Masks secrets in the runtime's stderr.
        on_garbage: Told of a line on stdout that is not JSON-RPC.
        mode: The runtime mode to set on a new session, if any.
    """

    def __init__(
        self,
        entry: ModelEntry,
        client: EditorClient,
        *,
        env: dict[str, str],
        cwd: Path,
        state_dir: Path | None,
        mcp_servers: Sequence[McpServer] = (),
        scrub: Callable[[str], str] = str,
        on_garbage: Callable[[str], None] = lambda _: None,
        mode: Callable[[schema.SessionModeState], str | None] | None = None,
    ) -> None:
        self.entry = entry
        self.name = entry.id
        self.client = client
        self._env = env
        self._cwd = cwd
        self._state_dir = state_dir
        self._mcp: list[McpServer] = list(mcp_servers)
        self._scrub = scrub
        self._on_garbage = on_garbage
        self._choose_mode = mode
        self.process: RuntimeProcess | None = None
        self.channel: LineChannel | None = None
        self.conn: ClientSideConnection | None = None
        self.info: RuntimeInfo | None = None
        self.session_id: str | None = None
        self.modes: schema.SessionModeState | None = None
        self.mode: str | None = None
        self.loaded = False
        """Whether the session was loaded (the runtime remembers the conversation)."""
        self._failed_at = float("-inf")
        extra = entry.settings.model_extra or {}
        self.init_timeout_s = float(extra.get("init_timeout_s", INIT_TIMEOUT_S))

    @property
    def alive(self) -> bool:
        """Whether prompts can go to the runtime: it runs and its stdout is still open."""
        return (
            self.process is not None
            and self.process.running
            and self.conn is not None
            and self.channel is not None
            and not self.channel.closed
        )

    # start ----------------------------------------------------------------------------

    async def start(self) -> RuntimeInfo:
        """Start the process and ``initialize``; :class:`RuntimeMissing` and the rest."""
        await self.stop()
        program = find_command(self.entry, self._env)
        if program is None:
            command = self.entry.command[0] if self.entry.command else "?"
            raise RuntimeMissing(
                f"runtime {self.name}: {command} is not installed (not on PATH); "
                f"install it with: {install_hint(self.entry)}",
                provider="acp",
                model=self.name,
                detail={"install": install_hint(self.entry)},
            )
        argv = [program, *(self.entry.command or ())[1:]]
        self.process = RuntimeProcess(
            self.name,
            argv,
            env=self._env,
            cwd=self._cwd,
            state_dir=self._state_dir,
            scrub=self._scrub,
        )
        writer, reader = await self.process.start()
        self.channel = LineChannel(writer, reader, name=self.name, on_garbage=self._on_garbage)
        self.conn = acp.connect_to_agent(self.client, self.channel)
        try:
            response = await self._bounded(
                "initialize",
                self.conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION,
                    client_capabilities=schema.ClientCapabilities(
                        fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True),
                        terminal=True,
                    ),
                    client_info=schema.Implementation(name="ateam", version=__version__),
                ),
            )
        except BaseException:
            await self.stop()
            raise
        self.info = _info(response)
        if response.protocol_version > acp.PROTOCOL_VERSION:
            await self.stop()
            raise RuntimeProtocol(
                f"runtime {self.name} speaks ACP version {response.protocol_version}; this "
                f"ateam speaks version {acp.PROTOCOL_VERSION}: upgrade ateam "
                "(pip install -U ateam) or pin an older runtime",
                provider="acp",
                model=self.name,
            )
        return self.info

    async def open(self, stored_id: str | None) -> bool:
        """A session: ``stored_id`` loaded when the runtime can, else a new one.

        Returns whether the stored conversation continues (``False``: a new session,
        whose first prompt must carry the handoff).
        """
        if not self.alive:
            await self.start()
        try:
            return await self._open(stored_id)
        except ProviderError:
            # Started again at the next task: a login made meanwhile lives in the
            # runtime's own files, which a runtime reads when it starts, and a runtime
            # that hung here is not asked again.
            await self.stop()
            raise

    async def _open(self, stored_id: str | None) -> bool:
        assert self.conn is not None and self.info is not None
        self.loaded = False
        if stored_id and self.info.load_session:
            try:
                loaded = await self._bounded(
                    "session/load",
                    self.conn.load_session(
                        cwd=str(self._cwd), session_id=stored_id, mcp_servers=self._mcp
                    ),
                )
            except RuntimeAuth:
                raise
            except ProviderError as exc:
                if not self.alive:
                    raise
                log.info("runtime %s: session %s not loaded (%s)", self.name, stored_id, exc)
            else:
                self.session_id = stored_id
                self.loaded = True
                await self._set_mode(loaded.modes if loaded is not None else None)
                return True
        created = await self._bounded(
            "session/new",
            self.conn.new_session(cwd=str(self._cwd), mcp_servers=self._mcp),
        )
        self.session_id = created.session_id
        await self._set_mode(created.modes)
        return False

    async def _set_mode(self, modes: schema.SessionModeState | None) -> None:
        self.modes = modes
        if modes is None:
            self.mode = None
            return
        self.mode = modes.current_mode_id
        wanted = self.entry.mode or (self._choose_mode(modes) if self._choose_mode else None)
        if wanted is None or wanted == self.mode:
            return
        if wanted not in {m.id for m in modes.available_modes}:
            log.warning("runtime %s has no mode %r; it stays in %r", self.name, wanted, self.mode)
            return
        assert self.conn is not None and self.session_id is not None
        await self._bounded(
            "session/set_mode",
            self.conn.set_session_mode(session_id=self.session_id, mode_id=wanted),
        )
        self.mode = wanted

    async def _bounded(self, what: str, call: Any) -> Any:
        try:
            async with asyncio.timeout(self.init_timeout_s):
                return await call
        except TimeoutError:
            raise RuntimeTimeout(
                f"runtime {self.name} did not answer {what} within {self.init_timeout_s:g} s",
                provider="acp",
                model=self.name,
            ) from None
        except (ConnectionError, RequestError) as exc:
            if isinstance(exc, ConnectionError) and self.process is not None:
                await self.process.reaped(1.0)
            raise self.failure(exc) from None

    # work -------------------------------------------------------------------------------

    async def prompt(self, blocks: list[Any]) -> schema.PromptResponse:
        assert self.conn is not None and self.session_id is not None
        since = time.monotonic() - self._failed_at
        if since < AFTER_ERROR_S:
            # codex-acp 0.16 may drop, unanswered, a prompt sent right after one that
            # failed (its failed turn is still ending); a moment's wait avoids it.
            await asyncio.sleep(AFTER_ERROR_S - since)
        try:
            return await self.conn.prompt(session_id=self.session_id, prompt=blocks)
        except RequestError as exc:
            self._failed_at = time.monotonic()
            raise self.failure(exc) from None
        except ConnectionError as exc:
            if self.process is not None:
                await self.process.reaped(1.0)  # its exit status explains the end
            raise self.failure(exc) from None

    async def cancel(self) -> None:
        if self.conn is None or self.session_id is None or not self.alive:
            return
        with contextlib.suppress(ConnectionError, OSError, RequestError):
            await self.conn.cancel(session_id=self.session_id)

    def failure(self, exc: BaseException) -> ProviderError:
        """What a failed request means, the runtime's end considered."""
        if self.channel is not None and self.channel.failure is not None:
            return self.channel.failure
        if isinstance(exc, ConnectionError) or (self.process and not self.process.running):
            how = self.process.exit_text() if self.process is not None else "gone"
            classified = _classify_words(how, self.name)
            if classified is not None:
                return classified
            return RuntimeCrashed(
                f"runtime {self.name} ended: {how}", provider="acp", model=self.name
            )
        classified = classify(exc, self.name)
        if isinstance(classified, RuntimeAuth):
            classified = RuntimeAuth(
                f"{classified.message}; auth methods: {self._auth_names()}; "
                f"log in with: {login_hint(self.entry)}",
                provider="acp",
                model=self.name,
            )
        return classified

    def _auth_names(self) -> str:
        methods = self.info.auth_methods if self.info is not None else []
        names = [str(m.get("name") or m.get("id")) for m in methods]
        return ", ".join(names) or "none advertised"

    # stop -------------------------------------------------------------------------------

    def kill_now(self) -> None:
        if self.process is not None:
            self.process.kill_now()

    async def stop(self) -> None:
        """Close the connection and end the process group; safe to call any time."""
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await conn.close()
        process, self.process = self.process, None
        if process is not None:
            await process.stop()
        self.channel = None
        await self.client.terminals.close_all()


def _classify_words(text: str, name: str) -> ProviderError | None:
    for pattern, cls in _CLASSES:
        if pattern.search(text):
            return cls(f"runtime {name} ended: {text}", provider="acp", model=name)
    return None


def _info(response: schema.InitializeResponse) -> RuntimeInfo:
    agent = response.agent_info
    caps = response.agent_capabilities
    session_caps = getattr(caps, "session_capabilities", None) if caps is not None else None
    methods = [
        m.model_dump(by_alias=True, exclude_none=True, mode="json")
        for m in response.auth_methods or ()
    ]
    return RuntimeInfo(
        name=agent.name if agent is not None else None,
        version=agent.version if agent is not None else None,
        protocol_version=response.protocol_version,
        auth_methods=methods,
        load_session=bool(caps.load_session) if caps is not None else False,
        resume_session=bool(getattr(session_caps, "resume", None)),
    )
