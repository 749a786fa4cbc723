"""``ateam logs``, ``ateam attach`` and ``ateam ps`` in a project, as a docker or tmux user
types them, against real agents and a real Redis."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for

from .conftest import (
    START_TIMEOUT_S,
    AgentFactory,
    ConsoleFactory,
    ateam_cmd,
    attach_and_send,
    run_ateam,
    subprocess_env,
    write_project,
)

pytestmark = pytest.mark.integration


def test_logs_prints_the_last_lines_and_follows_what_is_added(
    tmp_path: Path, redis_url: str
) -> None:
    root = write_project(tmp_path / "proj", "proj", delay_ms=0)
    try:
        start = run_ateam("start", "zeus", "--redis", redis_url, cwd=root, timeout=60)
        assert start.returncode == 0, start.stdout + start.stderr
        log = root / ".ateam" / "agents" / "zeus" / "state" / "agent.log"
        # Stopped, so nothing else writes to its log: a stopped agent's log reads the same.
        stop = run_ateam("stop", "zeus", "--redis", redis_url, cwd=root)
        assert stop.returncode == 0, stop.stderr
        wait_for(lambda: "not restarting" in log.read_text(), START_TIMEOUT_S, "the last note")
        with log.open("a") as handle:  # lines of the agent's own, as it would append them
            handle.write("first marker\nsecond marker\n")

        whole = run_ateam("logs", "ze", cwd=root)
        last = run_ateam("logs", "zeus", "-n", "2", cwd=root)

        assert whole.returncode == 0, whole.stderr
        assert whole.stdout == log.read_text()
        assert last.stdout == "first marker\nsecond marker\n"

        follow = subprocess.Popen(
            ateam_cmd("logs", "zeus", "-f", "-n", "1"),
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.extend(follow.stdout or []), daemon=True)
        reader.start()
        try:
            wait_for(lambda: seen == ["second marker\n"], START_TIMEOUT_S, "the last line")
            with log.open("a") as handle:
                handle.write("added while followed\n")
            wait_for(lambda: "added while followed\n" in seen, START_TIMEOUT_S, "the new line")
        finally:
            follow.send_signal(signal.SIGINT)
            assert follow.wait(15) == 130  # Ctrl+C, as a shell reports it
            reader.join(5)
    finally:
        run_ateam("down", "--redis", redis_url, cwd=root, timeout=60)


def test_logs_of_an_agent_with_no_log_says_how_to_start_it(tmp_path: Path) -> None:
    root = write_project(tmp_path / "proj", "proj")

    done = run_ateam("logs", "zeus", cwd=root)

    assert done.returncode == 4 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("error [bad_request]: no log for proj/zeus on this host (")
    assert "`ateam start zeus`" in line


def test_attach_opens_the_console_attached_and_takes_over_when_asked(
    tmp_path: Path, start_agent: AgentFactory, start_console: ConsoleFactory, redis_url: str
) -> None:
    root = write_project(tmp_path / "proj", "proj", delay_ms=0)
    start_agent("proj/zeus", cwd=root)

    def attach(*args: str, text: str) -> Any:
        return run_ateam("attach", *args, "--no-ui", "--redis", redis_url, input=text, cwd=root)

    first = attach("ze", text="hello from attach\n")

    assert first.returncode == 0, first.stdout + first.stderr
    assert "[A:proj/zeus] echo: hello from attach" in first.stdout.splitlines()

    owner = start_console()
    attach_and_send(owner, "proj/zeus")
    refused = attach("zeus", text="not sent\n")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "ownership.denied" in refused.stdout + refused.stderr
    taken = attach("zeus", "--takeover", text="taken over\n")
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert "[A:proj/zeus] echo: taken over" in taken.stdout.splitlines()


def test_ps_puts_the_project_here_first_and_filters_on_request(
    tmp_path: Path, start_agent: AgentFactory, redis_url: str
) -> None:
    beta = write_project(tmp_path / "beta", "beta", agents=("ares", "apollo"))
    for agent in ("alpha/zeus", "beta/ares", "beta/apollo"):
        start_agent(agent)

    def ids(*args: str) -> list[str]:
        done = run_ateam("ps", "--json", *args, "--redis", redis_url, cwd=beta)
        assert done.returncode == 0, done.stderr
        return [row["id"] for row in json.loads(done.stdout)]

    assert ids() == ["beta/apollo", "beta/ares", "alpha/zeus"]
    assert ids("--all") == ["alpha/zeus", "beta/apollo", "beta/ares"]
    assert ids("--project") == ["beta/apollo", "beta/ares"]
    assert ids("--project", "alpha") == ["alpha/zeus"]
    table = run_ateam("ps", "--redis", redis_url, cwd=beta).stdout.splitlines()
    assert [line.split()[0] for line in table[1:]] == ["beta/apollo", "beta/ares", "alpha/zeus"]
    both = run_ateam("ps", "--all", "--project", "--redis", redis_url, cwd=beta)
    assert both.returncode == 4 and "--all" in both.stderr
