"""SPEC §6 commands on a real plain console: /plan, /agents and the /agent new wizard."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests._wait import wait_for

from .conftest import (
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    run_ateam,
    write_project,
    write_scripted_project,
    write_waiting_project,
)
from .test_fleet import SPAWN_TIMEOUT_S, keepers, lines_from, mark, spawned, wait_after

pytestmark = pytest.mark.integration

__all__ = ["spawned"]  # the fixture, imported so this module's tests can use it


def test_plan_read_write_append_list_and_a_confirmed_delete(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "p", "p", agents=("zeus", "hera"))
    start_agent("p/zeus", cwd=root)
    start_agent("p/hera", cwd=root)
    plan = root / ".ateam" / "agents" / "zeus" / "plan.md"
    console = start_console()
    attach_and_send(console, "p/zeus")

    start = mark(console)
    console.send("/plan")
    wait_after(console, start, "p/zeus has no plan yet")
    console.send("/plan write 1. parse the config")
    wait_after(console, start, "plan of p/zeus written")
    console.send("/plan append 2. write the tests")
    wait_after(console, start, "plan of p/zeus now")
    assert plan.read_text() == "1. parse the config\n2. write the tests\n"

    start = mark(console)
    console.send("/plan read")
    wait_after(console, start, "[A:p/zeus] 2. write the tests")
    console.send("/plan list")
    row = wait_after(console, start, lambda line: line.startswith("p/zeus "))
    assert "1. parse the config" in row
    assert not any(line.startswith("p/hera ") for line in console.output().split("\n")[start:])

    start = mark(console)
    console.send("/plan delete")
    console.send("no")
    wait_after(console, start, "plan delete cancelled")
    assert plan.exists()
    console.send("/plan delete")
    console.send("yes")
    wait_after(console, start, "plan of p/zeus deleted")
    assert not plan.exists()

    console.send("/plan frobnicate")
    line = wait_after(console, start, "error [")
    assert "usage: /plan [read|write|append|delete|list|approve|reject]" in line


def test_agents_lists_configured_agents_running_or_not(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "p", "p", agents=("zeus", "hera"))
    (root / ".ateam" / "agents" / "hera" / "agent.yaml").write_text(
        "model: slowecho\ndescription: reviews every change\n"
    )
    start_agent("p/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus")

    start = mark(console)
    console.send("/agents")
    header = wait_after(console, start, lambda line: line.startswith("ID "))
    assert header.split() == ["ID", "STATE", "MODEL", "CWD", "DESCRIPTION"]
    hera = wait_after(console, start, lambda line: line.startswith("p/hera "))
    zeus = wait_after(console, start, lambda line: line.startswith("p/zeus "))
    assert hera.split()[1:3] == ["stopped", "slowecho"]
    assert "reviews every change" in hera
    assert zeus.split()[1] == "idle"


def test_agent_new_asks_checks_each_answer_and_creates_only_after_confirmation(
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    bus: Bus,
    tmp_path: Path,
    spawned: None,
) -> None:
    root = write_project(tmp_path / "p", "p")
    (root / "src").mkdir()
    start_agent("p/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus")
    new_dir = root / ".ateam" / "agents" / "apollo"

    # Cancelled at the end: nothing is written, nothing starts.
    start = mark(console)
    console.send("/agent new")
    for answer in ("apollo", "", "", "", "", "", "no"):
        console.send(answer)  # queued: the wizard reads them in order
    wait_after(console, start, "agent new cancelled")
    assert not new_dir.exists()
    assert bus.entry("p/apollo") is None

    # Out of answers at the first question: cancelled too.
    start = mark(console)
    console.send("/agent new")
    console.send("")
    wait_after(console, start, "agent new cancelled")

    start = mark(console)
    console.send("/agent new")
    for answer in (
        "zeus",  # configured already: asked again
        "../evil",  # not a name: asked again
        "apollo",
        "src",
        "gpt-9000",  # unknown model: asked again
        "slowecho",
        "os.exec,shell.*",  # a glob that matches no tool: asked again
        "os.exec,plan.*",
        "builds the docs",
        "Prefer small commits.",
        "yes",
    ):
        console.send(answer)
    wait_after(console, start, "p/zeus is already configured")
    wait_after(console, start, "invalid agent name '../evil'")
    wait_after(console, start, "unknown model 'gpt-9000'")
    wait_after(console, start, "'shell.*' matches no tool")
    wait_after(console, start, "spawned p/apollo", timeout=SPAWN_TIMEOUT_S)

    spec = yaml.safe_load((new_dir / "agent.yaml").read_text())
    assert spec == {
        "model": "slowecho",
        "cwd": "src",
        "tools": {"allow": ["os.exec", "plan.*"]},
        "description": "builds the docs",
    }
    assert (new_dir / "system_overlay.md").read_text() == "Prefer small commits."
    entry = bus.entry("p/apollo")
    assert entry is not None
    assert entry["cwd"] == str((root / "src").resolve())
    assert entry["model"] == "slowecho"
    assert len(keepers(tmp_path)) == 1
    console.send("/agents")
    wait_for(
        lambda: any(
            line.startswith("p/apollo ") and "builds the docs" in line
            for line in console.output().split("\n")
        ),
        10,
        "/agents to list p/apollo",
    )


def test_context_post_and_ls_and_a_blocking_item_is_a_banner_in_every_console(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "p", "p")
    start_agent("p/zeus", cwd=root)
    poster = start_console()
    watcher = start_console()  # attached to nothing: it still hears of blocking items
    watcher.wait_line("*** connected to")
    attach_and_send(poster, "p/zeus")

    start = mark(poster)
    poster.send("/context post --type discovery --tags parser,perf the parser is O(n^2)")
    wait_after(poster, start, lambda line: line.startswith("posted c-") and "to p" in line)
    poster.send("/context post --type request --urgency blocking need the staging DB password")
    wait_after(poster, start, "(project, blocking)")
    banner = "*** BLOCKING request from a console: need the staging DB password (/context ls)"
    watcher.wait_line(banner)
    assert "the parser is O(n^2)" not in watcher.output()  # background items stay quiet

    start = mark(poster)
    poster.send("/context ls")
    header = wait_after(poster, start, lambda line: line.startswith("ID "))
    assert header.split() == ["ID", "AGE", "TYPE", "URGENCY", "SCOPE", "SOURCE", "TITLE"]

    # Table rows start with the item id; zeus is working on the blocking item meanwhile
    # and its echoed task text may reach this attached console between the rows.
    def row(text: str) -> Callable[[str], bool]:
        return lambda line: line.startswith("c-") and text in line

    newest = wait_after(poster, start, row("need the staging DB password"))
    wait_after(poster, start, row("the parser is O(n^2)"))
    assert newest.split()[2:6] == ["request", "blocking", "project", "console"]

    start = mark(poster)
    poster.send("/context ls --tag perf")
    wait_after(poster, start, "the parser is O(n^2)")
    poster.send("/context ls --urgency attention --type discovery")
    wait_after(poster, start, "no context items in p")

    poster.send("/context post --urgency panic help")
    line = wait_after(poster, start, "error [")
    assert "error [bad_request]" in line and "urgency" in line


def test_outside_every_project_context_and_board_need_an_attached_agent(
    own_redis: Any, redis_url: str, tmp_path: Path
) -> None:
    # A directory that is no project is not taken for one of its own name: the post would
    # reach no agent. The console says what to do, and nothing is written.
    lost = tmp_path / "somewhere"
    lost.mkdir()
    for line in ("/context post the staging DB moved", "/tasks add write the parser"):
        done = run_ateam("console", "--no-ui", "--redis", redis_url, input=line + "\n", cwd=lost)
        assert done.returncode == 4, done.stdout + done.stderr
        assert "no project here" in done.stdout and "/attach" in done.stdout
    keys = redis.Redis.from_url(redis_url).keys("*somewhere*")
    assert keys == []


def test_an_agent_posts_a_blocking_item_with_its_tool(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path
) -> None:
    call = {
        "name": "context.post",
        "args": {"type": "alert", "title": "prod deploy is failing", "urgency": "blocking"},
    }
    root = write_scripted_project(
        tmp_path / "s",
        "s",
        [{"text": "Telling the team.", "tool_calls": [call]}, {"text": "Posted."}],
        allow=("context.*",),
    )
    start_agent("s/zeus", cwd=root)
    watcher = start_console()
    watcher.wait_line("*** connected to")
    console = start_console()
    attach_and_send(console, "s/zeus", "watch the deploy")

    watcher.wait_line("*** BLOCKING alert from s/zeus: prod deploy is failing (/context ls)")
    console.wait_line("[A:s/zeus] Posted.")
    start = mark(console)
    console.send("/context ls")
    row = wait_after(console, start, "prod deploy is failing")
    assert row.split()[2:6] == ["alert", "blocking", "project", "s/zeus"]


def test_a_plain_console_announces_any_agent_that_starts_waiting(
    start_agent: AgentFactory, start_console: ConsoleFactory, bus: Bus, tmp_path: Path
) -> None:
    root = write_waiting_project(tmp_path / "s", "s")
    start_agent("s/zeus", cwd=root)
    bystander = start_console()  # not attached to s/zeus
    bystander.wait_line("*** connected to")
    console = start_console()
    attach_and_send(console, "s/zeus", "change it")

    bystander.wait_line("*** agent s/zeus is waiting for approval")
    assert (bus.entry("s/zeus") or {}).get("state") == "waiting"
    late = start_console()  # started while it waits: told at once
    late.wait_line("*** agent s/zeus is waiting for approval")


def test_kb_add_search_and_copy_from_through_the_console(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "p", "p", agents=("zeus", "hera"))
    docs = root / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text(
        "# Deploying\n\nRun make release, then watch the canary dashboard.\n\n"
        "# Rolling back\n\nRoll back with make rollback; it restores the previous image.\n"
    )
    (docs / "parser.md").write_text(
        "# The parser\n\nThe tokenizer feeds a recursive descent parser for the config files.\n"
    )
    (docs / "deploy-copy.md").write_text((docs / "deploy.md").read_text().replace("\n", "\r\n"))
    start_agent("p/zeus", cwd=root)
    start_agent("p/hera", cwd=root)
    console = start_console()
    attach_and_send(console, "p/zeus")

    start = mark(console)
    console.send(f"/kb add {docs}")
    summary = wait_after(console, start, "document(s) ingested", timeout=60)
    assert summary.startswith("kb agent: 2 document(s) ingested")
    assert "1 skipped" in summary
    wait_after(console, start, lambda line: "deploy-copy.md" in line and "duplicate of" in line)
    wait_after(console, start, lambda line: line.startswith("[A:p/zeus] kb agent: 3/3 "))

    start = mark(console)
    console.send("/kb search how do I roll back a release")
    wait_after(console, start, lambda line: line.startswith("SCORE "))
    best = wait_after(console, start, lambda line: line[:1].isdigit())
    assert "docs/deploy" in best
    assert float(best.split()[0]) >= 0.35
    doc_id = best.split()[1]

    start = mark(console)
    console.send("/attach p/hera")
    wait_after(console, start, "attached to p/hera")
    console.send(f"/kb copy-from p/zeus --ids {doc_id}")
    wait_after(console, start, "copied 1 document(s) from p/zeus into the agent knowledge base")
    console.send("/kb ls")
    row = wait_after(console, start, lambda line: line.startswith(doc_id))
    assert "p/zeus" in row  # provenance kept
    assert not [ln for ln in lines_from(console, start) if "parser.md" in ln]  # only the chosen

    console.send("/kb add /etc/hostname")  # outside hera's sandbox; ends this script's console
    line = wait_after(console, start, "error [kb.ingest.denied]")
    assert "/etc/hostname" in line
