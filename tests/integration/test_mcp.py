"""``ateam mcp`` as a real process, reached by real MCP clients.

* the SDK's own ``stdio_client`` + ``ClientSession``, as Claude Code and Codex CLI start
  a server: a subprocess speaking JSON-RPC on its stdin and stdout;
* the official MCP Inspector's CLI (npm ``@modelcontextprotocol/inspector``, installed
  by ``.ci/run`` under ``.ci/npm``): a third-party client, over stdio and over HTTP;
* streamable HTTP behind the bearer token: without it a request gets 401.

The agent is a real ``ateam agent`` process on the test's own ``redis-server``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation, TextContent

from tests._wait import async_wait_for, wait_for
from tests.servers.openai_wire import OpenAIWireServer

from .conftest import AgentFactory, ateam_cmd, run_ateam, subprocess_env

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
INSPECTOR = REPO / ".ci" / "npm" / "node_modules" / ".bin" / "mcp-inspector"
INSPECTOR_INSTALL = (
    "npm install --prefix .ci/npm @modelcontextprotocol/inspector@2.12.0 --no-audit --no-fund"
)
_SERVING = re.compile(r"ateam mcp: serving (http://\S+)")
_TOKEN = re.compile(r"ateam mcp: token: (\S+)")


def _text(result: Any) -> str:
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


# --- the SDK's stdio client ---------------------------------------------------------------


async def test_stdio_with_the_sdk_client(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path
) -> None:
    start_agent("proj/zeus")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ateam", "mcp", "--project", "proj", "--redis", redis_url],
        env=subprocess_env(),
        cwd=tmp_path,
    )
    info = Implementation(name="codex", version="0.1")
    with (tmp_path / "mcp.stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, client_info=info) as session,
        ):
            init = await session.initialize()
            assert init.server_info.name == "ateam"
            listed = await session.call_tool("agents_list", {})
            assert [a["id"] for a in listed.structured_content["agents"]] == ["proj/zeus"]  # type: ignore[index]

            sent = await session.call_tool("agent_send", {"agent": "proj/zeus", "text": "hi"})
            assert not sent.is_error, _text(sent)
            task_id = sent.structured_content["id"]  # type: ignore[index]

            async def ended() -> list[dict[str, Any]] | None:
                page = await session.call_tool(
                    "agent_tail", {"agent": "proj/zeus", "from_offset": 1, "limit": 500}
                )
                events = page.structured_content["events"]  # type: ignore[index]
                done = any(
                    e["type"] == "task.end" and e["data"]["task_id"] == task_id for e in events
                )
                return events if done else None

            events = await async_wait_for(ended, message="the task sent over stdio to end")
            start = next(e for e in events if e["type"] == "task.start")
            assert start["data"]["source"] == "mcp:codex"

            unknown = await session.call_tool("agent_status", {"agent": "proj/nobody"})
            assert unknown.is_error and _text(unknown).startswith("agent.not_found: ")
            bad = await session.call_tool("no_such_tool", {})
            assert bad.is_error and _text(bad).startswith("no_such_method: ")
    assert "Traceback" not in (tmp_path / "mcp.stderr").read_text()


@pytest.fixture
def wire() -> Iterator[OpenAIWireServer]:
    with OpenAIWireServer() as server:
        yield server


def _system(request: Any) -> str:
    messages = request.body["messages"]
    assert messages[0]["role"] == "system"
    return str(messages[0]["content"])


async def test_an_item_posted_over_mcp_reaches_a_subscribed_agents_next_request(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path, wire: OpenAIWireServer
) -> None:
    root = tmp_path / "c"
    (root / ".ateam").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: c\n")
    (root / ".ateam" / "models.yaml").write_text(
        "models:\n"
        f"  - {{id: gpt, provider: openai, model: test-model, base_url: '{wire.base_url}'}}\n"
    )
    # zeus takes the default subscription; hera only frontend news.
    for name, extra in [("zeus", ""), ("hera", "context: {tags: [frontend]}\n")]:
        (root / ".ateam" / "agents" / name).mkdir(parents=True)
        (root / ".ateam" / "agents" / name / "agent.yaml").write_text(f"model: gpt\n{extra}")
        start_agent(f"c/{name}", cwd=root)
    for _ in range(2):
        wire.reply_text("Done.")

    def past(count: int) -> Callable[[], bool]:
        return lambda: len(wire.chat_requests) > count

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ateam", "mcp", "--redis", redis_url],
        env=subprocess_env(),
        cwd=root,  # the project around it is the default
    )
    with (tmp_path / "mcp.stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            posted = await session.call_tool(
                "context_post",
                {"type": "status", "title": "staging DB moved to db2", "urgency": "attention",
                 "tags": ["db"]},
            )  # fmt: skip
            assert not posted.is_error, _text(posted)
            for agent in ("c/zeus", "c/hera"):
                count = len(wire.chat_requests)
                sent = await session.call_tool("agent_send", {"agent": agent, "text": "go"})
                assert not sent.is_error, _text(sent)
                await async_wait_for(past(count), 15, f"{agent}'s model request")
    zeus, hera = (_system(request) for request in wire.chat_requests[:2])
    assert "staging DB moved to db2" in zeus and "Team context" in zeus
    assert "staging DB moved" not in hera


# --- the MCP Inspector's CLI ----------------------------------------------------------------


@pytest.fixture
def inspector(tmp_path: Path) -> Iterator[Any]:
    """``inspector(*args)`` runs ``mcp-inspector --cli ARGS…``; → (exit code, stdout JSON).

    Missing, it fails the test (never skips): ``.ci/run`` installs it.
    """
    assert INSPECTOR.exists(), f"the MCP Inspector is not installed; run: {INSPECTOR_INSTALL}"
    home = tmp_path / "inspector-home"  # it keeps a catalog under ~/.mcp-inspector
    home.mkdir()
    env = subprocess_env(HOME=str(home))

    def run(*args: str) -> tuple[int, Any]:
        done = subprocess.run(
            [str(INSPECTOR), "--cli", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=tmp_path,
        )
        assert done.stdout.strip(), f"no output; stderr:\n{done.stderr}"
        return done.returncode, json.loads(done.stdout)

    yield run


def test_the_inspector_over_stdio(
    start_agent: AgentFactory, redis_url: str, inspector: Any
) -> None:
    start_agent("proj/zeus")
    server = [*ateam_cmd("mcp", "--project", "proj", "--redis", redis_url)]

    # --strict: every tool's schema is portable across clients, or exit 6.
    code, listed = inspector(*server, "--method", "tools/list", "--strict")
    assert code == 0
    assert {tool["name"] for tool in listed["tools"]} >= {"agents_list", "agent_send", "task_claim"}

    code, posted = inspector(
        *server,
        "--method", "tools/call", "--tool-name", "context_post",
        "--tool-arg", "type=decision", "--tool-arg", "title=use two words",
        "--tool-arg", 'tags=["db"]',
    )  # fmt: skip
    assert code == 0 and not posted["isError"]
    assert posted["structuredContent"]["source_runtime"] == "inspector-cli"

    code, decisions = inspector(*server, "--method", "resources/read", "--uri", "ateam://decisions")
    assert code == 0
    [content] = decisions["contents"]
    assert [d["title"] for d in json.loads(content["text"])["decisions"]] == ["use two words"]

    code, sent = inspector(
        *server,
        "--method", "tools/call", "--tool-name", "agent_send",
        "--tool-arg", "agent=proj/zeus", "--tool-arg", "text=two words",
    )  # fmt: skip
    assert code == 0 and not sent["isError"] and sent["structuredContent"]["created"]

    code, refused = inspector(
        *server,
        "--method", "tools/call", "--tool-name", "task_claim",
        "--tool-arg", "task_id=t-0000000000", "--tool-arg", "agent=proj/zeus",
    )  # fmt: skip
    assert code != 0 and refused["isError"]
    assert refused["content"][0]["text"].startswith("task.not_found: ")


# --- streamable HTTP and its token ----------------------------------------------------------


class HttpServer:
    """An ``ateam mcp --http --port 0`` child; its URL and token read from its stderr."""

    def __init__(self, args: list[str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        with stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                env=subprocess_env(), cwd=stderr_path.parent,
            )  # fmt: skip

        def serving() -> str | None:
            assert self.proc.poll() is None, f"ateam mcp exited: {self.stderr()}"
            found = _SERVING.search(self.stderr())
            return found.group(1) if found else None

        self.url = wait_for(serving, 20, "ateam mcp --http to listen")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)


def _post(url: str, headers: dict[str, str]) -> int:
    """The status of a raw ``initialize`` POST."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "curl", "version": "1"},
        },
    }
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            **headers,
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_http_needs_the_token(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path
) -> None:
    start_agent("proj/zeus")
    token_file = tmp_path / "token"
    token = "s3cret-token-for-the-test-0123456789"
    token_file.write_text(token + "\n")
    args = ateam_cmd(
        "mcp", "--project", "proj", "--redis", redis_url,
        "--http", "--port", "0", "--token-file", str(token_file),
    )  # fmt: skip
    server = HttpServer(args, tmp_path / "http.stderr")
    try:
        assert token not in server.stderr()  # read from the file: not printed
        assert f"ateam mcp: read the token from {token_file}" in server.stderr()
        assert _post(server.url, {}) == 401
        assert _post(server.url, {"authorization": "Bearer wrong-token-0123456789"}) == 401
        assert _post(server.url, {"authorization": f"Bearer {token}"}) == 200

        headers = {"authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            streamable_http_client(server.url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = await session.call_tool("agents_list", {})
            assert [a["id"] for a in listed.structured_content["agents"]] == ["proj/zeus"]  # type: ignore[index]
    finally:
        server.stop()


def test_http_writes_a_new_token_to_a_token_file_that_does_not_exist(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path
) -> None:
    start_agent("proj/zeus")
    token_file = tmp_path / "new-token"
    args = ateam_cmd(
        "mcp", "--project", "proj", "--redis", redis_url,
        "--http", "--port", "0", "--token-file", str(token_file),
    )  # fmt: skip
    server = HttpServer(args, tmp_path / "http.stderr")
    try:
        token = token_file.read_text().strip()
        assert len(token) >= 32 and token_file.stat().st_mode & 0o777 == 0o600
        assert f"ateam mcp: wrote a new token to {token_file} (mode 0600)" in server.stderr()
        assert token not in server.stderr()
        assert _post(server.url, {}) == 401
        assert _post(server.url, {"authorization": f"Bearer {token}"}) == 200
    finally:
        server.stop()


def test_http_prints_a_random_token_the_inspector_uses(
    start_agent: AgentFactory, redis_url: str, tmp_path: Path, inspector: Any
) -> None:
    start_agent("proj/zeus")
    args = ateam_cmd("mcp", "--project", "proj", "--redis", redis_url, "--http", "--port", "0")
    server = HttpServer(args, tmp_path / "http.stderr")
    try:
        found = _TOKEN.search(server.stderr())
        assert found is not None, server.stderr()
        token = found.group(1)
        assert len(token) >= 32
        code, listed = inspector(
            server.url, "--transport", "http",
            "--header", f"Authorization: Bearer {token}",
            "--method", "tools/call", "--tool-name", "agents_list",
        )  # fmt: skip
        assert code == 0 and [a["id"] for a in listed["structuredContent"]["agents"]] == [
            "proj/zeus"
        ]
        assert _post(server.url, {}) == 401
    finally:
        server.stop()


# --- the command line -------------------------------------------------------------------------


def test_bad_command_lines_are_one_line_errors(tmp_path: Path) -> None:
    cases = [
        (["mcp", "--port", "9999"], 4, "go with --http"),
        (["mcp", "--http", "--token-file", str(tmp_path / "no-dir" / "t")], 4, "--token-file"),
        (["mcp", "--redis", "redis://127.0.0.1:1/0"], 2, "redis.unavailable"),
    ]
    short = tmp_path / "short"
    short.write_text("abc\n")
    cases.append((["mcp", "--http", "--token-file", str(short)], 4, "at least 16"))
    for args, code, text in cases:
        done = run_ateam(*args, cwd=tmp_path)
        assert done.returncode == code, (args, done.stderr)
        assert done.stdout == ""
        line = done.stderr.strip()
        assert "\n" not in line and text in line and "Traceback" not in line, line


def test_the_extra_is_named_when_the_sdk_is_missing(tmp_path: Path) -> None:
    # A directory named like the SDK shadows it: what a user without the extra sees.
    fake = tmp_path / "fake"
    (fake / "mcp").mkdir(parents=True)
    (fake / "mcp" / "__init__.py").write_text("raise ImportError('no mcp here')\n")
    env = subprocess_env(PYTHONPATH=os.pathsep.join([str(fake), *sys.path]))
    done = run_ateam("mcp", env=env, cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    assert "pip install 'ateam[mcp]'" in done.stderr and "Traceback" not in done.stderr
