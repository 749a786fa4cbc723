"""The PTY runner behind ``os.exec``: live output, process groups, limits, exact bytes."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import re
import signal
import tracemalloc
from collections.abc import Iterable
from pathlib import Path

import pytest

from ateam._proc import pid_is_running
from ateam.errors import BadRequest, Code
from ateam.tools.exec_values import EndReason, ExecLimits, ExecResult, minimal_env
from ateam.tools.pty import ExecProcess, run_command
from tests._wait import async_wait_for

pytestmark = pytest.mark.timeout(30)

LIMITS = ExecLimits(timeout_s=20.0)
# Two background sleeps and the shell itself, each announcing its pid, then "ready".
FAMILY = 'sleep 1000 & echo "pid $!"; sleep 1000 & echo "pid $!"; echo "pid $$"; echo ready; '


class Output:
    """An ``on_output`` callback that keeps everything and lets a test wait for text."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.chunks = 0
        self._waiters: list[tuple[bytes, asyncio.Event]] = []

    def __call__(self, chunk: bytes) -> None:
        self.data += chunk
        self.chunks += 1
        for pattern, event in self._waiters:
            if pattern in self.data:
                event.set()

    async def wait_for(self, pattern: bytes, timeout: float = 10.0) -> None:
        event = asyncio.Event()
        self._waiters.append((pattern, event))
        if pattern in self.data:
            event.set()
        await asyncio.wait_for(event.wait(), timeout)

    @property
    def pids(self) -> list[int]:
        return [int(pid) for pid in re.findall(rb"pid (\d+)", self.data)]


async def all_dead(pids: Iterable[int], timeout: float = 5.0) -> bool:
    """True once every pid is gone (zombies count as gone); fails past ``timeout``.

    A process killed by a signal disappears asynchronously and nothing here can wait on
    a process that is not our child, so this polls with a deadline.
    """
    pending = set(pids)

    def settled() -> bool:
        pending.difference_update([pid for pid in pending if not pid_is_running(pid)])
        return not pending

    return await async_wait_for(settled, timeout, f"every process of {sorted(pending)} to die")


async def run(cmd: str, cwd: Path, limits: ExecLimits = LIMITS) -> tuple[ExecResult, Output]:
    out = Output()
    result = await asyncio.wait_for(
        run_command(cmd, cwd=cwd, limits=limits, on_output=out), limits.timeout_s + 10
    )
    return result, out


async def test_output_arrives_live(tmp_path: Path) -> None:
    out = Output()
    # "two" waits for a file only the test creates, so "one" is provably live.
    proc = await ExecProcess.start(
        "echo one; while [ ! -f go ]; do sleep 0.02; done; echo two",
        cwd=tmp_path,
        limits=LIMITS,
        on_output=out,
    )
    await out.wait_for(b"one")
    assert b"two" not in out.data
    assert not proc.done
    (tmp_path / "go").touch()
    result = await proc.wait()
    assert out.data == b"one\ntwo\n"
    assert result.exit_code == 0
    assert result.reason is EndReason.EXITED


async def test_runs_in_a_terminal_of_the_given_size(tmp_path: Path) -> None:
    out = Output()
    proc = await ExecProcess.start(
        "test -t 0 && test -t 1 && test -t 2 && echo tty; stty size",
        cwd=tmp_path,
        limits=LIMITS,
        on_output=out,
        cols=100,
        rows=30,
    )
    await proc.wait()
    assert out.data == b"tty\n30 100\n"


async def test_own_session_and_process_group(tmp_path: Path) -> None:
    out = Output()
    proc = await ExecProcess.start(
        'echo "pid $$"; ps -o pgid=,sid= -p $$', cwd=tmp_path, limits=LIMITS, on_output=out
    )
    assert proc.pgid == proc.pid
    assert proc.pgid != os.getpgrp()
    await proc.wait()
    pgid, sid = (int(field) for field in out.data.split(b"\n")[1].split())
    assert out.pids == [proc.pid]
    assert pgid == sid == proc.pid


async def test_cwd_is_honoured(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    result, out = await run("pwd -P", tmp_path / "sub")
    assert out.data == f"{(tmp_path / 'sub').resolve()}\n".encode()
    assert result.exit_code == 0


async def test_missing_cwd_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="does not exist") as missing:
        await run("echo hi", tmp_path / "nowhere")
    assert missing.value.code == Code.BAD_REQUEST
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadRequest, match="not a directory"):
        await run("echo hi", tmp_path / "file")


async def test_what_would_break_the_forked_child_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="NUL"):
        await run("echo \0", tmp_path)
    with pytest.raises(BadRequest, match="environment"):
        await run_command("true", cwd=tmp_path, limits=LIMITS, on_output=Output(), env={"A=B": "1"})


def test_minimal_env_keeps_only_the_basics() -> None:
    base = {"PATH": "/p", "HOME": "/h", "TERM": "dumb", "API_KEY": "s3cret", "OTHER": "o"}
    assert minimal_env(ExecLimits(), base) == {
        "PATH": "/p",
        "HOME": "/h",
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
    }
    allowed = minimal_env(ExecLimits(env_allow=("OTHER", "MISSING")), {**base, "LANG": "de"})
    assert allowed == {
        "PATH": "/p",
        "HOME": "/h",
        "LANG": "de",
        "TERM": "xterm-256color",
        "OTHER": "o",
    }
    inherited = minimal_env(ExecLimits(inherit_env=True), {**base, "COLUMNS": "80"})
    assert inherited == {**base, "LANG": "C.UTF-8", "TERM": "xterm-256color"}


@pytest.mark.parametrize(
    ("limits", "visible"),
    [
        (ExecLimits(), False),
        (ExecLimits(env_allow=("ATEAM_TEST_SECRET",)), True),
        (ExecLimits(inherit_env=True), True),
    ],
)
async def test_agent_environment_is_not_leaked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limits: ExecLimits, visible: bool
) -> None:
    monkeypatch.setenv("ATEAM_TEST_SECRET", "hunter2")
    _, out = await run('echo "[${ATEAM_TEST_SECRET:-unset}] $TERM"', tmp_path, limits)
    expected = "hunter2" if visible else "unset"
    assert out.data == f"[{expected}] xterm-256color\n".encode()


async def test_exit_code(tmp_path: Path) -> None:
    result, _ = await run("echo bye; exit 3", tmp_path)
    assert (result.exit_code, result.signal, result.reason) == (3, None, EndReason.EXITED)
    assert result.text_for_model() == "bye\n[exit code 3]"


async def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    result, out = await run(FAMILY + "wait", tmp_path, ExecLimits(timeout_s=1.0))
    assert result.reason is EndReason.TIMEOUT
    assert result.signal == signal.SIGKILL
    assert result.exit_code is None
    assert "timed out" in result.text_for_model()
    assert len(out.pids) == 3
    assert await all_dead(out.pids)


async def test_interrupt_stops_the_whole_group(tmp_path: Path) -> None:
    out = Output()
    proc = await ExecProcess.start(FAMILY + "wait", cwd=tmp_path, limits=LIMITS, on_output=out)
    await out.wait_for(b"ready")
    proc.interrupt()
    result = await asyncio.wait_for(proc.wait(), 10)
    assert result.reason is EndReason.INTERRUPTED
    assert result.signal == signal.SIGINT
    assert await all_dead(out.pids)


async def test_interrupt_escalates_when_ignored(tmp_path: Path) -> None:
    out = Output()
    proc = await ExecProcess.start(
        "trap '' INT TERM; echo ready; sleep 1000", cwd=tmp_path, limits=LIMITS, on_output=out
    )
    await out.wait_for(b"ready")
    proc.interrupt()
    result = await asyncio.wait_for(proc.wait(), 10)
    assert result.reason is EndReason.INTERRUPTED
    assert result.signal == signal.SIGKILL  # SIGINT and SIGTERM were ignored


async def test_kill_stops_the_whole_group_at_once(tmp_path: Path) -> None:
    out = Output()
    proc = await ExecProcess.start(
        "trap '' INT TERM; " + FAMILY + "wait", cwd=tmp_path, limits=LIMITS, on_output=out
    )
    await out.wait_for(b"ready")
    proc.kill()
    result = await asyncio.wait_for(proc.wait(), 5)
    assert (result.reason, result.signal) == (EndReason.KILLED, signal.SIGKILL)
    assert await all_dead(out.pids)


async def test_cancelling_the_caller_kills_the_group(tmp_path: Path) -> None:
    out = Output()
    task = asyncio.create_task(
        run_command(FAMILY + "wait", cwd=tmp_path, limits=LIMITS, on_output=out)
    )
    await out.wait_for(b"ready")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(out.pids) == 3
    assert await all_dead(out.pids)


async def test_background_job_neither_holds_the_call_nor_survives(tmp_path: Path) -> None:
    result, out = await run('sleep 1000 & echo "pid $!"; echo done', tmp_path)
    assert result.exit_code == 0
    assert result.tail.endswith(b"done\n")
    assert await all_dead(out.pids)


async def test_detached_job_that_ignores_hangup_does_not_survive(tmp_path: Path) -> None:
    # The kernel's SIGHUP at the shell's exit misses it, and it does not hold the terminal
    # open, so only the group kill at the end stops it.
    cmd = "trap '' HUP; sleep 1000 </dev/null >/dev/null 2>&1 & echo \"pid $!\""
    result, out = await run(cmd, tmp_path)
    assert result.exit_code == 0
    assert await all_dead(out.pids)


async def test_job_in_a_group_of_its_own_is_swept_with_the_session(tmp_path: Path) -> None:
    # With job control on, the background job gets its own process group.
    result, out = await run('set -m; sleep 1000 & echo "pid $!"', tmp_path)
    assert result.exit_code == 0
    assert await all_dead(out.pids)


async def test_process_in_a_new_session_cannot_hold_the_call(tmp_path: Path) -> None:
    result, out = await run('setsid sleep 1000 & echo "pid $!"; echo done', tmp_path)
    try:
        assert result.exit_code == 0
        assert result.tail.endswith(b"done\n")
    finally:
        for pid in out.pids:  # it left our control by design; tidy up after it
            os.kill(pid, signal.SIGKILL)


async def test_cpu_limit(tmp_path: Path) -> None:
    result, _ = await run("while :; do :; done", tmp_path, ExecLimits(timeout_s=20, cpu_s=1))
    assert result.reason is EndReason.CPU_LIMIT
    assert result.signal == signal.SIGXCPU
    assert "CPU time limit" in result.text_for_model()


async def test_binary_output_is_byte_exact(tmp_path: Path) -> None:
    # ONLCR is off, so even b"\n" inside the data comes through untranslated.
    data = random.Random(7).randbytes(100_000)
    assert b"\n" in data
    (tmp_path / "blob").write_bytes(data)
    result, out = await run("cat blob", tmp_path, ExecLimits(output_limit=200_000))
    assert result.total_bytes == len(data)
    assert hashlib.sha256(out.data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert result.tail == data
    assert not result.truncated


async def test_escapes_and_line_ends_pass_unchanged(tmp_path: Path) -> None:
    _, out = await run(r"printf '\033[31mred\033[0m\nnext\r\nbad \377\376'", tmp_path)
    assert out.data == b"\x1b[31mred\x1b[0m\nnext\r\nbad \xff\xfe"


async def test_last_output_is_never_lost(tmp_path: Path) -> None:
    for _ in range(5):
        result, out = await run("head -c 1000000 /dev/zero | tr '\\0' q", tmp_path)
        assert result.total_bytes == len(out.data) == 1_000_000


async def test_tail_is_truncated_with_a_note(tmp_path: Path) -> None:
    result, out = await run("head -c 204800 /dev/zero | tr '\\0' x", tmp_path)
    assert result.total_bytes == len(out.data) == 204_800
    assert result.truncated
    assert result.tail == b"x" * 65_536
    text = result.text_for_model()
    assert text.startswith("[output truncated: showing the last 65536 of 204800 bytes]\n")
    assert text.endswith("\n[exit code 0]")


def test_truncated_tail_does_not_start_with_half_a_character() -> None:
    tail = "é".encode()[1:] + "ok ü".encode()
    result = ExecResult(0, None, EndReason.EXITED, 0.1, 1000, tail, True)
    assert "\ufffd" not in result.text_for_model()
    assert "ok ü\n[exit code 0]" in result.text_for_model()


async def test_memory_stays_bounded_by_the_output_limit(tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        result = await run_command(
            "head -c 16000000 /dev/zero",
            cwd=tmp_path,
            limits=ExecLimits(output_limit=64 * 1024),
            on_output=lambda _: None,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.total_bytes == 16_000_000
    assert peak < 2_000_000


async def test_no_zombie_and_no_descriptor_left(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    pids = []
    for _ in range(3):
        out = Output()
        proc = await ExecProcess.start("echo hi", cwd=tmp_path, limits=LIMITS, on_output=out)
        pids.append(proc.pid)
        await proc.wait()
    assert len(os.listdir("/proc/self/fd")) == before
    assert all(map(reaped, pids))


def reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


async def test_output_goes_through_a_relay_of_its_own_that_is_reaped(tmp_path: Path) -> None:
    # A terminal buffers 20 KiB: a relay drains it into a large pipe, so the command
    # writes on while the agent works. It sits outside the command's group and session
    # (the group kill must not cut the output short), and is gone with the call.
    out = Output()
    cmd = "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo END"
    proc = await ExecProcess.start(cmd, cwd=tmp_path, limits=LIMITS, on_output=out)
    relay = proc.relay_pid
    assert relay is not None and pid_is_running(relay)
    assert Path(f"/proc/{relay}/comm").read_text().strip() == "cat"  # noqa: ASYNC240
    assert os.getsid(relay) not in (os.getsid(0), proc.pid)
    result = await proc.wait()
    assert result.exit_code == 0
    assert bytes(out.data) == b"x" * 3_000_000 + b"\nEND\n"
    assert proc.relay_pid is None
    assert not Path(f"/proc/{relay}").exists()  # noqa: ASYNC240 - reaped, not a zombie


async def test_a_relay_killed_mid_command_stalls_nothing(tmp_path: Path) -> None:
    # Without the relay nobody would read the terminal, and the command would block on
    # its next write until the timeout. The master is read directly instead: at most
    # what the relay had read and not yet written (one terminal read, 4 KiB) is lost.
    out = Output()
    cmd = "echo first; sleep 0.3; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo END"
    proc = await ExecProcess.start(cmd, cwd=tmp_path, limits=LIMITS, on_output=out)
    await out.wait_for(b"first")
    assert proc.relay_pid is not None
    os.kill(proc.relay_pid, signal.SIGKILL)
    result = await proc.wait()
    assert result.reason is EndReason.EXITED and result.exit_code == 0
    assert out.data.endswith(b"x\nEND\n")
    assert len(out.data) >= len(b"first\n") + 3_000_000 - 4096
