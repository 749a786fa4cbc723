"""A Redis user of one project (issue 13 point 2): ``ateam acl``, then agents, verbs and a
console that see and reach their own project only.

Real processes on a server of the test's own; the other project's agent runs as the
admin user the whole time, and the project user's view of the bus is what is checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._wait import wait_for
from tests.integration.conftest import AgentFactory, ConsoleFactory, run_ateam, write_project

pytestmark = pytest.mark.integration

PASSWORD = "beta-password-0123456789"


def as_user(url: str, user: str = "ateam-beta") -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}:{PASSWORD}@{rest}"


def test_a_project_user_sees_and_reaches_its_project_only(
    own_redis: Any,
    start_agent: AgentFactory,
    start_console: ConsoleFactory,
    tmp_path: Path,
) -> None:
    admin = own_redis.url
    secret = tmp_path / "beta.password"
    secret.write_text(PASSWORD + "\n")
    made = run_ateam("acl", "beta", "--apply", "--password-file", str(secret), "--redis", admin)
    assert made.returncode == 0, made.stderr
    assert "created Redis user ateam-beta" in made.stdout and PASSWORD not in made.stdout
    beta_url = as_user(admin)

    alpha = write_project(tmp_path / "alpha", "alpha")
    beta = write_project(tmp_path / "beta", "beta")
    start_agent("alpha/zeus", cwd=alpha, redis_url=admin)
    # The project's own agent runs entirely as the project user.
    start_agent("beta/zeus", cwd=beta, redis_url=beta_url)

    ps = run_ateam("ps", "--json", "--redis", beta_url)
    assert ps.returncode == 0, ps.stderr
    assert [row["id"] for row in json.loads(ps.stdout)] == ["beta/zeus"]
    everyone = run_ateam("ps", "--json", "--redis", admin)
    assert [row["id"] for row in json.loads(everyone.stdout)] == ["alpha/zeus", "beta/zeus"]

    sent = run_ateam("send", "beta/zeus", "hello beta", "--redis", beta_url)
    assert sent.returncode == 0, sent.stderr

    def answered() -> bool:
        tail = run_ateam("tail", "beta/zeus", "--from", "1", "--redis", beta_url)
        return "echo: hello beta" in tail.stdout

    wait_for(answered, 20, "beta/zeus's answer, read as the project user")

    # The other project: unreachable, with one clear line, whatever the verb.
    for verb in (("send", "alpha/zeus", "hi"), ("tail", "alpha/zeus", "--from", "1")):
        refused = run_ateam(*verb, "--redis", beta_url)
        assert refused.returncode != 0, verb
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert lines[0].startswith("error [redis.noperm]"), lines[0]

    # A console of the project user lists its project's agents only.
    console = start_console(redis_url=beta_url)
    console.send("/ps --json")
    line = console.wait_line(lambda text: text.startswith("[{") or text.startswith("["))
    assert [row["id"] for row in json.loads(line)] == ["beta/zeus"]
