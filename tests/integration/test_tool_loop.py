"""The task loop with real tools (SPEC §5.4, §5.5): a scripted model drives ``os.exec``.

Each test runs a real ``ateam agent`` with the ``scripted`` provider and a real plain
console, and checks what a user would: the console's lines, the event stream, the
history file, and the processes left on the machine.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    group_alive,
    history_turns,
    write_scripted_project,
)

pytestmark = pytest.mark.integration


def exec_turn(cmd: str, text: str = "Running it.") -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": "os.exec", "args": {"cmd": cmd}}]}


def of_type(bus: Bus, agent: str, kind: str) -> list[tuple[int, dict[str, Any]]]:
    return [(off, body) for off, body in bus.events(agent) if body.get("type") == kind]


def output_bytes(bus: Bus, agent: str) -> bytes:
    data = b""
    for _, body in of_type(bus, agent, "tool.output"):
        data += body["bin"] if "bin" in body else body["text"].encode()
    return data


def test_a_scripted_build_runs_os_exec_in_a_pty_and_streams_it_live(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    # "built" waits for a file the test creates: the first line is provably live.
    cmd = (
        "test -t 1 && echo on-a-tty; echo compiling; "
        "while [ ! -f go ]; do sleep 0.05; done; echo built"
    )
    root = write_scripted_project(
        tmp_path / "b",
        "b",
        [exec_turn(cmd, "Running the build."), {"text": "The build printed: built."}],
    )
    start_agent("b/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "b/zeus", "build it")

    console.wait_line("▶ $ test -t 1")
    console.wait_line("compiling", timeout=10)
    # Live: the first line is on screen while the command is still running.
    assert not of_type(bus, "b/zeus", "tool.end")
    (root / "go").touch()
    console.wait_line(lambda line: "◀ os.exec exit 0" in line, timeout=15)
    console.wait_line("[A:b/zeus] The build printed: built.")

    lines = console.output().splitlines()
    order = [
        next(i for i, line in enumerate(lines) if needle in line)
        for needle in ("▶ $ test -t 1", "on-a-tty", "compiling", "built", "◀ os.exec exit 0",
                       "The build printed")
    ]  # fmt: skip
    assert order == sorted(order)

    events = bus.events("b/zeus")
    task = next(body for _, body in events if body.get("type") == "task.start")
    for _, body in events:
        if body["type"] in ("tool.start", "tool.output", "tool.end", "token", "task.end"):
            assert (body["task_id"], body["trace_id"]) == (task["task_id"], task["trace_id"])
    ((_, end),) = of_type(bus, "b/zeus", "tool.end")
    assert (end["exit_code"], end["ok"], end["name"]) == (0, True, "os.exec")

    turns = history_turns(root)
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant"]
    assert turns[1]["tool_calls"][0]["name"] == "os.exec"
    assert turns[2]["tool_call_id"] == turns[1]["tool_calls"][0]["id"]
    assert "on-a-tty" in turns[2]["content"] and "built" in turns[2]["content"]
    assert turns[3]["content"] == "The build printed: built."


def test_colours_invalid_utf8_and_binary_pass_through_without_breaking_anything(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    work = tmp_path / "c"
    (work / "somedir").mkdir(parents=True)
    binary = "printf 'bad:\\377\\376:\\n'; head -c 3000 /dev/urandom; echo; echo after-binary"
    root = write_scripted_project(
        work,
        "c",
        [exec_turn("ls --color=always"), {"text": "listed"}, exec_turn(binary), {"text": "done"}],
    )
    start_agent("c/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "c/zeus", "list", "binary")

    console.wait_line("[A:c/zeus] done", timeout=20)
    # ls coloured the directory: the escape sequence reached the console intact.
    colour_line = console.wait_line("somedir")
    assert re.search(r"\x1b\[[0-9;]*m", colour_line), repr(colour_line)
    raw = output_bytes(bus, "c/zeus")
    assert b"\x1b[" in raw and b"bad:\xff\xfe:" in raw
    assert any("bin" in body for _, body in of_type(bus, "c/zeus", "tool.output"))
    console.wait_line("after-binary")
    ends = bus.task_end_list("c/zeus")
    assert [e["ok"] for e in ends] == [True, True]
    # The registry says idle once the upkeep after the last task is done (a moment after
    # its task.end, longer on a loaded machine).
    wait_for(lambda: (bus.entry("c/zeus") or {}).get("state") == "idle", 10, "c/zeus idle")


@pytest.mark.parametrize(
    ("command", "error"), [("/interrupt", "interrupted"), ("/cancel --hard", "cancelled")]
)
def test_stopping_a_long_command_kills_its_whole_group_and_the_next_item_runs(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    command: str,
    error: str,
) -> None:
    # A child in the background, a grandchild detached by a subshell, and the leader.
    cmd = "sleep 1000 & (sleep 1000 &); echo pgid=$(ps -o pgid= $$ | tr -d ' '); sleep 1000; "
    root = write_scripted_project(tmp_path / "s", "s", [exec_turn(cmd), {"text": "next item ran"}])
    start_agent("s/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "s/zeus", "hang", "next")

    line = console.wait_line(lambda text: bool(re.search(r"pgid=\d+", text)), timeout=15)
    pgid = int(line.split("pgid=")[1])
    wait_for(lambda: len(group_alive(pgid)) >= 3, 10, "the command's processes to run")

    console.send(command)

    console.wait_line("[A:s/zeus] next item ran", timeout=15)
    assert group_alive(pgid) == []
    first, second = bus.task_end_list("s/zeus")
    assert (first["ok"], first["error"]) == (False, error)
    assert second["ok"] is True


def test_a_tool_not_in_tools_allow_is_refused_with_tool_denied(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    write = {"name": "fs.write", "args": {"path": "pwned.txt", "content": "x"}}
    root = write_scripted_project(
        tmp_path / "d",
        "d",
        [{"text": "Writing.", "tool_calls": [write]}, {"text": "I was refused."}],
    )
    start_agent("d/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "d/zeus", "write a file")

    console.wait_line("[A:d/zeus] I was refused.", timeout=15)
    console.wait_line(lambda line: "◀ fs.write failed [tool.denied]" in line)
    ((_, end),) = of_type(bus, "d/zeus", "tool.end")
    assert (end["ok"], end["code"]) == (False, "tool.denied")
    assert not (root / "pwned.txt").exists()
    tool_turn = next(t for t in history_turns(root) if t["role"] == "tool")
    assert "tool.denied" in tool_turn["content"]


def test_the_fs_battery_through_the_agent(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = tmp_path / "f"
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("whitelisted content\n")
    root.mkdir()
    (root / "etc-link").symlink_to("/etc")
    paths = [
        "../../etc/passwd",
        "etc-link/passwd",
        "/etc/passwd",
        "/dev/zero",
        str(shared / "notes.txt"),
    ]
    calls = [{"name": "fs.read", "args": {"path": p}} for p in paths]
    write_scripted_project(
        root,
        "f",
        [{"text": "Reading.", "tool_calls": calls}, {"text": "battery done"}],
        allow=("fs.*",),
        agent_yaml={"fs": {"whitelist": [str(shared)]}},
    )
    start_agent("f/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "f/zeus", "read things")
    console.wait_line("[A:f/zeus] battery done", timeout=15)

    ends = [body for _, body in of_type(bus, "f/zeus", "tool.end")]
    assert [e.get("code") for e in ends] == ["fs.denied"] * 4 + [None]
    assert ends[-1]["ok"] is True
    results = [t["content"] for t in history_turns(root) if t["role"] == "tool"]
    assert "whitelisted content" in results[-1]
    assert all("root:" not in text for text in results)


def test_a_secret_printed_by_a_tool_is_masked_in_events_logs_and_history(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    secret = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
    root = write_scripted_project(
        tmp_path / "r",
        "r",
        # The second line is not UTF-8, so it travels base64-encoded: masked all the same.
        [exec_turn(f"echo key={secret}; printf 'bin={secret} \\377\\n'"), {"text": "printed"}],
    )
    agent = start_agent("r/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "r/zeus", "show me the key")
    console.wait_line("[A:r/zeus] printed", timeout=15)

    raw = output_bytes(bus, "r/zeus")
    assert b"key=****" in raw and b"bin=**** \xff" in raw
    assert secret.encode() not in raw
    assert any("bin" in body for _, body in of_type(bus, "r/zeus", "tool.output"))
    everything = repr(bus.events("r/zeus"))
    assert secret not in everything
    history = (root / ".ateam/agents/zeus/state/history.jsonl").read_text()
    assert secret not in history and "key=****" in history
    log = agent.stderr()
    assert "key=****" in log and secret not in log
    assert secret not in console.output()


def test_the_hello_example_demo_agent_runs_its_tool_loop_offline(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    import shutil

    root = tmp_path / "hello"
    shutil.copytree(Path(__file__).parents[2] / "examples/hello/.ateam", root / ".ateam")
    start_agent("hello/ares", cwd=root)
    console = start_console()
    attach_and_send(console, "hello/ares", "look around")
    console.wait_line("[A:hello/ares] files listed", timeout=20)
    console.wait_line("the listing above is what I found", timeout=20)
    (end,) = bus.task_end_list("hello/ares")
    assert end["ok"] is True and end["iterations"] == 2
