"""The real ``ateam console`` in panes mode on an 80x24 pseudo-terminal, with a real agent.

What the console draws is fed to a terminal emulator (pyte), so the test reads the
screen a user would see, row by row, rather than the escape sequences that paint it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pyte
import pytest

from .conftest import AgentFactory, run_ateam, subprocess_env, write_project

pytestmark = pytest.mark.integration

AGENT = "proj/zeus"
COLUMNS, ROWS = 80, 24
TIMEOUT_S = 20.0
SAID = "please repeat this sentence, which needs most of a terminal that is eighty columns wide"


class Terminal:
    """A console on a pty of ``COLUMNS`` x ``ROWS``, its output drawn by a terminal emulator."""

    def __init__(self, redis_url: str, cwd: Path, columns: int = COLUMNS, rows: int = ROWS) -> None:
        self.screen = pyte.Screen(columns, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "ateam", "console", "--redis", redis_url],
            cwd=str(cwd),
            env=subprocess_env(TERM="xterm-256color", COLUMNS=str(columns), LINES=str(rows)),
            dimensions=(rows, columns),
            timeout=TIMEOUT_S,
        )

    def rows(self) -> list[str]:
        return list(self.screen.display)

    def text(self) -> str:
        return "\n".join(self.rows())

    def wait_until(self, test: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not test():
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {what} on the screen:\n{self.text()}")
            try:
                self.stream.feed(self.child.read_nonblocking(65536, timeout=0.2))
            except pexpect.TIMEOUT:
                pass
            except pexpect.EOF:
                raise AssertionError(f"the console exited before {what}:\n{self.text()}") from None

    def wait_for(self, text: str) -> None:
        self.wait_until(lambda: text in self.text(), repr(text))

    def send(self, keys: str) -> None:
        self.child.send(keys)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def terminal(own_redis: Any, redis_url: str, tmp_path: Path) -> Iterator[Terminal]:
    console = Terminal(redis_url, tmp_path)
    yield console
    console.close()


def test_at_80x24_the_attached_stream_is_not_cut_to_a_narrow_column(
    terminal: Terminal, start_agent: AgentFactory, tmp_path: Path
) -> None:
    start_agent(AGENT, cwd=write_project(tmp_path / "proj", "proj", delay_ms=1))
    terminal.wait_for("F1 for agents")  # connected, drawn full-screen
    terminal.send("/attach zeus\r")
    terminal.wait_for(f"{AGENT} · idle · writer")
    terminal.send(SAID + "\r")
    answer = f"echo: {SAID}"
    # Wrapped at the stream's width, the answer's first row holds most of the terminal.
    terminal.wait_until(lambda: any(answer[:60] in row for row in terminal.rows()), "the echo")
    rows = terminal.rows()
    first = next(row for row in rows if answer[:60] in row)
    assert len(first.strip(" │")) >= 70, rows
    screen = "\n".join(rows)
    # Nothing essential is cut: the agent and its state, the way back to the side
    # panes, the command bar and the keys.
    assert f"{AGENT} · " in screen and "F3 agents · tails" in screen
    assert "f3 side panes" in screen.lower()
    assert "message for proj/zeus" in screen
    # F3 brings the agent list back; the attached agent is in it.
    terminal.send("\x1bOR")  # F3
    terminal.wait_until(lambda: "agents (1)" in terminal.text(), "the agent list")
    terminal.send("\x11")  # Ctrl+Q
    terminal.child.expect(pexpect.EOF, timeout=TIMEOUT_S)
    terminal.child.close()
    assert terminal.child.exitstatus == 0


def test_at_200x50_the_side_panes_stay_beside_a_wide_stream(
    own_redis: Any, redis_url: str, start_agent: AgentFactory, tmp_path: Path
) -> None:
    start_agent(AGENT, cwd=write_project(tmp_path / "proj", "proj", delay_ms=1))
    wide = Terminal(redis_url, tmp_path, columns=200, rows=50)
    try:
        wide.wait_until(lambda: "agents (1)" in wide.text(), "the agent list, unasked")
        wide.send("/attach zeus\r")
        wide.wait_for(f"{AGENT} · idle · writer")
        said = SAID + " " + SAID  # longer than the stream at 80 columns, not at 200
        wide.send(said + "\r")
        answer = f"echo: {said}"
        wide.wait_until(lambda: any(answer[:120] in row for row in wide.rows()), "the echo")
        assert "agents (1)" in wide.text()  # the list is still beside it
        wide.send("\x11")  # Ctrl+Q
        wide.child.expect(pexpect.EOF, timeout=TIMEOUT_S)
    finally:
        wide.close()


def test_a_piped_console_suggests_console_commands(
    own_redis: Any, redis_url: str, tmp_path: Path
) -> None:
    done = run_ateam("console", "--no-ui", "--redis", redis_url, input="/attach ghost\n")
    assert done.returncode == 4, done.stderr
    (line,) = [text for text in done.stdout.splitlines() if text.startswith("error [")]
    assert line == (
        "error [agent.not_found]: no agent 'ghost' on this bus — "
        "/ps lists the agents on this bus, /agents the configured ones"
    )
