"""A command whose reader is held (the owning console is behind, issue 28 §3) blocks on
its write, as in a terminal, and loses nothing; interrupts and kills still end it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ateam.tools.exec_values import EndReason, ExecLimits
from ateam.tools.pty import ExecProcess

pytestmark = pytest.mark.timeout(30)

LIMITS = ExecLimits(timeout_s=20.0)
MB = 1 << 20
FLOOD = 16 * MB


class Gate:
    """An :class:`~ateam.tools.exec_values.OutputRoom` a test opens and closes: closed
    once ``after`` bytes were read, until :meth:`open`."""

    def __init__(self, received: bytearray, after: int = 0) -> None:
        self._received = received
        self._after = after
        self._opened = asyncio.Event()
        self.waits = 0
        self.held = asyncio.Event()
        """Set once the reader has been held."""

    def ready(self) -> bool:
        return self._opened.is_set() or len(self._received) < self._after

    async def wait(self) -> None:
        self.waits += 1
        self.held.set()
        await self._opened.wait()

    def open(self) -> None:
        self._opened.set()


async def start(cmd: str, tmp_path: Path, gate: Gate, received: bytearray) -> ExecProcess:
    return await ExecProcess.start(
        cmd, cwd=tmp_path, limits=LIMITS, on_output=received.extend, room=gate
    )


async def test_a_held_reader_blocks_the_command_and_loses_no_byte(tmp_path: Path) -> None:
    received = bytearray()
    gate = Gate(received, after=MB)
    proc = await start(f"head -c {FLOOD} /dev/zero; echo done", tmp_path, gate, received)
    await asyncio.wait_for(gate.held.wait(), 10)
    await asyncio.sleep(0.5)  # time for it to read on, were it not held
    # Held: what was read stops short of the flood (the pipe and the terminal hold a
    # little more), and the command has not finished, blocked on its write.
    assert MB <= len(received) < 4 * MB
    assert not proc.done and gate.waits == 1
    gate.open()
    result = await asyncio.wait_for(proc.wait(), 20)
    assert result.reason is EndReason.EXITED and result.exit_code == 0
    assert len(received) == result.total_bytes == FLOOD + len(b"done\n")


@pytest.mark.parametrize(("stop", "reason"), [("interrupt", "interrupted"), ("kill", "killed")])
async def test_a_held_command_still_stops(tmp_path: Path, stop: str, reason: str) -> None:
    received = bytearray()
    gate = Gate(received, after=MB)
    proc = await start(f"head -c {FLOOD} /dev/zero", tmp_path, gate, received)
    await asyncio.wait_for(gate.held.wait(), 10)
    getattr(proc, stop)()
    # Never let go by the gate: the stop alone ends the call, and what the command left
    # in the pipe is drained, not waited on.
    result = await asyncio.wait_for(proc.wait(), 10)
    assert result.reason == reason
    assert len(received) == result.total_bytes < FLOOD


class BrokenRoom:
    """A room that always says "no room" and fails when waited on (Redis gone wrong)."""

    def __init__(self) -> None:
        self.waits = 0

    def ready(self) -> bool:
        return False

    async def wait(self) -> None:
        self.waits += 1
        raise RuntimeError("the owner's mark cannot be read")


async def test_a_broken_room_lets_the_command_run_without_asking_again(tmp_path: Path) -> None:
    received = bytearray()
    room = BrokenRoom()
    proc = await ExecProcess.start(
        f"head -c {MB} /dev/zero; echo done",
        cwd=tmp_path,
        limits=LIMITS,
        on_output=received.extend,
        room=room,
    )
    result = await asyncio.wait_for(proc.wait(), 20)
    assert result.reason is EndReason.EXITED
    assert len(received) == result.total_bytes == MB + len(b"done\n")
    assert room.waits == 1  # asked once, then left alone: no hold-and-fail spin
