"""The runtime's process: its stdout, where every message of the runtime comes.

A real child process, started as the agent starts a runtime, reports what it sees of
its own stdout; the agent reads every line back whole, however the runtime writes it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from ateam.agent.acp.process import PIPE_BYTES, RuntimeProcess

_F_GETPIPE_SZ = 1032
PIPE_MAX = Path("/proc/sys/fs/pipe-max-size")

# Prints the size of the pipe it writes to, then a 3 MiB line in 1 KiB writes: more than
# the widened pipe and the reader's buffer hold at once.
_CHILD = f"""
import fcntl, os, sys
print(fcntl.fcntl(1, {_F_GETPIPE_SZ}), flush=True)
for _ in range(3 * 1024):
    os.write(1, b"x" * 1024)
os.write(1, b"\\n")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are Linux's")
async def test_the_runtime_writes_to_a_widened_pipe_read_back_whole(tmp_path: Path) -> None:
    process = RuntimeProcess(
        "probe",
        [sys.executable, "-c", _CHILD],
        env=dict(os.environ),
        cwd=tmp_path,
        state_dir=None,
        scrub=lambda text: text,
    )
    _, stdout = await process.start()
    try:
        size = int((await stdout.readline()).strip())
        chunks = []
        while not (chunks and chunks[-1].endswith(b"\n")):
            try:
                chunks.append(await stdout.readuntil(b"\n"))
            except asyncio.LimitOverrunError as over:  # longer than a read: in pieces
                chunks.append(await stdout.readexactly(over.consumed))
        line = b"".join(chunks)
    finally:
        await process.stop()
    # The pipe may be capped lower by /proc/sys/fs/pipe-max-size, never left at 64 KiB.
    cap = int(PIPE_MAX.read_text())  # noqa: ASYNC240  # a proc file: no disk to wait on
    assert size == min(PIPE_BYTES, cap) > 64 * 1024
    assert line == b"x" * 3 * 1024 * 1024 + b"\n"
    assert process._stdout is None  # the read end is closed with the process
