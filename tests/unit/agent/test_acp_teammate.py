"""The ateam MCP server entry an agent gives its coding agent's runtime (ACP ``mcpServers``).

Its command line holds nothing secret, its environment everything the server needs
when the runtime starts it with an environment of its own; and the agent really passes
it (the single wiring point in the composition root).
"""

from __future__ import annotations

import sys
from pathlib import Path

from acp import schema

from ateam.agent.acp.teammate import _import_root, ateam_mcp_server
from ateam.agent.runtime.build import build_parts
from ateam.bus.connection import RedisTarget
from ateam.bus.identity import AgentIdentity
from ateam.config import standalone_agent
from ateam.providers import EchoProvider

REPO = Path(__file__).resolve().parents[3]
SECRET = "pa:ss@w/rd"


def env_of(entry: schema.McpServerStdio) -> dict[str, str]:
    return {variable.name: variable.value for variable in entry.env}


def test_the_entry_runs_this_ateam_as_the_agent(tmp_path: Path) -> None:
    config = standalone_agent("proj", "zeus", tmp_path)
    identity = AgentIdentity(config.id)
    entry = ateam_mcp_server(config, RedisTarget("redis://db:6379/0", "--redis"), identity)

    assert entry.name == "ateam"
    assert entry.command == sys.executable and Path(entry.command).is_absolute()
    assert entry.args == ["-m", "ateam", "mcp", "--project", "proj", "--as", "zeus"]
    env = env_of(entry)
    assert env["ATEAM_AGENT_TOKEN"] == identity.token
    assert env["ATEAM_AGENT_MAX_HOPS"] == str(config.spec.team.max_hops)
    assert env["ATEAM_REDIS_URL"] == "redis://db:6379/0"
    assert env["ATEAM_NAMESPACE"] == "ateam:"
    assert Path(env["ATEAM_HOME"]).is_absolute()
    # Pure: the same agent, bus and identity give the same entry.
    same = ateam_mcp_server(config, RedisTarget("redis://db:6379/0", "--redis"), identity)
    assert same == entry


def test_no_secret_is_on_the_command_line(tmp_path: Path) -> None:
    config = standalone_agent("proj", "zeus", tmp_path)
    identity = AgentIdentity(config.id)
    target = RedisTarget(
        "rediss://db:6380/0",
        "tools.yaml",
        username="team",
        password=SECRET,
        ca_file="/etc/ateam/ca.pem",
        namespace="proj:",
        allow_eviction=True,
    )
    entry = ateam_mcp_server(config, target, identity)

    command_line = " ".join([entry.command, *entry.args])
    for secret in (identity.token, SECRET, "pa%3Ass%40w%2Frd"):
        assert secret not in command_line
    env = env_of(entry)
    # tools.yaml's credentials and CA ride in the URL: the runtime's directory may not
    # lead the server to that tools.yaml.
    assert env["ATEAM_REDIS_URL"] == (
        "rediss://team:pa%3Ass%40w%2Frd@db:6380/0?ssl_ca_certs=/etc/ateam/ca.pem"
    )
    assert env["ATEAM_NAMESPACE"] == "proj:"
    assert env["ATEAM_ALLOW_EVICTION"] == "1"


def test_the_embedded_server_is_found_through_the_home_not_its_password(tmp_path: Path) -> None:
    config = standalone_agent("proj", "zeus", tmp_path)
    embedded = RedisTarget("unix:///run/ateam/redis-1.sock", "embedded", password=SECRET)
    entry = ateam_mcp_server(config, embedded, AgentIdentity(config.id), home=tmp_path / "home")

    env = env_of(entry)
    assert "ATEAM_REDIS_URL" not in env
    assert env["ATEAM_HOME"] == str(tmp_path / "home")
    assert not any(SECRET in value or "pa%3Ass" in value for value in env.values())


def test_pythonpath_only_where_the_interpreter_would_not_find_ateam(tmp_path: Path) -> None:
    config = standalone_agent("proj", "zeus", tmp_path)
    target = RedisTarget("redis://db:6379/0", "--redis")
    identity = AgentIdentity(config.id)

    installed = ateam_mcp_server(config, target, identity, import_root="")
    assert "PYTHONPATH" not in env_of(installed)
    checkout = ateam_mcp_server(config, target, identity, import_root="/src/ateam")
    assert env_of(checkout)["PYTHONPATH"] == "/src/ateam"
    # These tests run ateam from this checkout (editable install or PYTHONPATH): a
    # directory no interpreter searches by itself.
    assert _import_root() == str(REPO)
    assert env_of(ateam_mcp_server(config, target, identity))["PYTHONPATH"] == str(REPO)


def test_the_agent_gives_its_runtime_the_entry_with_its_own_identity(
    target: RedisTarget, tmp_path: Path
) -> None:
    config = standalone_agent("proj", "zeus", tmp_path)
    parts = build_parts(config, target, EchoProvider())
    # What every ACP session of this agent gets in `session/new` (runner's own field).
    assert parts.tasks.acp._mcp == [ateam_mcp_server(config, target, parts.identity)]
