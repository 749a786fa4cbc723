"""JSON-RPC messages over the runtime's stdio, one per line, bounded and checked.

The SDK's own stdio framing accepts a line of any length and stops reading at the first
line that is JSON but not an object. A runtime is a program ateam does not control, so
this transport (the SDK's message-level seam) draws the lines itself: a line longer than
:data:`MAX_MESSAGE_BYTES` ends the connection with a clear ``runtime.protocol`` error
instead of growing the agent's memory, and a line that is not a JSON object — a stray
``console.log``, a progress bar — is skipped and reported, since editors do the same and
a runtime that says one wrong thing usually goes on working.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from ateam.errors import RuntimeProtocol

__all__ = ["MAX_MESSAGE_BYTES", "LineChannel"]

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""The longest message taken from a runtime (a whole file's diff fits many times over)."""

KNOWN_UPDATES = frozenset(
    {
        "agent_message_chunk", "agent_thought_chunk", "available_commands_update",
        "config_option_update", "current_mode_update", "plan", "plan_removed", "plan_update",
        "session_info_update", "tool_call", "tool_call_update", "usage_update",
        "user_message_chunk",
    }
)  # fmt: skip
"""The ``session/update`` kinds the SDK reads; another one (a newer runtime's) would make
it log a traceback for every such message, so it is left out here, reported once."""

_PREVIEW = 120


class LineChannel:
    """The SDK's ``Transport`` over a runtime's stdin and stdout.

    Args:
        writer: The runtime's stdin.
        reader: Its stdout.
        name: The runtime's entry id, for errors.
        on_garbage: Told of each skipped line (a short preview), to warn on the task.
        max_bytes: The longest line taken.
    """

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        reader: asyncio.StreamReader,
        *,
        name: str,
        on_garbage: Callable[[str], None],
        max_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self._writer = writer
        self._reader = reader
        self._name = name
        self._on_garbage = on_garbage
        self._max = max_bytes
        self._send_lock = asyncio.Lock()
        self.failure: RuntimeProtocol | None = None
        """Why reading stopped early (an oversized message), if it did."""
        self.garbage = 0
        self.closed = False
        """Whether the runtime's stdout has ended (or reading stopped): nothing more comes."""
        self._unknown: set[str] = set()

    async def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n"
        async with self._send_lock:
            self._writer.write(data.encode())
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._line()
            if line is None:
                self.closed = True
                return None
            if not line or line.isspace():
                continue
            try:
                message = json.loads(line)  # whitespace around it is JSON's own
            except ValueError:
                message = None
            if isinstance(message, dict):
                unknown = _unknown(message)
                if unknown is None:
                    return message
                if unknown not in self._unknown:  # once each: a new kind comes every chunk
                    self._unknown.add(unknown)
                    self._on_garbage(f"runtime {self._name} sent {unknown}, left alone")
                continue
            self.garbage += 1
            preview = line.strip()[:_PREVIEW].decode("utf-8", "replace")
            self._on_garbage(f"runtime {self._name} wrote a line that is not JSON-RPC: {preview}")

    async def _line(self) -> bytes | None:
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                return b"".join([*parts, await self._reader.readuntil(b"\n")])
            except asyncio.IncompleteReadError as exc:
                tail = b"".join([*parts, exc.partial])
                return tail or None  # a last line without its newline still counts
            except asyncio.LimitOverrunError as exc:
                chunk = await self._reader.readexactly(exc.consumed)
                size += len(chunk)
                parts.append(chunk)
                if size > self._max:
                    self.failure = RuntimeProtocol(
                        f"runtime {self._name} sent a message of more than "
                        f"{self._max // (1024 * 1024)} MiB",
                        provider="acp",
                        model=self._name,
                    )
                    return None
            except (OSError, ValueError):
                return None

    async def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self._writer.close()


def _unknown(message: dict[str, Any]) -> str | None:
    """What in ``message`` the SDK cannot take (so it is skipped), or ``None``."""
    if "method" not in message:
        return None  # a response: the SDK matches it to its request, or drops it quietly
    method = message["method"]
    if not isinstance(method, str):
        return "a message whose method is not a string"
    if method != "session/update":
        return None
    params = message.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    kind = update.get("sessionUpdate") if isinstance(update, dict) else None
    if kind in KNOWN_UPDATES:
        return None
    return f"an update of a kind ateam does not know ({str(kind)[:40]})"
