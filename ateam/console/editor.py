"""Text edited in the user's ``$VISUAL``/``$EDITOR`` (the overlay, a plan, a proposed file)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import tempfile
from pathlib import Path
from typing import Protocol

__all__ = ["Editor", "edit_text"]


class Editor(Protocol):
    """How a console opens an editor; a front end may wrap it (to give up the terminal)."""

    async def __call__(self, text: str, *, suffix: str) -> str | None: ...


async def edit_text(text: str, *, suffix: str) -> str | None:
    """Open ``text`` in ``$VISUAL``/``$EDITOR`` and return what was saved; None if it failed."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    fd, name = tempfile.mkstemp(prefix="ateam-", suffix=suffix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        proc = await asyncio.create_subprocess_exec(*shlex.split(editor), name)
        if await proc.wait() != 0:
            return None
        return await asyncio.to_thread(Path(name).read_text, encoding="utf-8")
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
