"""A coding agent over ACP that misbehaves (issue 24 §5): bad input and faults, end to end.

Each test runs a real ``ateam agent`` on the scriptable ACP test agent
(``tests/acp_agent.py``) told to fail in one way — a login it wants, a protocol it
speaks, a handshake it never answers, lines that are not JSON-RPC, a message too big,
a crash on every attempt, a rate limit, a refusal to stop — and checks what a user
sees: the task's end with its stable code and a one-line message naming the runtime,
the alert in ``ps``, the agent still serving, the next input answered, no traceback on
the event stream and no process group left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import acp
import pytest
import yaml

from ateam.agent.acp.channel import MAX_MESSAGE_BYTES
from ateam.agent.acp.runner import CRASH_RETRIES
from ateam.constants import SHUTDOWN_HARD_S, SHUTDOWN_SOFT_S
from tests._wait import wait_for

from .conftest import (
    AcpProject,
    AgentFactory,
    AgentProcess,
    Bus,
    group_alive,
    history_turns,
    run_ateam,
    write_acp_project,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

AGENT = "f/zeus"


# --- what a user sees ---------------------------------------------------------------------


def of_type(bus: Bus, kind: str) -> list[dict[str, Any]]:
    return [body for _, body in bus.events(AGENT) if body.get("type") == kind]


def text_of(bus: Bus) -> str:
    return "".join(b.get("text", "") for b in of_type(bus, "token") if not b.get("thinking"))


def warns(bus: Bus, code: str) -> list[dict[str, Any]]:
    return [w for w in of_type(bus, "warn") if w.get("code") == code]


def send(project: AcpProject, text: str, redis_url: str) -> str:
    done = run_ateam("send", AGENT, text, "--redis", redis_url, cwd=project.root)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def wait_end(bus: Bus, task_id: str, timeout: float = 20) -> dict[str, Any]:
    return wait_for(lambda: bus.task_ends(AGENT).get(task_id), timeout, f"task {task_id} to end")


def assert_failed(end: dict[str, Any], code: str) -> str:
    """The task failed with ``code``, in one line that names the runtime; returns it."""
    assert end["ok"] is False, end
    error = str(end["error"])
    assert error.startswith(f"error [{code}]: "), error
    assert "runtime coder" in error, error
    assert "\n" not in error, error
    return error


def ps_row(project: AcpProject, redis_url: str) -> dict[str, Any]:
    ps = run_ateam("ps", "--json", "--redis", redis_url, cwd=project.root)
    assert ps.returncode == 0, ps.stderr
    (row,) = [r for r in json.loads(ps.stdout) if r["id"] == AGENT]
    return dict(row)


def assert_clean_stream(bus: Bus) -> None:
    """No traceback and no internal error ever reached the event stream."""
    for _, body in bus.events(AGENT):
        assert "Traceback" not in json.dumps(body), body
        assert body.get("code") != "internal", body


def assert_answers(project: AcpProject, bus: Bus, agent: AgentProcess, redis_url: str) -> None:
    """Still serving, and the next input runs to a good end (the script's next prompt)."""
    assert agent.running() and bus.serving(AGENT, agent.pid)
    end = wait_end(bus, send(project, "and now?", redis_url))
    assert end["ok"] is True, end
    assert "Back on my feet." in text_of(bus)


BACK = {"steps": [{"text": "Back on my feet."}]}
"""The prompt a script ends with: the input sent after the fault."""


def pgid_file(project: AcpProject) -> Path:
    return project.root / ".ateam" / "agents" / "zeus" / "state" / "runtime.pgid"


def runtime_group(project: AcpProject, timeout: float = 10) -> int:
    """The runtime's process group, once the agent has started it."""
    path = pgid_file(project)
    # Written when the runtime starts, removed when it is stopped: read it while it runs.
    return wait_for(
        lambda: int(path.read_text()),
        timeout,
        "the runtime's process group",
        ignore=(OSError, ValueError),
    )


def rewrite_script(project: AcpProject, script: dict[str, Any]) -> None:
    """The runtime fixed (upgraded, logged in): read by the next process started."""
    project.script.write_text(yaml.safe_dump(script))


def wrap_command(project: AcpProject, shell: str) -> None:
    """Start the runtime through ``sh -c``: ``shell`` first, then ``exec`` the runtime."""
    models_path = project.root / ".ateam" / "models.yaml"
    models = yaml.safe_load(models_path.read_text())
    entry = models["models"][0]
    entry["command"] = ["sh", "-c", f'{shell}\nexec "$0" "$@"', *entry["command"]]
    models_path.write_text(yaml.safe_dump(models))


# --- the handshake --------------------------------------------------------------------------


LOGIN_METHODS = [
    {"id": "login", "name": "Log in", "description": "Opens a browser"},
    {"id": "api-key", "name": "Use an API key"},
]


def test_a_runtime_that_needs_a_login_fails_the_task_and_alerts_until_it_has_one(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any, isolated_home: Path
) -> None:
    script = {"auth_required": True, "auth_methods": LOGIN_METHODS, "prompts": [BACK]}
    project = write_acp_project(tmp_path / "f", "f", script)
    agent = start_agent(AGENT, cwd=project.root)

    error = assert_failed(wait_end(bus, send(project, "do it", own_redis.url)), "runtime.auth")
    assert "needs a login" in error
    assert "Log in" in error and "Use an API key" in error  # every method it offers
    assert "log in with:" in error  # and how to do it
    alert = wait_for(lambda: ps_row(project, own_redis.url).get("alert"), 10, "the ps alert")
    assert alert.startswith("runtime.auth: ") and "Log in" in alert
    # ateam never logs in for the user: no authenticate, no credential of its own.
    assert project.sent("authenticate") == []
    written = [
        p for d in (project.root / ".ateam", isolated_home) for p in d.rglob("*") if p.is_file()
    ]
    assert not [p for p in written if any(w in p.name for w in ("auth", "cred", "token"))]
    assert not [p for p in written if "api-key" in p.read_text(errors="replace")]

    # The user logs the runtime in with its own command (here: its state says so).
    project.state.write_text(json.dumps({"authenticated": True}))
    assert_answers(project, bus, agent, own_redis.url)
    wait_for(lambda: not ps_row(project, own_redis.url).get("alert"), 10, "the alert to clear")
    assert_clean_stream(bus)


def test_a_newer_protocol_is_refused_naming_both_versions(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    script = {"protocol_version": 99, "prompts": [BACK]}
    project = write_acp_project(tmp_path / "f", "f", script)
    agent = start_agent(AGENT, cwd=project.root)

    task_id = send(project, "do it", own_redis.url)
    group = runtime_group(project)
    error = assert_failed(wait_end(bus, task_id), "runtime.protocol")
    assert "ACP version 99" in error and f"speaks version {acp.PROTOCOL_VERSION}" in error
    assert "upgrade ateam" in error
    assert project.sent("session/new") == []  # refused at the handshake, no session
    assert not group_alive(group)  # and the refused process stopped
    # A runtime of this ateam's version installed, the next input works: no restart.
    rewrite_script(project, {"prompts": [BACK]})
    assert_answers(project, bus, agent, own_redis.url)
    assert_clean_stream(bus)


def test_a_handshake_that_never_ends_times_out_and_the_hung_process_is_killed(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    # 3 s, not less: the bound covers the process's own start too (about 1 s for the
    # test agent on a busy machine), and the restarted runtime must make it.
    script = {"initialize": "hang", "prompts": [BACK]}
    project = write_acp_project(
        tmp_path / "f", "f", script, entry={"settings": {"init_timeout_s": 3}}
    )
    agent = start_agent(AGENT, cwd=project.root)

    task_id = send(project, "do it", own_redis.url)
    sent = time.monotonic()
    group = runtime_group(project)
    end = wait_end(bus, task_id, timeout=15)
    waited = time.monotonic() - sent
    error = assert_failed(end, "runtime.timeout")
    assert "did not answer initialize within 3 s" in error
    assert waited < 8, f"the task ended {waited:.1f} s after it was sent"
    wait_for(lambda: not group_alive(group), 5, "the hung runtime's group to die")

    rewrite_script(project, {"prompts": [BACK]})
    assert_answers(project, bus, agent, own_redis.url)
    assert_clean_stream(bus)


def test_a_runtime_that_exits_at_the_handshake_fails_the_task_with_its_status(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    project = write_acp_project(tmp_path / "f", "f", {"initialize": "exit", "prompts": [BACK]})
    agent = start_agent(AGENT, cwd=project.root)

    error = assert_failed(wait_end(bus, send(project, "do it", own_redis.url)), "runtime.crashed")
    assert "exited with status 3" in error  # EXIT_AT_INITIALIZE
    # A runtime that dies at the handshake is started again like one that dies mid-prompt.
    assert len(project.sent("initialize")) == CRASH_RETRIES + 1
    assert project.sent("session/prompt") == []

    rewrite_script(project, {"prompts": [BACK]})
    assert_answers(project, bus, agent, own_redis.url)
    assert_clean_stream(bus)


def test_garbage_before_the_handshakes_answer_is_warned_and_the_task_goes_on(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    project = write_acp_project(tmp_path / "f", "f", {"initialize": "garbage", "prompts": [BACK]})
    agent = start_agent(AGENT, cwd=project.root)

    end = wait_end(bus, send(project, "do it", own_redis.url))
    assert end["ok"] is True, end
    (warn,) = warns(bus, "runtime.protocol")
    assert "runtime coder wrote a line that is not JSON-RPC: this is not json" in warn["msg"]
    assert warn["task_id"] == end["task_id"]
    assert agent.running() and bus.serving(AGENT, agent.pid)
    assert_clean_stream(bus)


# --- mid-prompt -----------------------------------------------------------------------------


def test_lines_that_are_not_json_rpc_objects_are_warned_and_the_prompt_goes_on(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    steps = [
        {"text": "Before. "},
        {"garbage": "npm WARN deprecated left-pad@1.0.0"},
        {"raw": [1, 2]},
        {"raw": 42},
        {"text": "After."},
    ]
    project = write_acp_project(tmp_path / "f", "f", {"prompts": [{"steps": steps}, BACK]})
    agent = start_agent(AGENT, cwd=project.root)

    end = wait_end(bus, send(project, "do it", own_redis.url))
    assert end["ok"] is True, end
    assert text_of(bus) == "Before. After."
    said = [w["msg"] for w in warns(bus, "runtime.protocol")]
    assert len(said) == 3, said
    assert all(m.startswith("runtime coder wrote a line that is not JSON-RPC: ") for m in said)
    assert said[0].endswith("npm WARN deprecated left-pad@1.0.0")
    assert said[1].endswith("[1,2]") and said[2].endswith("42")
    assert_answers(project, bus, agent, own_redis.url)
    assert_clean_stream(bus)


def test_an_unknown_update_and_malformed_json_rpc_are_never_fatal(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    def update(body: dict[str, Any]) -> dict[str, Any]:
        params = {"sessionId": "sess-1", "update": body}
        return {"raw": {"jsonrpc": "2.0", "method": "session/update", "params": params}}

    steps = [
        {"text": "One. "},
        update({"sessionUpdate": "hologram_projection", "beams": 3}),  # a kind from the future
        update({"sessionUpdate": "agent_message_chunk", "content": "not a block"}),
        {"raw": {"jsonrpc": "2.0", "id": 9999, "result": {}}},  # a reply to nothing
        {"raw": {"jsonrpc": "2.0", "method": 17}},  # a method that is not a string
        {"raw": {"hello": "world"}},  # an object, but no JSON-RPC at all
        {"raw": {"jsonrpc": "2.0", "id": 77, "method": "editor/teleport", "params": {}}},
        {"text": "Two."},
    ]
    project = write_acp_project(tmp_path / "f", "f", {"prompts": [{"steps": steps}, BACK]})
    agent = start_agent(AGENT, cwd=project.root)

    end = wait_end(bus, send(project, "do it", own_redis.url))
    assert end["ok"] is True, end
    assert text_of(bus) == "One. Two."
    # A request for a method ateam does not have is answered so, not left hanging.
    (reply,) = [line for line in project.sent() if line.get("id") == 77]
    assert reply["error"]["code"] == -32601
    assert_answers(project, bus, agent, own_redis.url)
    assert_clean_stream(bus)


def test_a_message_over_the_cap_fails_the_task_and_the_runtime_starts_again(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    too_big, fine = 10 * 1024 * 1024, 4 * 1024 * 1024
    assert fine < MAX_MESSAGE_BYTES < too_big
    script = {
        "prompts": [
            {"steps": [{"big": too_big}, {"text": "never seen"}]},
            {"steps": [{"big": fine}, {"text": " and that is all"}]},
            BACK,
        ]
    }
    project = write_acp_project(tmp_path / "f", "f", script)
    agent = start_agent(AGENT, cwd=project.root)

    task_id = send(project, "flood me", own_redis.url)
    group = runtime_group(project)
    error = assert_failed(wait_end(bus, task_id), "runtime.protocol")
    assert "sent a message of more than 8 MiB" in error
    wait_for(lambda: not group_alive(group), 10, "the flooding runtime to be stopped")

    # Under the cap: taken whole, and the runtime (started again) answers.
    task_id = send(project, "a big one", own_redis.url)
    end = wait_end(bus, task_id, timeout=30)
    assert end["ok"] is True, end
    (answer,) = [
        t for t in history_turns(project.root) if t["task_id"] == task_id and t.get("final")
    ]
    assert len(answer["content"]) == fine + len(" and that is all")
    assert text_of(bus).endswith(" and that is all")
    assert runtime_group(project) != group
    assert_answers(project, bus, agent, own_redis.url)
    assert_clean_stream(bus)


def test_a_crash_on_every_attempt_fails_after_the_retries_with_status_and_stderr(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    crash = {"steps": [{"text": "Trying. "}, {"crash": 7}]}
    attempts = CRASH_RETRIES + 1
    project = write_acp_project(tmp_path / "f", "f", {"prompts": [crash] * attempts + [BACK]})
    wrap_command(project, "echo 'panic: the model socket went away' >&2")
    agent = start_agent(AGENT, cwd=project.root)

    error = assert_failed(wait_end(bus, send(project, "do it", own_redis.url)), "runtime.crashed")
    assert "exited with status 7: panic: the model socket went away" in error
    assert len(project.sent("session/prompt")) == attempts
    again = warns(bus, "runtime.crashed")
    assert len(again) == CRASH_RETRIES
    assert all("starting it again" in w["msg"] for w in again)
    assert_answers(project, bus, agent, own_redis.url)
    assert_clean_stream(bus)


def test_a_rate_limit_is_retried_then_fails_as_the_providers_rate_limit(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    limited = {
        "steps": [
            {
                "error": {
                    "code": -32603,
                    "message": "Internal error",
                    "data": {"message": "rate limit exceeded", "status": 429},
                }
            }
        ]
    }
    project = write_acp_project(
        tmp_path / "f",
        "f",
        {"prompts": [limited, limited, BACK]},
        agent_yaml={"switching": {"retries": 1, "retry_backoff_s": 0.2}},
    )
    agent = start_agent(AGENT, cwd=project.root)

    error = assert_failed(
        wait_end(bus, send(project, "do it", own_redis.url)), "provider.rate_limited"
    )
    assert "rate limit exceeded" in error
    (retry,) = warns(bus, "provider.retry")
    assert retry["msg"].startswith("coder: error [provider.rate_limited]: ")
    assert "retrying in 0.2 s" in retry["msg"]
    assert len(project.sent("session/prompt")) == 2
    assert_answers(project, bus, agent, own_redis.url)
    assert_clean_stream(bus)


# --- stopping -------------------------------------------------------------------------------


def test_sigterm_stops_the_agent_in_bounds_with_a_runtime_that_ignores_every_stop(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    stubborn = {"ignore_cancel": True, "steps": [{"text": "Busy."}, {"hang": True}]}
    project = write_acp_project(
        tmp_path / "f", "f", {"ignore_shutdown": True, "prompts": [stubborn]}
    )
    agent = start_agent(AGENT, cwd=project.root)
    send(project, "never ends", own_redis.url)
    wait_for(lambda: "Busy." in text_of(bus), 20, "the prompt to start")
    group = runtime_group(project)

    started = time.monotonic()
    code = agent.terminate(timeout=20)
    took = time.monotonic() - started
    assert code == 0, agent.stderr()
    # The cooperative stop, then the hard one (the group killed), then the bus steps.
    assert took < SHUTDOWN_SOFT_S + SHUTDOWN_HARD_S + 4, f"the agent took {took:.1f} s to stop"
    assert project.sent("session/cancel")  # asked first, as any stop does
    assert not group_alive(group)
    assert not pgid_file(project).exists()
    assert_clean_stream(bus)


def test_kill_9_takes_the_runtime_along_and_the_next_start_kills_what_it_left(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path, own_redis: Any
) -> None:
    script = {"prompts": [{"steps": [{"text": "Working."}, {"hang": True}]}, BACK]}
    project = write_acp_project(tmp_path / "f", "f", script)
    # The runtime leaves a child in its group, as a node wrapper or a build would.
    wrap_command(project, "sleep 300 </dev/null >/dev/null 2>&1 &")
    agent = start_agent(AGENT, cwd=project.root)
    send(project, "long job", own_redis.url)
    wait_for(lambda: "Working." in text_of(bus), 20, "the prompt to start")
    group = runtime_group(project)
    assert len(group_alive(group)) == 2

    agent.kill9()
    # The whole group dies with the agent, its child included: the kernel kills the
    # runtime itself (PR_SET_PDEATHSIG) and the guard, whose pipe only the agent held,
    # kills the rest. Nothing waits for the agent's next start.
    wait_for(lambda: not group_alive(group), 10, "the whole group to die with the agent")
    start_agent(AGENT, cwd=project.root)
    end = wait_for(lambda: bus.task_end_list(AGENT), 20, "the input to run again")[-1]
    assert end["ok"] is True, end
    assert_clean_stream(bus)


def test_a_leftover_group_recorded_by_a_previous_instance_is_killed_at_start(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path
) -> None:
    project = write_acp_project(tmp_path / "f", "f", {"prompts": [BACK]})
    leftover = subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        state = project.root / ".ateam" / "agents" / "zeus" / "state"
        state.mkdir(parents=True, exist_ok=True)
        pgid_file(project).write_text(f"{os.getpgid(leftover.pid)}\n")
        start_agent(AGENT, cwd=project.root)
        assert leftover.wait(10) == -signal.SIGKILL
        assert not pgid_file(project).exists()
        # Said where people look, not only in the log.
        (warn,) = [body for _, body in bus.events(AGENT) if body.get("code") == "runtime.leftover"]
        assert str(os.getpgid(os.getpid())) not in warn["msg"]
        assert "previous instance" in warn["msg"]
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()
