"""The real ``ateam console --no-ui`` on a pseudo-terminal: prompt-toolkit input (SPEC §6).

On a terminal the plain console reads lines with prompt-toolkit, so TAB completes.
These tests type into it through pexpect and read what it draws. prompt-toolkit redraws
only what changed (TAB after ``/att`` writes just ``ach``), but when a line is sent it
draws it again whole, so each test checks the sent line as drawn (``> /attach …``,
escape sequences removed) and then what the console did with it.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from .conftest import AgentFactory, subprocess_env, write_project

pytestmark = pytest.mark.integration

AGENT = "proj/zeus"
TIMEOUT_S = 10.0
F1 = "\x1bOP"
_ESCAPES = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z]|[=>78])")
_UNFINISHED = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*|\][^\x07]*|[()])?\Z")
"""An escape sequence cut off at the end of a read; kept until the rest arrives."""
# The id as completed, not as in the "*** agent proj/zeus joined" banner.
COMPLETED_ID = re.compile(re.escape(AGENT) + r"(?! joined)")


class Screen:
    """A console on a pty; what it has drawn is kept as text without escape sequences."""

    def __init__(self, redis_url: str, cwd: Path) -> None:
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "ateam", "console", "--no-ui", "--redis", redis_url],
            cwd=str(cwd),
            # The pty does not answer cursor-position requests; tell prompt-toolkit so
            # instead of letting it wait for the answer and print a warning.
            env=subprocess_env(TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1"),
            dimensions=(40, 120),
            encoding="utf-8",
            codec_errors="replace",
            timeout=TIMEOUT_S,
        )
        self.text = ""
        self._held = ""

    def _read(self, timeout: float) -> None:
        chunk = self._held + self.child.read_nonblocking(4096, timeout=timeout)
        cut = _UNFINISHED.search(chunk)
        # Hold back a half-read escape so the text never grows then shrinks; offsets
        # into it stay valid between waits.
        self._held = cut.group() if cut else ""
        done = chunk[: cut.start()] if cut else chunk
        self.text += _ESCAPES.sub("", done).replace("\r", "")

    def wait_for(
        self, wanted: str | re.Pattern[str], *, after: int = 0, timeout: float = TIMEOUT_S
    ) -> int:
        """Read until ``wanted`` shows up past offset ``after`` of :attr:`text`; its end."""
        pattern = wanted if isinstance(wanted, re.Pattern) else re.compile(re.escape(wanted))
        deadline = time.monotonic() + timeout
        while True:
            found = pattern.search(self.text, after)
            if found is not None:
                return found.end()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"never saw {wanted!r} within {timeout:g}s; screen text:\n{self.text[after:]}"
                )
            try:
                self._read(min(remaining, 0.2))
            except pexpect.TIMEOUT:
                pass
            except pexpect.EOF:
                raise AssertionError(
                    f"console exited before {wanted!r}; screen text:\n{self.text[after:]}"
                ) from None

    def send(self, keys: str) -> None:
        self.child.send(keys)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def screen(own_redis: Any, redis_url: str, tmp_path: Path) -> Iterator[Screen]:
    """A console started in a directory holding ``my dir/notes.txt``."""
    work = tmp_path / "work"
    (work / "my dir").mkdir(parents=True)
    (work / "my dir" / "notes.txt").write_text("hello\n")
    console = Screen(redis_url, work)
    yield console
    console.close()


def _ready(screen: Screen, after: int = 0) -> int:
    """Wait for the connection banner and then the prompt."""
    return screen.wait_for(">", after=screen.wait_for("/help for commands", after=after))


def _start_zeus(start_agent: AgentFactory, tmp_path: Path) -> None:
    """Start the agent once the console runs: its id must come from the live registry."""
    start_agent(AGENT, cwd=write_project(tmp_path / "proj", "proj"))


def test_tab_completes_a_command_name(screen: Screen) -> None:
    at = _ready(screen)
    screen.send("/att")
    at = screen.wait_for("/att", after=at)
    screen.send("\t")
    at = screen.wait_for("ach", after=at)
    screen.send("\r")
    # The sent line, drawn whole, and the controller's answer to a bare "/attach".
    at = screen.wait_for("> /attach", after=at)
    screen.wait_for("usage: /attach ID", after=at)


def test_tab_completes_a_partial_agent_id(
    screen: Screen, start_agent: AgentFactory, tmp_path: Path
) -> None:
    at = _ready(screen)
    _start_zeus(start_agent, tmp_path)
    # "/att" TAB leaves "/attach " with its space, so "ze" is the argument; TAB
    # completes the bare name to the full id.
    screen.send("/att")
    at = screen.wait_for("/att", after=at)
    screen.send("\t")
    at = screen.wait_for("ach", after=at)
    screen.send("ze")
    at = screen.wait_for("ze", after=at)
    screen.send("\t")
    at = screen.wait_for(COMPLETED_ID, after=at)
    screen.send("\r")
    at = screen.wait_for(f"> /attach {AGENT}", after=at)
    at = screen.wait_for(f"*** attached to {AGENT} as its writer", after=at)
    screen.wait_for(f"{AGENT}>", after=at)  # the prompt names the attached agent


def test_tab_extends_lists_then_steps_like_a_shell(
    screen: Screen, start_agent: AgentFactory, tmp_path: Path
) -> None:
    at = _ready(screen)
    project = write_project(tmp_path / "proj", "proj", agents=("zeus", "zephyr"))
    start_agent(AGENT, cwd=project)
    start_agent("proj/zephyr", cwd=project)
    screen.wait_for("agent proj/zephyr joined", after=at)
    screen.send("/attach ze")
    at = screen.wait_for("/attach ze", after=at)
    screen.send("\t")  # what both ids share
    at = screen.wait_for("proj/ze", after=at)
    screen.send("\t")  # nothing more to add: both listed above the prompt
    listed = re.compile(r"proj/zephyr\s+proj/zeus")
    at = screen.wait_for(listed, after=at)
    screen.send("\t")  # then one per press
    at = screen.wait_for("proj/zephyr", after=at)
    screen.send("\r")
    screen.wait_for("*** attached to proj/zephyr as its writer", after=at)


def test_tab_completes_a_path_with_a_space_quoted(
    screen: Screen, start_agent: AgentFactory, tmp_path: Path
) -> None:
    at = _ready(screen)
    _start_zeus(start_agent, tmp_path)
    screen.send(f"/attach {AGENT}\r")
    at = screen.wait_for(f"{AGENT}>", after=screen.wait_for("as its writer", after=at))
    screen.send("/input ./my")
    at = screen.wait_for("./my", after=at)
    screen.send("\t")
    # The only match is a directory with a space: quoted the way shlex reads it back.
    completed = "'./my dir/'"
    at = screen.wait_for(f"/input {completed}", after=at)
    assert shlex.split(completed) == ["./my dir/"]
    screen.send("\r")
    # The echo model repeats its input: the agent received the real path.
    screen.wait_for(f"[A:{AGENT}] echo: ./my dir/", after=at)


def test_f1_palette_lists_agents_and_enter_attaches(
    screen: Screen, start_agent: AgentFactory, tmp_path: Path
) -> None:
    at = _ready(screen)
    _start_zeus(start_agent, tmp_path)
    screen.send(F1)
    at = screen.wait_for("/attach", after=at)
    at = screen.wait_for(COMPLETED_ID, after=at)  # the menu lists the agent
    screen.send("zeu")
    at = screen.wait_for("zeu", after=at)
    screen.send("\r")
    at = screen.wait_for(f"> /attach {AGENT}", after=at)
    screen.wait_for(f"*** attached to {AGENT} as its writer", after=at)


def test_ctrl_d_leaves_with_exit_code_0(screen: Screen) -> None:
    _ready(screen)
    screen.send("\x04")
    screen.child.expect(pexpect.EOF, timeout=TIMEOUT_S)
    screen.child.close()
    assert screen.child.exitstatus == 0, screen.text


def test_ctrl_c_asks_before_quitting_and_interrupts_when_attached(
    screen: Screen, start_agent: AgentFactory, tmp_path: Path
) -> None:
    at = _ready(screen)
    _start_zeus(start_agent, tmp_path)
    screen.send(f"/attach {AGENT}\r")
    at = screen.wait_for(f"{AGENT}>", after=screen.wait_for("as its writer", after=at))
    # Attached: Ctrl+C is /interrupt (the echo agent is idle, and says so).
    screen.send("\x03")
    at = screen.wait_for("agent is idle", after=at)
    screen.send("/detach\r")
    at = screen.wait_for(f"detached from {AGENT}", after=at)
    # Not attached: the first Ctrl+C only warns, the second leaves.
    screen.send("\x03")
    screen.wait_for("press Ctrl+C again", after=at)
    screen.send("\x03")
    screen.child.expect(pexpect.EOF, timeout=TIMEOUT_S)
    screen.child.close()
    assert screen.child.exitstatus == 0, screen.text


def test_ui_switches_plain_to_panes_and_back_live_staying_attached(
    screen: Screen, start_agent: AgentFactory, tmp_path: Path
) -> None:
    at = _ready(screen)
    _start_zeus(start_agent, tmp_path)
    screen.send(f"/attach {AGENT}\r")
    at = screen.wait_for(f"{AGENT}>", after=screen.wait_for("as its writer", after=at))

    screen.send("/ui panes off\r")  # already plain: nothing changes
    at = screen.wait_for("already in plain mode", after=at)

    screen.send("/ui panes on\r")
    # The full-screen console draws itself and attaches to the same agent again.
    at = screen.wait_for("F1 for agents", after=at, timeout=20)
    at = screen.wait_for(f"attached to {AGENT} as its writer", after=at, timeout=20)
    time.sleep(0.5)  # let the command bar take focus before typing into it

    screen.send("/ui panes off\r")
    at = screen.wait_for("/help for commands", after=at, timeout=20)
    at = screen.wait_for(f"*** attached to {AGENT} as its writer", after=at)
    at = screen.wait_for(f"{AGENT}>", after=at)  # prompt-toolkit reads lines again
    time.sleep(0.3)
    screen.send("still here\r")
    screen.wait_for(f"[A:{AGENT}] echo: still here", after=at)
