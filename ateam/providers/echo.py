"""The ``echo`` provider: streams back ``echo: `` and the user's text, word by word.

It is the default model, so everything in ateam runs offline, and it gives tests and
benchmarks a deterministic stream.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

from ateam.providers.base import Chunk, Message, TextDelta, Usage, estimate_tokens

_WORDS = re.compile(r"\S+\s*|\s+")


class EchoProvider:
    def __init__(
        self, model: str = "echo", *, context_window: int = 8192, token_delay_s: float = 0.0
    ) -> None:
        self.model = model
        self.context_window = context_window
        self.token_delay_s = token_delay_s

    async def stream(
        self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None
    ) -> AsyncIterator[Chunk]:
        last_user = next((m.content for m in reversed(messages) if m.role == "user"), "")
        reply = f"echo: {last_user}"
        for word in _WORDS.findall(reply):
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            else:
                await asyncio.sleep(0)  # let interrupts and other tasks in between words
            yield TextDelta(word)
        prompt = sum(estimate_tokens(m.content) for m in messages)
        yield Usage(tokens_in=prompt, tokens_out=estimate_tokens(reply))
