"""The first hour: the README and the example's README, followed in order as a new user would.

A clean home, a bare environment (``HOME``, ``PATH``, ``LANG`` and nothing else: no
``ATEAM_*``, no ``XDG_RUNTIME_DIR``), a copy of the checkout's ``examples/`` and its
``.venv`` (installing is left aside: it is the one thing CI itself does first). Every
command of the READMEs' shell blocks runs as it is written, and its output is checked;
the consoles the READMEs show are driven on a pseudo-terminal, the panes console at
80x24 read through a terminal emulator. The last check compares the commands that ran
with the READMEs' own blocks, so a README that changes without this walk fails here.

Each point of the first-hour work has its own tests beside this one: the verbs in
``test_cli_lifecycle.py`` and ``test_cli_json.py``, failures in ``test_failures_visible.py``,
the console at 80x24 and 200x50 in ``test_console_fit.py``, ``init --example`` in
``test_init.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.cookiejar import CookieJar
from pathlib import Path
from typing import TextIO

import pexpect
import pyte
import pytest

from tests._wait import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
READMES = (REPO / "README.md", REPO / "examples" / "hello" / "README.md")
VENV = Path(sys.executable).parent.parent
"""The venv the tests run in: the checkout's ``.venv`` a new user's install made."""
TIMEOUT_S = 30.0
HELLO = ("hello/ares", "hello/hera", "hello/zeus")
TASK_ID = re.compile(r"q-\d+-\d+")

ASIDE = (
    # Installing, and the clients that are not ateam: what a new machine does before ateam
    # runs, or another program's own set-up. ateam's side of each is walked below.
    re.compile(r"^python3 -m venv "),
    re.compile(r"pip install "),
    re.compile(r"^npm install "),
    re.compile(r"^claude /login$"),
    re.compile(r"^\.ci/run$"),
    re.compile(r"^claude mcp add "),
)


def readme_commands() -> list[str]:
    """Every command of the READMEs' ``sh`` and ``console`` blocks, in order, split at ``&&``.

    A ``console`` block's commands are its ``$ `` lines; a trailing ``# comment`` is not
    part of a command. Installs and other programs' set-up (:data:`ASIDE`) are left out.
    """
    found: list[str] = []
    for readme in READMES:
        block: str | None = None
        for line in readme.read_text(encoding="utf-8").splitlines():
            if line.startswith("```"):
                block = line[3:].strip() if block is None else None
                continue
            if block == "console" and line.startswith("$ "):
                line = line[2:]
            elif block != "sh":
                continue
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            for part in command.split(" && "):
                if part and not any(pattern.search(part) for pattern in ASIDE):
                    found.append(part.strip())
    return found


# --- the user's machine ------------------------------------------------------------------


@dataclass
class User:
    """A new user: a clean home, a bare environment, a checkout with its installed venv."""

    home: Path
    checkout: Path
    cwd: Path
    ran: list[str] = field(default_factory=list)
    """Each README command, as written, in the order it ran."""

    @property
    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            # No /usr/local/bin: a coding agent installed there must not change the walk.
            "PATH": f"{VENV / 'bin'}:/usr/bin:/bin",
            "LANG": "C.UTF-8",
        }

    def run(
        self, command: str, *, code: int = 0, stdin: str = "", timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a README command as a shell would, in the current directory."""
        self.ran.append(command)
        return self.shell(command, code=code, stdin=stdin, timeout=timeout)

    def shell(
        self, command: str, *, code: int = 0, stdin: str = "", timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """A command the user types that is not one of the READMEs' (a check, a cleanup)."""
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        said = f"$ {command}\n{done.stdout}{done.stderr}"
        assert done.returncode == code, said
        assert "Traceback" not in done.stderr, said
        return done

    def cd(self, where: str) -> None:
        self.ran.append(f"cd {where}")
        self.cwd = (self.cwd / where).resolve()

    def spawn(self, command: str, *, columns: int = 200, rows: int = 50) -> pexpect.spawn:
        return pexpect.spawn(
            "bash",
            ["-c", command],
            cwd=str(self.cwd),
            env={**self.env, "TERM": "xterm-256color"},
            dimensions=(rows, columns),
            timeout=TIMEOUT_S,
            encoding="utf-8",
            codec_errors="replace",
        )

    def ps(self) -> dict[str, list[str]]:
        """``ateam ps --all`` as rows: agent id → its columns."""
        table = self.shell(f"{VENV}/bin/ateam ps --all").stdout.splitlines()[1:]
        return {row.split()[0]: row.split() for row in table if row.strip()}


@pytest.fixture
def user(tmp_path: Path) -> Iterator[User]:
    home = tmp_path / "home"
    home.mkdir()
    checkout = tmp_path / "ateam"
    checkout.mkdir()
    subprocess.run(["cp", "-r", str(REPO / "examples"), str(checkout)], check=True)
    (checkout / ".venv").symlink_to(VENV)
    walker = User(home, checkout, checkout)
    yield walker
    # What a user leaves running is stopped: every project's agents, then the server.
    walker.cwd = checkout
    for project in ("examples/hello", "myproj", "mycoder"):
        if (checkout / project / ".ateam").is_dir():
            subprocess.run(
                [f"{VENV}/bin/ateam", "down", project],
                cwd=checkout,
                env=walker.env,
                capture_output=True,
                timeout=60,
            )
    subprocess.run(
        [f"{VENV}/bin/ateam", "server", "stop"],
        env=walker.env,
        capture_output=True,
        timeout=60,
    )


# --- consoles ---------------------------------------------------------------------------


class Screen:
    """A panes console on a pty, its output drawn by a terminal emulator (pyte)."""

    def __init__(self, child: pexpect.spawn, columns: int, rows: int) -> None:
        self.child = child
        self.screen = pyte.Screen(columns, rows)
        self.stream = pyte.Stream(self.screen)

    def text(self) -> str:
        return "\n".join(self.screen.display)

    def wait_for(self, wanted: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while wanted not in self.text():
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {wanted!r}:\n{self.text()}")
            try:
                self.stream.feed(self.child.read_nonblocking(65536, timeout=0.2))
            except pexpect.TIMEOUT:
                pass


def plain(child: pexpect.spawn, line: str, *expected: str) -> None:
    """Type ``line`` into a plain console and wait for each expected text, in order."""
    child.sendline(line)
    for text in expected:
        child.expect_exact(text)


def wait_output(check: Callable[[], str], wanted: str, what: str) -> str:
    """Run ``check`` until its output holds ``wanted`` (a task the user just queued ends)."""
    seen: list[str] = []

    def holds() -> bool:
        seen[:] = [check()]
        return wanted in seen[0]

    wait_for(holds, TIMEOUT_S, what)
    return seen[0]


# --- the walk ---------------------------------------------------------------------------


def test_a_new_user_follows_the_readmes_and_every_command_does_what_they_say(
    user: User,
) -> None:
    top_readme(user)
    example_readme(user)
    # Every command the READMEs show ran, in their order: a README that changes without
    # this walk (a new command, a changed one) fails here.
    assert user.ran == readme_commands()


def top_readme(user: User) -> None:
    # "Two commands": the first starts the example team and opens the console. On a
    # terminal that is the panes console, here at the default 80x24.
    up = user.spawn(".venv/bin/ateam up examples/hello", columns=80, rows=24)
    user.ran.append(".venv/bin/ateam up examples/hello")
    for agent in HELLO:
        up.expect_exact(f"{agent}: started (pid ")
    screen = Screen(up, 80, 24)
    screen.wait_for("F1 for agents")
    up.send("/attach hello/zeus\r")
    screen.wait_for("hello/zeus · idle · writer")
    up.send("hello there\r")
    screen.wait_for("echo: hello there")
    up.send("\x11")  # Ctrl+Q
    up.expect(pexpect.EOF)
    up.close()
    assert up.exitstatus == 0
    rows = user.ps()
    assert {agent: rows[agent][1] for agent in HELLO} == dict.fromkeys(HELLO, "idle")
    assert rows["hello/ares"][2] == "demo" and rows["hello/zeus"][2] == "echo"

    # "A 60-second tour", in the plain line mode (--no-ui), as the README shows it.
    tour = user.spawn(".venv/bin/ateam console --no-ui")
    tour.expect_exact("*** connected to ")
    plain(tour, "/ps", "hello/ares", "hello/hera", "hello/zeus")
    plain(tour, "/attach hello/zeus", "attached to hello/zeus as its writer")
    plain(tour, "hello there", "[A:hello/zeus] --- task q-", "[A:hello/zeus] echo: hello there")
    tour.expect(r"\[A:hello/zeus\] --- task q-\d+-\d+ done \(")
    plain(tour, "/history 4", "hello there")
    plain(tour, "/detach", "detached from hello/zeus")
    plain(tour, "/attach hello/ares", "attached to hello/ares as its writer")
    plain(
        tour,
        "look around",
        "[A:hello/ares] Let me look at the project first.",
        "[A:hello/ares] ▶ $ ls --color=always -la . && echo files listed",
        "[A:hello/ares] files listed",
        "[A:hello/ares] ◀ os.exec exit 0 (",
        "[A:hello/ares] The project is in place; the listing above is what I found.",
    )
    plain(tour, "/sys show", "─── base: ", "─── overlay: ", "─── toolbox (generated) ───")
    plain(tour, "# keep answers short", "overlay updated")
    plain(tour, "/quit")
    tour.expect(pexpect.EOF)
    tour.close()
    assert tour.exitstatus == 0
    overlay = user.checkout / "examples/hello/.ateam/agents/ares/system_overlay.md"
    assert "keep answers short" in overlay.read_text()

    # A project of one's own: init, then up from inside it, then a bare name.
    init = user.run(".venv/bin/ateam init myproj")
    assert "created project myproj" in init.stdout and "ateam up myproj" in init.stdout
    user.cd("myproj")
    started = user.run("../.venv/bin/ateam up .")  # no terminal: a plain console, then EOF
    assert "myproj/zeus: started (pid " in started.stdout
    sent = user.shell('ateam send zeus "hi"')  # "from anywhere inside"
    assert TASK_ID.fullmatch(sent.stdout.strip()), sent.stdout
    user.cwd = user.checkout  # the README's next commands run from the checkout again
    example = user.shell(".venv/bin/ateam init myref --example")
    assert "created project myref" in example.stdout
    assert (user.checkout / "myref/.ateam/tools.yaml").read_text().startswith("#")
    completion = user.shell(".venv/bin/ateam completion bash")
    assert "complete" in completion.stdout and "attach" in completion.stdout

    scriptable_verbs(user)
    working_as_a_team(user)
    own_coding_agents(user)
    console_in_a_browser(user)
    mcp_client(user)


def scriptable_verbs(user: User) -> None:
    ps = user.run(".venv/bin/ateam ps")
    assert ps.stdout.startswith("ID ") and {*HELLO, "myproj/zeus"} <= set(user.ps())
    sent = user.run('.venv/bin/ateam send hello/zeus "build it"')
    assert TASK_ID.fullmatch(sent.stdout.strip()), sent.stdout
    answer = user.run('.venv/bin/ateam send he "hi" --wait')
    assert answer.stdout == "echo: hi\n" and "queued on hello/hera" in answer.stderr

    def tail() -> str:
        return user.shell(".venv/bin/ateam tail hello/zeus --from 1").stdout

    wait_output(tail, "echo: build it", "zeus to answer 'build it'")
    replayed = user.run(".venv/bin/ateam tail hello/zeus --from 1").stdout
    assert "[A:hello/zeus] echo: hello there" in replayed and "echo: build it" in replayed
    logs = user.run(".venv/bin/ateam logs hello/zeus -n 5").stdout
    assert re.search(r"task q-\d+-\d+ done in ", logs), logs
    # The same log by a bare name and --project, and from inside another project.
    assert user.shell("ateam logs zeus --project hello -n 5").stdout == logs
    user.cwd = user.checkout / "myproj"
    assert user.shell("ateam logs hello/zeus -n 5").stdout == logs
    user.cwd = user.checkout

    stopped = user.run(".venv/bin/ateam stop hello/hera")
    assert "stopped hello/hera" in stopped.stdout
    left = user.ps()
    assert "hello/hera" not in left and {"hello/ares", "hello/zeus"} <= set(left)
    started = user.run(".venv/bin/ateam start hello/hera")
    assert "hello/hera: started (pid " in started.stdout
    assert "hello/hera" in user.ps()

    status = user.run(".venv/bin/ateam server status").stdout
    assert "running: yes" in status and str(user.home) in status

    down = user.run(".venv/bin/ateam down examples/hello").stdout
    assert all(f"{agent}: stopped" in down for agent in HELLO), down
    assert not set(HELLO) & set(user.ps()) and "myproj/zeus" in user.ps()
    back = user.run(".venv/bin/ateam up examples/hello --detach").stdout
    assert all(f"{agent}: started (pid " in back for agent in HELLO), back

    # The console from a script: each answer printed; exit 0 once every task ended.
    script = user.shell(
        "printf '/attach hello/zeus\\nhi\\n' | ateam console --no-ui", timeout=TIMEOUT_S
    )
    assert "[A:hello/zeus] echo: hi" in script.stdout


def working_as_a_team(user: User) -> None:
    team = user.spawn(".venv/bin/ateam console --no-ui")
    team.expect_exact("*** connected to ")
    plain(team, "/attach hello/zeus", "attached to hello/zeus")
    plain(
        team,
        "/context post --urgency attention --tags db the staging DB moved to db2",
        "posted c-",
        "to hello (project, attention)",
    )
    plain(team, "/context search where is the staging database", "the staging DB moved to db2")
    plain(team, "/tasks add write the parser --priority 5")
    team.expect(r"added t-([0-9a-f]+) to the board of hello")
    task = team.match.group(1)
    plain(team, "/quit")
    team.expect(pexpect.EOF)
    team.close()
    # A task id cut short, and the bare name of an agent of hello.
    claimed = user.shell(f".venv/bin/ateam tasks claim {task[:4]} --project hello --as zeus")
    assert "claimed" in claimed.stdout, claimed.stdout


def own_coding_agents(user: User) -> None:
    # Claude Code is not installed on this machine's PATH: the agent still starts, and
    # `ps` says at once what is missing, before any task.
    made = user.run("ateam init mycoder --runtime claude-code")
    assert "created project mycoder" in made.stdout
    user.run("ateam up mycoder")
    rows = user.ps()
    assert "runtime.missing" in " ".join(rows["mycoder/zeus"]), rows["mycoder/zeus"]
    runtimes = user.shell(".venv/bin/ateam runtimes --json")
    found = {row["id"]: row for row in json.loads(runtimes.stdout)}
    assert found["claude-code"]["found"] is False


def console_in_a_browser(user: User) -> None:
    # The README's default port may be taken on a shared machine: any free one here.
    user.ran.append(".venv/bin/ateam console --web")
    web = user.spawn(".venv/bin/ateam console --web --port 0")
    web.expect(r"(http://127\.0\.0\.1:\d+/\?token=\S+)")
    url = web.match.group(1)
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    with opener.open(url, timeout=TIMEOUT_S) as page:
        assert page.status == 200
    base = url.split("?")[0]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(base, timeout=TIMEOUT_S)
    assert refused.value.code == 401
    web.kill(signal.SIGINT)
    web.expect(pexpect.EOF)
    web.close()


def mcp_client(user: User) -> None:
    # An MCP client starts `ateam mcp` with an environment of its own: HOME and PATH.
    from mcp import ClientSession, StdioServerParameters, stdio_client

    command = shlex.split("ateam mcp --project myproj")
    params = StdioServerParameters(
        command=str(VENV / "bin" / command[0]),
        args=command[1:],
        env={"HOME": str(user.home), "PATH": "/usr/bin:/bin"},
        cwd=str(user.home),
    )

    async def ask(errlog: TextIO) -> dict[str, object]:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = await session.call_tool("agents_list", {})
            assert not listed.is_error, listed
            return dict(listed.structured_content or {})

    with (user.home / "mcp.stderr").open("w") as errlog:
        found = asyncio.run(asyncio.wait_for(ask(errlog), TIMEOUT_S))
    assert "myproj/zeus" in json.dumps(found), found


def example_readme(user: User) -> None:
    # "Run it": the agents run already (`up` leaves them alone) and the console opens.
    up = user.spawn("ateam up examples/hello", columns=80, rows=24)
    user.ran.append("ateam up examples/hello")
    for agent in HELLO:
        up.expect_exact(f"{agent}: running (pid ")
    Screen(up, 80, 24).wait_for("F1 for agents")
    up.send("\x11")
    up.expect(pexpect.EOF)
    up.close()
    assert up.exitstatus == 0
    # The same in plain line mode, with the commands the example's README lists.
    console = user.spawn("ateam up examples/hello --no-ui")
    console.expect_exact("*** connected to ")
    console.sendline("/ps")
    for agent, model in (("ares", "demo"), ("hera", "echo"), ("zeus", "echo")):
        console.expect(rf"hello/{agent}\s+idle\s+{model}")
    plain(console, "/attach hello/zeus", "attached to hello/zeus as its writer")
    plain(console, "hi there", "[A:hello/zeus] echo: hi there")
    plain(console, "/detach", "detached from hello/zeus")
    plain(console, "/tail hello/hera", "hello/hera")
    plain(console, "/quit")
    console.expect(pexpect.EOF)
    console.close()
    assert console.exitstatus == 0
    assert set(HELLO) <= set(user.ps())  # "the agents keep running"

    assert {*HELLO} <= set(user.run("ateam ps").stdout.split())
    sent = user.run('ateam send hello/hera "good morning"').stdout.strip()
    assert TASK_ID.fullmatch(sent), sent
    user.ran.append("ateam tail hello/hera --follow")
    follow = user.spawn("ateam tail hello/hera --follow")
    follow.expect_exact("echo: good morning")
    follow.sendintr()  # Ctrl+C to stop watching
    follow.expect(pexpect.EOF)
    follow.close()
    assert "Traceback" not in (follow.before or "")

    assert "stopped hello/zeus" in user.run("ateam stop hello/zeus").stdout
    assert "hello/zeus" not in user.ps() and "hello/hera" in user.ps()
    assert "hello/zeus: started (pid " in user.run("ateam start hello/zeus").stdout
    down = user.run("ateam down examples/hello").stdout
    assert all(f"{agent}: stopped" in down for agent in HELLO), down
    again = user.run("ateam up examples/hello --detach").stdout
    assert all(f"{agent}: started (pid " in again for agent in HELLO), again

    # "stopping and starting again loses nothing": zeus's log has every task it ran,
    # from before the stops and after.
    log = user.shell("ateam logs hello/zeus").stdout
    assert len(re.findall(r"task q-\d+-\d+ done in ", log)) >= 4, log
    assert log.count("serving (fence") >= 3, log
