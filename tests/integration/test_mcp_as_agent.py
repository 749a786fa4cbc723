"""``ateam mcp --as``: a coding agent's runtime acting as its ateam agent, end to end.

``proj/zeus`` is a real agent running in this process, so the test holds what zeus hands
its runtime: the ``mcpServers`` entry :func:`ateam_mcp_server` builds with zeus's own
instance identity (the one its composition root gives the ACP runner; the token lives
only in zeus's memory, so a separate ``ateam agent`` process could not be asked for it).
The server is started exactly as the entry says, as a runtime starts it: its command,
its arguments, its environment and nothing else but ``HOME`` and ``PATH`` (what the MCP
SDK's stdio client passes on, set bare here), in a directory outside any project.
``proj/hera`` is a real ``ateam agent`` process.

Both run a scripted model whose every task first asks to run a command and waits for the
approval: a task stays the one in hand (its thread) for as long as the test needs it.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from acp import schema
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import Implementation, TextContent

from ateam.agent.acp.teammate import ateam_mcp_server
from ateam.agent.runtime.process import Agent
from ateam.bus.connection import RedisTarget
from ateam.bus.embedded import EmbeddedServer
from ateam.bus.identity import AgentIdentity
from ateam.bus.registry import AgentEntry, Heartbeat
from ateam.bus.rpc import RpcClient
from ateam.client import Team
from ateam.config import load_project
from ateam.errors import Code
from ateam.providers import build_provider
from ateam.redact import Redactor
from ateam.tools.approvals import Decision
from ateam.wire.results import QueueCurrentResult, QueueEntry
from tests._wait import async_wait_for

from .conftest import AgentFactory, run_ateam, subprocess_env, write_scripted_project

pytestmark = pytest.mark.integration

BARE_PATH = "/usr/bin:/bin"
ASK = {"text": "May I?", "tool_calls": [{"name": "os.exec", "args": {"cmd": "true"}}]}
"""Every task's first turn: a command under ``ask``, so the task waits for an answer."""
APPROVAL = {"tools": {"approval": {"os.*": "ask"}, "approval_timeout_s": 120}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """``proj``: zeus (``team.max_hops: 2``) and hera, both on the asking script."""
    turns = [ASK, {"text": "done"}] * 4
    zeus_yaml = {**APPROVAL, "team": {"max_hops": 2}}
    root = write_scripted_project(tmp_path / "p", "proj", turns, agent_yaml=zeus_yaml)
    hera = root / ".ateam" / "agents" / "hera"
    hera.mkdir()
    spec = {"model": "script", "tools": {"allow": ["os.exec"], **APPROVAL["tools"]}}
    (hera / "agent.yaml").write_text(yaml.safe_dump(spec))
    return root


@dataclass
class Zeus:
    agent: Agent
    stopped: bool = False

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await self.agent.stop()


@pytest.fixture
async def zeus(project: Path, target: RedisTarget) -> AsyncIterator[Zeus]:
    """The acting agent, running in this process on the test's own Redis."""
    config = load_project(project).agent("zeus")
    running = Zeus(Agent(config, target, build_provider(config.model_entry())))
    await running.agent.start()
    yield running
    await running.stop()


@pytest.fixture
async def team(target: RedisTarget) -> AsyncIterator[Team]:
    """How everyone else sees the bus: a plain client session."""
    async with await Team.connect(target, redactor=Redactor()) as t:
        yield t


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Only HOME (a runtime's private one) and PATH: what ``env -i HOME=… PATH=…`` leaves.

    Set in this process too: the SDK's stdio client passes those of ours to the server.
    """
    home = tmp_path / "runtime-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", BARE_PATH)
    for name in ("LOGNAME", "SHELL", "TERM", "USER"):
        monkeypatch.delenv(name, raising=False)
    yield {"HOME": str(home), "PATH": BARE_PATH}


def env_of(entry: schema.McpServerStdio) -> dict[str, str]:
    return {variable.name: variable.value for variable in entry.env}


def _text(result: Any) -> str:
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, _text(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return _text(result)


async def from_teammate(agent: Agent, hops: int, trace_id: str) -> None:
    """Queue a task at ``agent`` from teammate ``proj/ares``, as hop ``hops`` of a thread.

    ares is a heartbeat with an identity of its own, as a running agent has one.
    """
    client, keys = agent.parts.client, agent.parts.keys
    ares = AgentIdentity("proj/ares")
    entry = AgentEntry(id=ares.agent, name="ares", project="proj", state="idle")
    await Heartbeat(client, keys, entry, identity=ares).beat()
    params = {"text": "hand the parser on", "source": "agent:ares", "hops": hops}
    rpc = RpcClient(client, keys, caller=ares.caller, auth=ares.token)
    await rpc.call(agent.id, "team.input", {**params, "trace_id": trace_id}, timeout=10)


async def waiting_on(agent: Agent, trace_id: str) -> None:
    """Until ``agent`` holds the task of thread ``trace_id`` and waits for its approval."""

    def held() -> bool:
        current = agent.parts.queue.current
        waiting = bool(agent.parts.approvals.pending())
        return waiting and current is not None and current.trace_id == trace_id

    await async_wait_for(held, 15, f"{agent.id} to wait inside thread {trace_id}")


async def current_item(team: Team, agent_id: str) -> QueueEntry:
    async def found() -> QueueEntry | None:
        reply = await team.agent(agent_id).request("queue.current", QueueCurrentResult)
        return reply.current

    return await async_wait_for(found, 20, f"{agent_id} to take a task")


async def test_the_runtime_acts_as_the_agent_with_a_server_started_as_the_entry_says(
    zeus: Zeus,
    team: Team,
    start_agent: AgentFactory,
    project: Path,
    bare: dict[str, str],
    tmp_path: Path,
) -> None:
    hera = start_agent("proj/hera", cwd=project)
    agent = zeus.agent
    entry = ateam_mcp_server(agent.parts.config, agent.parts.target, agent.parts.identity)
    assert agent.parts.tasks.acp._mcp == [entry]  # what zeus's runtime gets in session/new
    elsewhere = tmp_path / "elsewhere"  # no project around: the entry must say it all
    elsewhere.mkdir()
    params = StdioServerParameters(
        command=entry.command, args=entry.args, env={**bare, **env_of(entry)}, cwd=elsewhere
    )
    info = Implementation(name="claude-code", version="1")
    with (tmp_path / "mcp.stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, client_info=info) as session,
        ):
            init = await session.initialize()
            assert "You are agent proj/zeus of project proj" in (init.instructions or "")
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert "as proj/zeus" in (tools["task_claim"].description or "")

            # The board: added, claimed and finished by zeus, as its own tools would.
            task = await ok(session, "task_add", title="write the parser")
            assert task["created_by"] == "proj/zeus"
            claimed = await ok(session, "task_claim", task_id=task["id"])
            assert (claimed["status"], claimed["assignee"]) == ("claimed", "proj/zeus")
            seen = await team.tasks.get("proj", task["id"])
            assert seen is not None and seen.assignee == "proj/zeus"
            error = await refused(session, "task_claim", task_id=task["id"], agent="proj/hera")
            assert error.startswith(f"{Code.IDENTITY_REFUSED}: "), error
            done = await ok(session, "task_done", task_id=task["id"], result="parser in src/")
            assert (done["status"], done["result"]) == ("done", "parser in src/")
            [listed] = await team.tasks.ls("proj", status="done")
            assert (listed.assignee, listed.result) == ("proj/zeus", "parser in src/")

            # Team context: zeus is the source.
            posted = await ok(session, "context_post", type="discovery", title="db moved")
            item = await team.context.get("proj", posted["id"])
            assert item is not None
            assert (item.source_agent, item.source_runtime) == ("proj/zeus", "ateam")

            # team.send: within zeus's thread, one hop further, as zeus, proven.
            await from_teammate(agent, hops=1, trace_id="thread-7")
            await waiting_on(agent, "thread-7")
            sent = await ok(session, "agent_send", agent="hera", text="take the parser")
            assert (sent["to"], sent["hops"], sent["trace_id"]) == ("proj/hera", 2, "thread-7")
            arrived = await current_item(team, "proj/hera")
            assert (arrived.caller, arrived.source) == ("agent:proj/zeus", "agent:zeus")
            assert (arrived.hops, arrived.trace_id, arrived.id) == (2, "thread-7", sent["id"])
            assert arrived.text.startswith("[from teammate zeus, through team.send]\n")

            # The next thread is at zeus's limit already: refused before it is sent.
            agent.parts.approvals.answer(None, Decision.REJECT, content=None, by="test")
            await from_teammate(agent, hops=2, trace_id="thread-8")
            await waiting_on(agent, "thread-8")
            error = await refused(session, "agent_send", agent="hera", text="again")
            assert error.startswith(f"{Code.TEAM_HOP_LIMIT}: "), error
            assert "hop 3 of the thread and team.max_hops is 2" in error

            # An instance that stopped proves nothing any more: every action is refused.
            await zeus.stop()
            error = await refused(session, "task_add", title="after the end")
            assert error.startswith(f"{Code.IDENTITY_REFUSED}: "), error
            assert "no agent proj/zeus is running" in error
    assert hera.running()
    assert "Traceback" not in (tmp_path / "mcp.stderr").read_text()


@pytest.fixture
def embedded(isolated_home: Path) -> RedisTarget:
    """This test home's embedded server, started from the test's environment (its
    ``ATEAM_RUNTIME_DIR``); the home's fixture stops it afterwards."""
    return EmbeddedServer().ensure()


async def test_the_embedded_bus_is_found_through_the_agents_home(
    embedded: RedisTarget, project: Path, bare: dict[str, str], tmp_path: Path
) -> None:
    config = load_project(project).agent("zeus")
    agent = Agent(config, embedded, build_provider(config.model_entry()))
    await agent.start()
    try:
        entry = ateam_mcp_server(config, embedded, agent.parts.identity)
        env = env_of(entry)
        # No URL and no password: the server reads the home's record, as a verb would,
        # though its environment has none of the test's ATEAM_RUNTIME_DIR.
        assert "ATEAM_REDIS_URL" not in env and "ATEAM_RUNTIME_DIR" not in env
        assert not any(embedded.password and embedded.password in v for v in env.values())
        params = StdioServerParameters(
            command=entry.command, args=entry.args, env={**bare, **env}, cwd=tmp_path
        )
        with (tmp_path / "mcp.stderr").open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                task = await ok(session, "task_add", title="on the embedded bus")
                claimed = await ok(session, "task_claim", task_id=task["id"])
        assert claimed["assignee"] == "proj/zeus"
        async with await Team.connect(embedded, redactor=Redactor()) as team:
            seen = await team.tasks.get("proj", task["id"])
        assert seen is not None and (seen.created_by, seen.assignee) == ("proj/zeus",) * 2
    finally:
        await agent.stop()


def run_entry(
    entry: schema.McpServerStdio, env: dict[str, str], cwd: Path, *, args: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [entry.command, *(args or entry.args)],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_wrong_or_missing_token_is_refused_at_start(
    zeus: Zeus, bare: dict[str, str], tmp_path: Path
) -> None:
    agent = zeus.agent
    entry = ateam_mcp_server(agent.parts.config, agent.parts.target, agent.parts.identity)
    env = {**bare, **env_of(entry)}
    without = {name: value for name, value in env.items() if name != "ATEAM_AGENT_TOKEN"}
    not_running = [*entry.args[:-1], "nobody"]
    cases = [
        ({**env, "ATEAM_AGENT_TOKEN": "0" * 64}, None, "is not the one proj/zeus's running"),
        (without, None, "needs the identity token of proj/zeus's running instance"),
        ({**env, "ATEAM_AGENT_TOKEN": " "}, None, "needs the identity token"),
        # zeus's own token does not make anyone else: the agent named must run, with it.
        (env, not_running, "no agent proj/nobody is running"),
    ]
    for case_env, args, why in cases:
        # In a thread: zeus runs in this loop and must keep answering and beating.
        done = await asyncio.to_thread(run_entry, entry, case_env, tmp_path, args=args)
        assert done.returncode == 3, (why, done.stderr)
        assert done.stdout == ""  # nothing was served
        line = done.stderr.strip()
        assert "\n" not in line and "Traceback" not in line, line
        assert line.startswith(f"error [{Code.IDENTITY_REFUSED}]: ") and why in line, line
        assert agent.parts.identity.token not in line


def test_bad_as_command_lines_are_one_line_usage_errors(tmp_path: Path) -> None:
    env = subprocess_env(ATEAM_AGENT_TOKEN="0" * 64)
    cases = [
        (["--project", "a", "--as", "b/zeus"], "is an agent of b, not of --project a"),
        (["--project", "a", "--as", "ze us"], "invalid agent name"),
        (["--as", "zeus"], "no project here"),
        (["--as", "a/zeus", "--redis", "redis://127.0.0.1:1/0"], None),
    ]
    for args, why in cases:
        done = run_ateam("mcp", *args, cwd=tmp_path, env=env)
        line = done.stderr.strip()
        assert "\n" not in line and "Traceback" not in line, line
        if why is None:  # well formed: it gets as far as the bus
            assert done.returncode == 2 and "redis.unavailable" in line, line
            continue
        assert done.returncode == 4 and why in line, (args, line)
        assert env["ATEAM_AGENT_TOKEN"] not in line
