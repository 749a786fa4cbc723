"""Fleet operations from the console (SPEC §6, §11): confirm first, then spawn, stop, erase.

Every test drives a real ``ateam console --no-ui`` through its stdin; a confirmation
reads the next line as its answer. Agents started by ``/spawn`` run under a detached
keeper in a session of their own, so the fixture below kills those process groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ateam.bus.bootstrap import issue
from ateam.bus.connection import RedisTarget, make_client
from ateam.bus.keys import Keys
from ateam.kb import KnowledgeBase
from tests._wait import wait_for

from .conftest import (
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    ConsoleFactory,
    ConsoleProcess,
    attach_and_send,
    history_turns,
    run_ateam,
    subprocess_env,
    write_project,
    write_waiting_project,
)

pytestmark = pytest.mark.integration

SPAWN_TIMEOUT_S = 45.0
"""/spawn waits up to 20 s for the agent; the console may need time to start as well."""
EXIT_BOOTSTRAP_REFUSED = 16


# --- helpers ------------------------------------------------------------------------------


def keepers(root: Path) -> list[int]:
    """Live keeper processes (``python -m ateam.fleet``) whose agent log lies under ``root``."""
    marks = {str(root), str(root.resolve())}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        words = [w.decode(errors="replace") for w in argv]
        if state == "Z" or "ateam.fleet" not in words:
            continue
        if any(mark in word for word in words for mark in marks):
            found.append(int(entry.name))
    return found


@pytest.fixture
def spawned(tmp_path: Path) -> Iterator[None]:
    """Kills, at teardown, every keeper (and its agent: same process group) of this test."""
    yield
    for pid in keepers(tmp_path):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def lines_from(console: ConsoleProcess, start: int) -> list[str]:
    return console.output().split("\n")[start:]


def mark(console: ConsoleProcess) -> int:
    """The number of lines the console printed so far: a starting point for later checks."""
    return len(console.output().split("\n"))


def wait_after(
    console: ConsoleProcess, start: int, match: str | Callable[[str], bool], timeout: float = 20
) -> str:
    """The first line at or after index ``start`` that contains (or satisfies) ``match``."""
    test = match if callable(match) else (lambda line: match in line)

    def found() -> str | None:
        return next((line for line in lines_from(console, start) if test(line)), None)

    try:
        return wait_for(found, timeout, f"{match!r}")
    except AssertionError:
        raise AssertionError(
            f"console never printed {match!r}; output:\n{console.output()}\n"
            f"stderr:\n{console.stderr_path.read_text(errors='replace')}"
        ) from None


def git(cwd: Path, *args: str) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
    )
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


def serving_entry(bus: Bus, agent: str, *, not_pid: int = 0) -> dict[str, Any] | None:
    entry = bus.entry(agent)
    if entry is None or entry.get("pid") == not_pid:
        return None
    return bus.serving(agent, int(entry["pid"]))


def is_json_list(line: str) -> bool:
    """``/ps --json`` output, not an agent's ``[A:…]`` line."""
    return line.startswith(("[{", "[]"))


def form_field(name: str, value: str) -> Callable[[str], bool]:
    """Matches the /offload form's line for field ``name`` showing ``value``."""
    pattern = re.compile(rf"(^|\s){re.escape(name)}\s+{re.escape(value)}(\s|$)")
    return lambda line: pattern.search(line) is not None


def bootstrap_keys(bus: Bus) -> list[bytes]:
    return list(bus.client.scan_iter(match="ateam:p:*:bootstrap:*"))


# --- /stop --------------------------------------------------------------------------------


def test_stop_does_nothing_unless_confirmed_then_stops_gracefully(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "p", "p")
    zeus = start_agent("p/zeus", cwd=root)
    console = start_console()
    assert console.session

    console.send("/stop p/zeus")
    console.send("no")
    console.wait_line("stop cancelled")
    assert zeus.running()
    assert bus.serving("p/zeus", zeus.pid)

    console.send("/stop zeus")  # not attached: the console owns it just for the call
    console.send("yes")
    console.wait_line("stopped p/zeus")
    assert zeus.wait_exit() == 0
    assert bus.entry("p/zeus") is None
    assert not bus.client.exists("ateam:owner:{p/zeus}")


# --- /clearhistory and /queue clear ---------------------------------------------------------


def test_clearhistory_needs_the_full_agent_id(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "p", "p", delay_ms=1)
    start_agent("p/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus", "remember this")
    console.wait_line("[A:p/zeus] echo: remember this")
    wait_for(lambda: len(history_turns(root)) >= 2, 10, "the turns to reach the history")

    for answer in ("no", "zeus", ""):
        start = mark(console)
        console.send("/clearhistory")
        console.send(answer)
        wait_after(console, start, "clearhistory cancelled")
    assert len(history_turns(root)) >= 2

    console.send("/clearhistory")
    console.send("p/zeus")
    console.wait_line("history of p/zeus cleared")
    assert history_turns(root) == []


def test_queue_clear_does_nothing_unless_confirmed(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "p", "p", delay_ms=200)
    start_agent("p/zeus", cwd=root)
    console = start_console()
    long_task = " ".join(f"w{i}" for i in range(100))  # ~20 s of streaming: it stays busy
    attach_and_send(console, "p/zeus", long_task, "second", "third")

    start = mark(console)
    console.send("/queue clear")
    console.send("no")
    wait_after(console, start, "queue clear cancelled")
    console.send("/queue")
    wait_after(console, start, "pending:")
    wait_after(console, start, lambda line: "pending:" in line and "'third'" in line)

    start = mark(console)
    console.send("/queue clear")
    console.send("yes")
    cleared = wait_after(console, start, lambda line: "cleared" in line and "item(s)" in line)
    assert int(cleared.split("cleared ")[1].split()[0]) >= 2
    console.send("/queue")
    wait_after(console, start, "current:")
    console.send("/interrupt")
    wait_after(console, start, "interrupting")
    assert not [line for line in lines_from(console, start) if line.startswith("pending:")]


# --- /spawn ---------------------------------------------------------------------------------


def test_spawn_asks_first_then_starts_a_kept_agent_that_answers(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    isolated_home: Path,
    spawned: None,
) -> None:
    root = write_project(tmp_path / "p", "p", delay_ms=1)
    start_agent("p/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus")

    console.send("/spawn ares --model slowecho")
    console.send("no")
    console.wait_line("spawn cancelled")
    assert keepers(tmp_path) == []
    assert bus.entry("p/ares") is None

    start = mark(console)
    console.send("/spawn ares --model slowecho")  # beside the attached p/zeus
    console.send("yes")
    wait_after(console, start, "spawned p/ares", timeout=SPAWN_TIMEOUT_S)
    entry = bus.entry("p/ares")
    assert entry is not None
    assert entry["cwd"] == str(root.resolve())
    assert entry["model"] == "slowecho"
    log = isolated_home / "projects" / "p" / "agents" / "ares" / "state" / "agent.log"
    assert log.exists()
    (keeper,) = keepers(tmp_path)
    assert os.getpgid(int(entry["pid"])) == keeper  # detached: a session of its own
    assert os.getsid(keeper) == keeper

    console.send("/attach p/ares")
    console.wait_line("attached to p/ares")
    console.send("hello ares")
    console.wait_line("[A:p/ares] echo: hello ares")

    # Supervised: a crashed agent comes back under its keeper.
    os.kill(int(entry["pid"]), signal.SIGKILL)
    wait_for(
        lambda: serving_entry(bus, "p/ares", not_pid=int(entry["pid"])),
        START_TIMEOUT_S,
        "the keeper to restart p/ares",
    )
    assert "restarting" in log.read_text()

    # /stop is final: the agent exits 0 and its keeper leaves with it.
    console.send("/stop p/ares")
    console.send("yes")
    console.wait_line("stopped p/ares", timeout=SPAWN_TIMEOUT_S)
    wait_for(lambda: keepers(tmp_path) == [], START_TIMEOUT_S, "the keeper to leave")


def test_up_down_also_stops_agents_a_console_started(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path,
    spawned: None,
) -> None:  # fmt: skip
    root = write_project(tmp_path / "p", "p", delay_ms=1)
    start_agent("p/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus")
    console.send("/spawn ares --model slowecho")  # unconfigured: state under ~/.ateam
    console.send("yes")
    console.wait_line("spawned p/ares", timeout=SPAWN_TIMEOUT_S)
    (keeper,) = keepers(tmp_path)
    pid = int((bus.entry("p/ares") or {})["pid"])

    down = run_ateam("up", str(root), "--down", env=subprocess_env(), timeout=60)

    assert down.returncode == 0, down.stdout + down.stderr
    assert f"p/ares: stopped (started by a console, keeper pid {keeper})" in down.stdout
    assert keepers(tmp_path) == []
    wait_for(lambda: bus.entry("p/ares") is None, 10, "p/ares to leave the registry")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_spawn_worktree_gives_the_agent_its_own_worktree_and_branch(
    start_console: ConsoleFactory, bus: Bus, tmp_path: Path, spawned: None
) -> None:
    repo = write_project(tmp_path / "repo", "w", delay_ms=1)
    (repo / "README.md").write_text("hello\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    worktree = repo.resolve() / ".ateam" / "worktrees" / "hermes"
    console = start_console()
    command = f"/spawn hermes --cwd {shlex.quote(str(repo))} --worktree --attach"

    console.send(command)
    console.send("no")
    console.wait_line("spawn cancelled")
    assert not worktree.exists()
    assert "ateam/hermes" not in git(repo, "branch", "--list")

    console.send(command)
    console.send("yes")
    console.wait_line("spawned w/hermes", timeout=SPAWN_TIMEOUT_S)
    entry = bus.entry("w/hermes")
    assert entry is not None
    assert entry["cwd"] == str(worktree)
    listing = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {worktree}\n" in listing
    block = listing.split(f"worktree {worktree}\n", 1)[1].split("\n\n", 1)[0]
    assert "branch refs/heads/ateam/hermes" in block
    assert (worktree / "README.md").read_text() == "hello\n"
    assert git(repo, "status", "--porcelain") == ""  # the main checkout stays clean

    console.wait_line("attached to w/hermes")  # --attach
    console.send("in the worktree")
    console.wait_line("[A:w/hermes] echo: in the worktree")


def test_spawn_worktree_outside_a_git_repository_is_refused(
    start_console: ConsoleFactory, tmp_path: Path, spawned: None
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    console = start_console()
    console.send(f"/spawn hermes --cwd {shlex.quote(str(plain))} --worktree")

    line = console.wait_line("error [")
    assert "error [bad_request]:" in line
    assert "not inside a git repository" in line
    assert console.wait_exit() == 4
    assert keepers(tmp_path) == []


# --- /offload -------------------------------------------------------------------------------


def test_offload_proposes_an_editable_spec_and_starts_the_agent_on_the_handoff(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path,
    spawned: None,
) -> None:  # fmt: skip
    root = write_project(tmp_path / "p", "p", delay_ms=100)
    zeus_dir = root / ".ateam" / "agents" / "zeus"
    (zeus_dir / "agent.yaml").write_text("model: slowecho\ntools:\n  allow: [plan.*]\n")
    (zeus_dir / "system_overlay.md").write_text("Always answer in haiku.\n")
    (root / "parser.md").write_text("# The parser\n\nA recursive descent parser for configs.\n")
    zeus = start_agent("p/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus", "/kb add parser.md")
    console.wait_line("kb agent: 1 document(s) ingested", timeout=60)
    long_task = "refactor the parser: " + "the recursive descent parser of the configs " * 8
    console.send(long_task)  # ~6 s of streaming at 100 ms a word: busy while we offload
    wait_for(lambda: (bus.entry("p/zeus") or {}).get("state") == "busy", 10, "zeus busy")

    console.send("/offload")
    start = mark(console)
    wait_after(console, start, "p/zeus proposes this agent to take over its work")
    wait_after(console, start, form_field("name", "zeus-2"))
    doc_id = wait_after(console, start, lambda line: "kb_ids" in line).split()[-1]
    assert doc_id.startswith("d-")  # the agent chose its document about the parser
    wait_after(console, start, lambda line: "handoff" in line and "sha256:" in line)
    console.send("name=../evil")  # refused, the form stays as it was
    wait_after(console, start, "error [bad_request]: invalid agent name '../evil'")
    console.send("name=hermes")  # the edit is applied
    wait_after(console, start, form_field("name", "hermes"))
    assert bus.entry("p/hermes") is None  # nothing starts before the confirmation
    console.send("yes")
    wait_after(console, start, "spawned p/hermes", timeout=SPAWN_TIMEOUT_S)
    wait_after(console, start, "p/zeus keeps working")

    hermes = root / ".ateam" / "agents" / "hermes"
    assert (hermes / "system_overlay.md").read_text() == "Always answer in haiku.\n"
    assert "plan.*" in (hermes / "agent.yaml").read_text()  # the parent's tools came along
    entry = bus.entry("p/hermes")
    assert entry is not None and entry["model"] == "slowecho"
    assert entry["cwd"] == str(root.resolve())

    def first_input() -> dict[str, Any] | None:
        path = hermes / "state" / "history.jsonl"
        if not path.exists():
            return None
        turns = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return next((t for t in turns if t.get("role") == "user"), None)

    turn = wait_for(first_input, 20, "p/hermes to take its first task")
    assert "offloaded by agent p/zeus" in turn["content"]
    assert "refactor the parser" in turn["content"]  # the handoff's task
    record = json.loads((zeus_dir / "state" / "handoff.json").read_text())
    assert record["checksum"].split(":")[1][:12] in turn["content"]
    with KnowledgeBase(hermes / "kb", scope="agent", project="p") as kb:
        (document,) = kb.documents()
    assert document["doc_id"] == doc_id
    assert document["source_agent"] == "p/zeus"

    # The original agent was not stopped: it finishes the task it was on.
    console.wait_line("[A:p/zeus] echo: refactor the parser", timeout=30)
    assert zeus.running()
    assert (bus.entry("p/zeus") or {}).get("state") in ("busy", "idle")


def test_offload_does_nothing_unless_confirmed(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path,
    spawned: None,
) -> None:  # fmt: skip
    root = write_project(tmp_path / "p", "p", delay_ms=1)
    start_agent("p/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus")
    for answer in ("no", ""):
        start = mark(console)
        console.send("/offload --name hermes")
        console.send(answer)
        wait_after(console, start, "offload cancelled")
    assert bus.entry("p/hermes") is None
    assert not (root / ".ateam" / "agents" / "hermes").exists()
    assert keepers(tmp_path) == []


def test_offload_worktree_puts_the_new_agent_in_its_own_worktree_and_branch(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path,
    spawned: None,
) -> None:  # fmt: skip
    repo = write_project(tmp_path / "repo", "w", delay_ms=1)
    (repo / "README.md").write_text("hello\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    start_agent("w/zeus", cwd=repo)
    console = start_console()
    attach_and_send(console, "w/zeus", "first steps")
    console.wait_line("[A:w/zeus] echo: first steps")

    start = mark(console)
    console.send("/offload --worktree --name apollo")
    wait_after(console, start, form_field("worktree", "yes"))
    console.send("yes")
    wait_after(console, start, "spawned w/apollo", timeout=SPAWN_TIMEOUT_S)
    worktree = repo.resolve() / ".ateam" / "worktrees" / "apollo"
    entry = bus.entry("w/apollo")
    assert entry is not None
    assert entry["cwd"] == str(worktree)
    listing = git(repo, "worktree", "list", "--porcelain")
    block = listing.split(f"worktree {worktree}\n", 1)[1].split("\n\n", 1)[0]
    assert "branch refs/heads/ateam/apollo" in block
    history = worktree / ".ateam" / "agents" / "apollo" / "state" / "history.jsonl"
    wait_for(
        lambda: history.exists() and "offloaded by agent w/zeus" in history.read_text(),
        20,
        "w/apollo to start on the handoff",
    )
    # Only the running zeus's own state is new in the main checkout, not the new agent.
    changes = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert changes and all("agents/zeus/state/" in line for line in changes)


def test_offload_remote_prints_a_token_whose_agent_starts_on_the_handoff(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path,
    isolated_home: Path,
) -> None:  # fmt: skip
    root = write_project(tmp_path / "p", "p", delay_ms=1)
    start_agent("p/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus", "plan the release")
    console.wait_line("[A:p/zeus] echo: plan the release")

    start = mark(console)
    console.send("/offload --remote --name remote1")
    console.send("system_prompt=You review releases.")
    console.send("model=echo")  # the other host knows only the built-in model
    console.send("yes")
    line = wait_after(console, start, lambda text: text.startswith("ateam agent "))
    words = shlex.split(line)
    token = words[words.index("--bootstrap") + 1]
    remote = tmp_path / "elsewhere"
    remote.mkdir()
    start_agent("p/remote1", cwd=remote, extra=("--bootstrap", token))
    state = isolated_home / "projects" / "p" / "agents" / "remote1"
    assert (state / "system_overlay.md").read_text() == "You review releases."
    history = state / "state" / "history.jsonl"
    wait_for(
        lambda: history.exists() and "offloaded by agent p/zeus" in history.read_text(),
        20,
        "p/remote1 to start on the handoff",
    )
    assert "plan the release" in history.read_text()


# --- bootstrap tokens -----------------------------------------------------------------------


def test_a_bootstrap_token_admits_one_agent_once(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    redis_url: str,
    tmp_path: Path,
) -> None:
    root = write_project(tmp_path / "p", "p", delay_ms=1)
    console = start_console()
    console.send("/spawn p/remote1 --remote --model slowecho")
    console.send("no")
    console.wait_line("spawn cancelled")
    assert bootstrap_keys(bus) == []

    console.send("/spawn p/remote1 --remote --model slowecho")
    console.send("yes")
    words = shlex.split(console.wait_line(lambda line: line.startswith("ateam agent ")))
    option = {words[i]: words[i + 1] for i in range(2, len(words) - 1, 2)}
    assert option["--project"] == "p"
    assert option["--name"] == "remote1"
    assert option["--redis"] == redis_url
    token = option["--bootstrap"]
    (key,) = bootstrap_keys(bus)
    assert key.decode().endswith(hashlib.sha256(token.encode()).hexdigest())
    assert token.encode() not in key + bus.client.get(key)  # type: ignore[operator]

    # --model is left out: the token's spec carries the model the console asked for.
    first = start_agent("p/remote1", cwd=root, extra=("--bootstrap", token))
    entry = bus.entry("p/remote1")
    assert entry is not None
    assert entry["model"] == "slowecho"
    assert bootstrap_keys(bus) == []  # deleted on use
    assert first.terminate() == 0

    again = start_agent("p/remote1", cwd=root, wait=False, extra=("--bootstrap", token))
    assert again.wait_exit() == EXIT_BOOTSTRAP_REFUSED
    assert "error [bootstrap.refused]" in again.stderr()
    assert "already used" in again.stderr()
    assert bus.entry("p/remote1") is None


def test_an_expired_or_foreign_bootstrap_token_is_refused(
    start_agent: AgentFactory, bus: Bus, redis_url: str, tmp_path: Path
) -> None:
    async def mint(agent_id: str, ttl_s: float) -> str:
        client = make_client(RedisTarget(redis_url, "test"))
        try:
            return await issue(client, Keys(), agent_id=agent_id, spec={}, ttl_s=ttl_s)
        finally:
            await client.aclose()

    expired = asyncio.run(mint("p/remote1", 0.3))
    wait_for(lambda: bootstrap_keys(bus) == [], 10, "the token to expire")
    late = start_agent("p/remote1", cwd=tmp_path, wait=False, extra=("--bootstrap", expired))
    assert late.wait_exit() == EXIT_BOOTSTRAP_REFUSED
    assert "error [bootstrap.refused]" in late.stderr()
    assert "expired" in late.stderr()

    foreign = asyncio.run(mint("p/other", 300))
    wrong = start_agent("p/remote1", cwd=tmp_path, wait=False, extra=("--bootstrap", foreign))
    assert wrong.wait_exit() == EXIT_BOOTSTRAP_REFUSED
    assert "issued for p/other, not p/remote1" in wrong.stderr()
    assert bus.entry("p/remote1") is None
    assert bootstrap_keys(bus) == []  # burnt by the wrong identity


# --- /ps --state ----------------------------------------------------------------------------


def test_ps_state_waiting_lists_only_waiting_agents(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = write_waiting_project(tmp_path / "s", "s")
    start_agent("s/zeus", cwd=root)
    start_agent("q/hera")
    console = start_console()
    attach_and_send(console, "s/zeus", "change it")
    wait_for(lambda: (bus.entry("s/zeus") or {}).get("state") == "waiting", 15, "s/zeus to wait")

    start = mark(console)
    console.send("/ps --state waiting --json")
    rows = json.loads(wait_after(console, start, is_json_list))
    assert [row["id"] for row in rows] == ["s/zeus"]

    start = mark(console)
    console.send("/ps --state waiting")
    header = wait_after(console, start, lambda line: line.startswith("ID "))
    index = start + lines_from(console, start).index(header)
    # The table is printed in one go: its rows follow the header with nothing between.
    console.send("/ps --state idle --json")
    rows = json.loads(wait_after(console, index, is_json_list))
    assert [row["id"] for row in rows] == ["q/hera"]
    table = [line for line in lines_from(console, index + 1) if not line.startswith("[")]
    assert table[0].startswith("s/zeus ")
    assert not any(line.startswith("q/hera ") for line in table)
