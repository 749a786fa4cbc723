"""``--json`` on the verbs that print data, bare names and prefixes, and CLI-worded errors,
through the real ``ateam`` command against real agents and a real Redis."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for

from .conftest import (
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    run_ateam,
    write_project,
)

pytestmark = pytest.mark.integration


def ok_json(done: Any) -> Any:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "proj", "proj", agents=("zeus", "hera", "hermes"), delay_ms=0)


def test_send_stop_and_ack_take_prefixes_and_print_json(
    project: Path, start_agent: AgentFactory, bus: Bus, redis_url: str
) -> None:
    start_agent("proj/zeus", cwd=project)
    start_agent("proj/hera", cwd=project)
    start_agent("proj/hermes", cwd=project)

    sent = ok_json(run_ateam("send", "ze", "hello", "--json", "--redis", redis_url, cwd=project))

    assert sent["agent"] == "proj/zeus" and sent["id"].startswith("q-")
    assert sent["created"] is True and sent["redacted"] == 0
    assert {"queued", "trace_id"} <= set(sent)
    end = wait_for(lambda: bus.task_ends("proj/zeus").get(sent["id"]), START_TIMEOUT_S)
    assert end["ok"] is True

    # A prefix of two names: one line, a stable code, the candidates; nothing sent.
    ambiguous = run_ateam("send", "he", "hi", "--redis", redis_url, cwd=project)
    assert ambiguous.returncode == 4 and ambiguous.stdout == ""
    assert ambiguous.stderr == (
        "error [name.ambiguous]: 'he' could be any of the agents of proj: proj/hera, proj/hermes; "
        "type more of the name\n"
    )

    acked = ok_json(run_ateam("ack", "herm", "--json", "--redis", redis_url, cwd=project))
    assert acked == {"agent": "proj/hermes", "alerts_cleared": 0, "exit_cleared": None}

    stopped = ok_json(
        run_ateam("stop", "herm", "hera", "--json", "--redis", redis_url, cwd=project)
    )
    assert [(row["id"], row["status"], row["error"]) for row in stopped] == [
        ("proj/hermes", "stopped", None),
        ("proj/hera", "stopped", None),
    ]
    assert bus.entry("proj/hera") is None and bus.entry("proj/hermes") is None


def test_an_owned_agent_refuses_send_with_the_cli_commands_to_use(
    project: Path, start_agent: AgentFactory, start_console: ConsoleFactory, redis_url: str
) -> None:
    start_agent("proj/zeus", cwd=project)
    console = start_console()
    attach_and_send(console, "proj/zeus")

    refused = run_ateam("send", "zeus", "hi", "--redis", redis_url, cwd=project)

    assert refused.returncode == 3
    [line] = refused.stderr.splitlines()
    assert line.startswith("error [ownership.denied]: ")
    assert line.endswith(
        "— another console owns proj/zeus: watch it with `ateam tail proj/zeus`, or take it "
        "over with `ateam attach proj/zeus --takeover` (or add --takeover here)"
    )
    assert "/attach" not in line.replace("ateam attach", "")


def test_stop_of_several_stops_the_free_ones_and_reports_the_owned_one(
    project: Path,
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    redis_url: str,
) -> None:
    start_agent("proj/zeus", cwd=project)
    start_agent("proj/hera", cwd=project)
    console = start_console()
    attach_and_send(console, "proj/zeus")

    done = run_ateam("stop", "zeus", "hera", "--json", "--redis", redis_url, cwd=project)

    assert done.returncode == 3, done.stderr  # ownership.denied, as for one agent
    rows = {row["id"]: row for row in json.loads(done.stdout)}
    assert rows["proj/hera"]["status"] == "stopped"
    assert rows["proj/zeus"]["status"] == "failed"
    assert rows["proj/zeus"]["error"].startswith("error [ownership.denied]: ")
    assert bus.entry("proj/hera") is None and bus.entry("proj/zeus") is not None

    plain = run_ateam("stop", "zeus", "--redis", redis_url, cwd=project)
    assert plain.returncode == 3 and "ateam attach proj/zeus --takeover" in plain.stderr


def test_tail_json_is_one_event_a_line_with_the_text_whole(
    project: Path, start_agent: AgentFactory, bus: Bus, redis_url: str
) -> None:
    start_agent("proj/zeus", cwd=project)
    sent = ok_json(
        run_ateam("send", "zeus", "build", "it", "--json", "--redis", redis_url, cwd=project)
    )
    wait_for(lambda: bus.task_ends("proj/zeus").get(sent["id"]), START_TIMEOUT_S)

    done = run_ateam("tail", "zeus", "--from", "1", "--json", "--redis", redis_url, cwd=project)

    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["offset"] for row in rows] == sorted(row["offset"] for row in rows)
    assert {"offset", "type", "ts", "data"} == set(rows[0])
    starts = [row for row in rows if row["type"] == "task.start"]
    assert starts[-1]["data"]["task_id"] == sent["id"]
    said = "".join(row["data"]["text"] for row in rows if row["type"] == "token")
    assert "echo: build it" in said
    ends = [row for row in rows if row["type"] == "task.end"]
    assert ends[-1]["data"]["ok"] is True


def test_tasks_claim_a_task_by_prefix_as_a_bare_agent_name(
    project: Path, start_agent: AgentFactory, redis_url: str
) -> None:
    start_agent("proj/zeus", cwd=project)

    def tasks(*args: str) -> Any:
        return run_ateam("tasks", *args, "--redis", redis_url, cwd=project)

    added = ok_json(tasks("add", "port", "the", "parser", "--json"))
    short = added["id"].removeprefix("t-")[:4]

    claimed = ok_json(tasks("claim", short, "--as", "ze", "--json"))

    assert claimed["id"] == added["id"]
    assert claimed["status"] == "claimed" and claimed["assignee"] == "proj/zeus"
    done = ok_json(tasks("done", f"t-{short}", "--as", "zeus", "--json"))
    assert done["status"] == "done"
    after = ok_json(tasks("add", "ship", "it", "--depends-on", short, "--json"))
    assert after["depends_on"] == [added["id"]]


def test_server_start_status_and_stop_print_json(embedded_env: dict[str, str]) -> None:
    started = ok_json(run_ateam("server", "start", "--json", env=embedded_env))

    assert started["running"] is True and started["started"] is True
    assert started["url"].startswith("unix://") and isinstance(started["pid"], int)
    status = ok_json(run_ateam("server", "status", "--json", env=embedded_env))
    assert status["running"] is True and status["pid"] == started["pid"]
    assert {"socket", "data_dir", "server", "version", "uptime_s"} <= set(status)
    again = ok_json(run_ateam("server", "start", "--json", env=embedded_env))
    assert again["started"] is False
    stopped = ok_json(run_ateam("server", "stop", "--json", env=embedded_env))
    assert stopped == {"running": False, "stopped": True}
    gone = run_ateam("server", "status", "--json", env=embedded_env)
    assert gone.returncode == 1 and json.loads(gone.stdout)["running"] is False


def test_acl_and_init_print_json(tmp_path: Path) -> None:
    acl = ok_json(run_ateam("acl", "proj", "--json", cwd=tmp_path))

    assert acl["project"] == "proj" and acl["user"] == "ateam-proj"
    assert acl["applied"] is False and len(acl["password"]) >= 16
    assert acl["command"].startswith("ACL SETUSER ateam-proj ")

    made = ok_json(run_ateam("init", str(tmp_path / "fresh"), "--json", cwd=tmp_path))

    assert made["project"] == "fresh" and made["agent"] == "zeus"
    assert made["root"] == str(tmp_path / "fresh")
    assert ".ateam/agents/zeus/agent.yaml" in made["files"]
    for relative in made["files"]:
        assert (tmp_path / "fresh" / relative).exists()


def test_kb_add_prints_its_report_as_json(
    project: Path, start_agent: AgentFactory, redis_url: str
) -> None:
    (project / "notes.md").write_text("# Bread\n\n500 g flour, 350 g water.\n")
    start_agent("proj/zeus", cwd=project)

    report = ok_json(
        run_ateam(
            "kb", "add", "zeus", "notes.md", "--json", "--redis", redis_url, cwd=project, timeout=90
        )
    )

    [doc] = report["ingested"]
    assert doc["path"].endswith("notes.md") and report["chunks"] >= 1
    assert report["skipped"] == []
