"""The poster of a context item or a board task is told how many secrets were masked
(issue 22): ``ateam context post``, ``ateam tasks add`` and their MCP tools say so, as
``ateam send`` and the console do, and nothing of the secrets reaches Redis.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from mcp import ClientSession, StdioServerParameters, stdio_client

from .conftest import run_ateam, subprocess_env, write_project

pytestmark = pytest.mark.integration

OPENAI = "sk-proj-" + "Q7wE9rT1yU3iO5pA2sD4fG6h" * 2
GITHUB = "ghp_" + "m4N8b2V6c0X5z9L3k7J1h5G9f3D7s1A4q8W2"
CUSTOM = "ACME-" + "7f3a9c2e"
"""Matched only by the project's redact.yaml, not by a built-in pattern."""


def project(tmp_path: Path) -> Path:
    root = write_project(tmp_path / "proj", "proj")
    (root / ".ateam" / "redact.yaml").write_text(
        "patterns:\n  - {name: acme, regex: 'ACME-[0-9a-f]{8}'}\n"
    )
    return root


def redis_blob(redis_url: str) -> bytes:
    """Every value of every key of the bus, as bytes: where a leaked secret would be."""
    client = redis.Redis.from_url(redis_url)
    try:
        blob = b""
        for key in client.scan_iter():
            kind = client.type(key)
            if kind == b"hash":
                blob += b"".join(k + v for k, v in client.hgetall(key).items())
            elif kind == b"string":
                blob += client.get(key) or b""
            elif kind == b"zset":
                blob += b"".join(client.zrange(key, 0, -1))
        return blob
    finally:
        client.close()


def assert_no_secret(redis_url: str) -> None:
    blob = redis_blob(redis_url)
    for secret in (OPENAI, GITHUB, CUSTOM):
        assert secret.encode() not in blob


def test_context_post_says_how_many_secrets_were_replaced(redis_url: str, tmp_path: Path) -> None:
    root = project(tmp_path)
    posted = run_ateam(
        "context", "post", "rotated", OPENAI, "--content", f"old {GITHUB} and {CUSTOM}",
        "--redis", redis_url, cwd=root,
    )  # fmt: skip
    assert posted.returncode == 0, posted.stderr
    assert posted.stdout.startswith("posted ")
    assert "3 secrets replaced by ****" in posted.stderr, posted.stderr
    assert_no_secret(redis_url)

    as_json = run_ateam(
        "context", "post", "again", GITHUB, "--json", "--redis", redis_url, cwd=root
    )
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["redacted"] == 1
    assert "1 secret replaced by ****" in as_json.stderr

    clean = run_ateam("context", "post", "nothing", "secret", "--redis", redis_url, cwd=root)
    assert clean.returncode == 0 and "replaced" not in clean.stderr


def test_tasks_add_says_how_many_secrets_were_replaced(redis_url: str, tmp_path: Path) -> None:
    root = project(tmp_path)
    added = run_ateam(
        "tasks", "add", "deploy", "with", OPENAI, "--detail", f"{CUSTOM} then {GITHUB}",
        "--redis", redis_url, cwd=root,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("added ")
    assert "3 secrets replaced by ****" in added.stderr, added.stderr
    assert_no_secret(redis_url)

    as_json = run_ateam("tasks", "add", CUSTOM, "--json", "--redis", redis_url, cwd=root)
    assert as_json.returncode == 0, as_json.stderr
    task = json.loads(as_json.stdout)
    assert task["redacted"] == 1 and task["title"] == "****"


async def test_the_mcp_tools_say_how_many_secrets_were_replaced(
    redis_url: str, tmp_path: Path
) -> None:
    root = project(tmp_path)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ateam", "mcp", "--redis", redis_url],
        env=subprocess_env(),
        cwd=root,
    )
    results: dict[str, Any] = {}
    with (tmp_path / "mcp.stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for tool, args in (
                ("context_post", {"type": "status", "title": f"key {OPENAI}", "content": CUSTOM}),
                ("task_add", {"title": "push", "detail": f"with {GITHUB}"}),
                ("task_add", {"title": "nothing to hide"}),
            ):
                done = await session.call_tool(tool, args)
                assert not done.is_error, done.content
                results.setdefault(tool, []).append(done.structured_content)
    [post] = results["context_post"]
    assert post["redacted"] == 2 and OPENAI not in post["title"]
    secret_task, plain_task = results["task_add"]
    assert secret_task["redacted"] == 1 and plain_task["redacted"] == 0
    assert_no_secret(redis_url)
