"""Failures are visible where people look (issue 25 §2), through real ``ateam`` processes.

- ``ateam ps`` shows an agent whose last task failed (``task.failed: CODE …``) until a
  task succeeds, and an agent whose model cannot work at all from the moment it starts;
- ``state/agent.log`` has a line for every task's start and end, with its error;
- ``ateam send --wait`` and a console reading a script wait for their tasks, print the
  answers and exit 5 (``task.failed``) when one failed;
- a configuration with several problems reports all of them in one run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests._wait import wait_for
from tests.integration.conftest import (
    START_TIMEOUT_S,
    AgentFactory,
    Bus,
    ConsoleFactory,
    attach_and_send,
    run_ateam,
    subprocess_env,
    write_project,
    write_scripted_project,
)

TASK_FAILED_EXIT = 5
"""``Exit.TASK_FAILED``, written out: a script compares the number, not the name."""
UNSET_KEY = "ATEAM_TEST_KEY_NOBODY_SETS"


def ps(redis_url: str, env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    listed = run_ateam("ps", "--json", "--redis", redis_url, env=env)
    assert listed.returncode == 0, listed.stderr
    return {str(row["id"]): row for row in json.loads(listed.stdout)}


def without_sdks(tmp_path: Path, *packages: str) -> dict[str, str]:
    """An environment where ``packages`` cannot be imported, as if never installed."""
    folder = tmp_path / "no-sdk"
    folder.mkdir(exist_ok=True)
    # None in sys.modules is how Python marks a module that must not import: `import`
    # raises ImportError and importlib.util.find_spec answers None, as for a missing one.
    blocked = "".join(f"sys.modules[{name!r}] = None\n" for name in packages)
    (folder / "sitecustomize.py").write_text(f"import sys\n{blocked}")
    return subprocess_env(PYTHONPATH=str(folder))


def send_wait(redis_url: str, agent: str, text: str) -> Any:
    return run_ateam("send", agent, text, "--wait", "--redis", redis_url, timeout=60)


# --- ps, send --wait and the task lines of the log ------------------------------------


def test_a_failed_task_shows_in_ps_until_the_next_one_succeeds(
    redis_url: str, start_agent: AgentFactory, tmp_path: Path
) -> None:
    root = write_scripted_project(
        tmp_path / "proj", "fails", [{"error": {"status": 401}}, {"text": "all good now"}]
    )
    agent = start_agent("fails/zeus", cwd=root)
    assert not ps(redis_url)["fails/zeus"]["alert"]

    failed = send_wait(redis_url, "fails/zeus", "first try")

    assert failed.returncode == TASK_FAILED_EXIT, failed.stdout + failed.stderr
    [line] = [ln for ln in failed.stderr.splitlines() if ln.startswith("error [task.failed]")]
    assert re.search(r"task q-\S+ of fails/zeus failed \[provider\.auth\]: ", line), line
    assert "`ateam tail fails/zeus`" in line
    row = ps(redis_url)["fails/zeus"]
    assert row["alert"].startswith("task.failed: provider.auth: "), row["alert"]
    assert row["failure"]["code"] == "provider.auth"
    assert row["state"] == "idle"
    table = run_ateam("ps", "--redis", redis_url).stdout
    assert "task.failed: provider.auth" in table

    done = send_wait(redis_url, "fails/zeus", "second try")

    assert done.returncode == 0, done.stderr
    assert done.stdout == "all good now\n"
    row = ps(redis_url)["fails/zeus"]
    assert not row["alert"] and row["failure"] is None

    # The agent's log (what the supervisor keeps as state/agent.log): both tasks, each
    # started and ended, the failure with its code and message.
    log = agent.stderr()
    assert len(re.findall(r"task q-\S+ started \(from cli, attempt 1\): first try", log)) == 1
    assert re.search(r"task q-\S+ failed \[provider\.auth\] after [\d.]+ s: \S", log), log
    assert re.search(r"task q-\S+ started \(from cli, attempt 1\): second try", log), log
    assert re.search(r"task q-\S+ done in [\d.]+ s \(model calls: 1, tokens in/out: ", log), log


def test_a_model_without_its_api_key_is_an_alert_as_soon_as_the_agent_starts(
    redis_url: str, bus: Bus, start_agent: AgentFactory, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "proj", "nokey")
    (root / ".ateam/models.yaml").write_text(
        "models:\n"
        "  - {id: gpt, provider: openai, base_url: 'http://127.0.0.1:9/v1', "
        f"api_key_env: {UNSET_KEY}}}\n"
    )
    (root / ".ateam/agents/zeus/agent.yaml").write_text("model: gpt\n")

    start_agent("nokey/zeus", cwd=root)

    # Before any task: the entry the agent registered with says it.
    expected = f"provider.auth: environment variable {UNSET_KEY} (api_key_env of model 'gpt')"
    assert (bus.entry("nokey/zeus") or {}).get("alert", "").startswith(expected)
    row = ps(redis_url)["nokey/zeus"]
    assert row["alert"].startswith(expected) and row["state"] == "idle"
    # Its first task fails as announced; the task's failure joins the standing alert.
    failed = send_wait(redis_url, "nokey/zeus", "hello")
    assert failed.returncode == TASK_FAILED_EXIT, failed.stderr
    alert = ps(redis_url)["nokey/zeus"]["alert"]
    assert alert.startswith(expected) and "; task.failed: provider.auth: " in alert


def test_a_fallback_whose_sdk_is_missing_is_an_alert_as_soon_as_the_agent_starts(
    redis_url: str, start_agent: AgentFactory, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "proj", "nosdk")
    (root / ".ateam/models.yaml").write_text(
        "models:\n  - {id: slowecho, provider: echo}\n  - {id: claude, provider: anthropic}\n"
    )
    (root / ".ateam/agents/zeus/agent.yaml").write_text("model: slowecho\nfallbacks: [claude]\n")

    start_agent("nosdk/zeus", cwd=root, env=without_sdks(tmp_path, "anthropic"))

    alert = ps(redis_url)["nosdk/zeus"]["alert"]
    assert alert == (
        "config.invalid: model 'claude' uses provider anthropic, which needs the anthropic "
        "package: pip install 'ateam[anthropic]'"
    )


def test_up_names_a_missing_sdk_and_agent_log_records_every_task(
    redis_url: str, tmp_path: Path, isolated_home: Path
) -> None:
    root = write_scripted_project(tmp_path / "proj", "team", [{"error": {"status": 401}}])
    ateam = root / ".ateam"
    (ateam / "models.yaml").write_text(
        "models:\n"
        "  - {id: script, provider: scripted, script: script.yaml}\n"
        "  - {id: gpt, provider: openai}\n"
    )
    (ateam / "agents/hera").mkdir()
    (ateam / "agents/hera/agent.yaml").write_text("model: gpt\n")
    env = without_sdks(tmp_path, "openai")
    try:
        up = run_ateam("up", str(root), "--detach", "--redis", redis_url, env=env, timeout=60)

        assert up.returncode == 1, up.stdout + up.stderr
        [hera] = [ln for ln in up.stdout.splitlines() if ln.startswith("team/hera: FAILED")]
        assert "exited with 12" in hera and "pip install 'ateam[openai]'" in hera, hera
        row = wait_for(lambda: ps(redis_url).get("team/hera"), START_TIMEOUT_S, "hera's exit")
        assert row["state"] == "exited"
        assert row["alert"].startswith("exited 12, not restarted: its configuration is invalid: ")
        assert "needs the openai package: pip install 'ateam[openai]'" in row["alert"]

        failed = send_wait(redis_url, "team/zeus", "build it")

        assert failed.returncode == TASK_FAILED_EXIT, failed.stdout + failed.stderr
        assert "[provider.auth]" in failed.stderr
        # The log `up` points at has the task's start and its end with the error.
        log_path = ateam / "agents/zeus/state/agent.log"
        assert str(log_path) in up.stdout
        log = log_path.read_text()
        started = re.search(r"task (q-\S+) started \(from cli, attempt 1\): build it", log)
        ended = re.search(r"task (q-\S+) failed \[provider\.auth\] after [\d.]+ s: \S", log)
        assert started is not None and ended is not None, log
        assert started.group(1) == ended.group(1)
        assert "Traceback" not in log
    finally:
        run_ateam("up", str(root), "--down", "--redis", redis_url, timeout=60)


# --- a console reading a script -------------------------------------------------------


def console_script(redis_url: str, script: str) -> Any:
    return run_ateam("console", "--no-ui", "--redis", redis_url, input=script, timeout=60)


def test_a_piped_console_waits_for_every_task_whatever_follows_it(
    redis_url: str, start_agent: AgentFactory, tmp_path: Path
) -> None:
    # Slow agents (50 ms a word): a console that left at once would miss every answer.
    root = write_project(tmp_path / "proj", "pipe", agents=("zeus", "hera"))
    start_agent("pipe/zeus", cwd=root)
    start_agent("pipe/hera", cwd=root)

    # Both agents work at once; the console leaves each without waiting, then waits at
    # /quit for both answers.
    done = console_script(
        redis_url,
        "/attach pipe/zeus\none two three four five\n"
        "/attach pipe/hera\nsix seven eight nine ten\n/detach\n/ps\n/quit\n",
    )

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines.count("[A:pipe/zeus] echo: one two three four five") == 1, done.stdout
    assert lines.count("[A:pipe/hera] echo: six seven eight nine ten") == 1, done.stdout
    ends = [ln for ln in lines if re.match(r"\[A:pipe/(zeus|hera)\] --- task q-\S+ done", ln)]
    assert len(ends) == 2, done.stdout
    assert "error [" not in done.stdout


def test_a_piped_console_exits_5_and_names_each_failed_task(
    redis_url: str, start_agent: AgentFactory, tmp_path: Path
) -> None:
    root = write_scripted_project(
        tmp_path / "proj", "pipefail", [{"error": {"status": 401}}, {"text": "second answer"}]
    )
    start_agent("pipefail/zeus", cwd=root)

    done = console_script(redis_url, "/attach pipefail/zeus\nfirst\nsecond\n")

    assert done.returncode == TASK_FAILED_EXIT, done.stdout + done.stderr
    assert "[A:pipefail/zeus] second answer" in done.stdout
    failures = [ln for ln in done.stdout.splitlines() if ln.startswith("error [task.failed]")]
    assert len(failures) == 1, done.stdout
    assert "of pipefail/zeus failed [provider.auth]" in failures[0]


def test_a_piped_console_whose_agent_stops_before_answering_exits_5(
    start_agent: AgentFactory, start_console: ConsoleFactory, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "proj", "gone", delay_ms=300)
    agent = start_agent("gone/zeus", cwd=root)
    console = start_console()
    attach_and_send(console, "gone/zeus", "a b c d e f g h i j k l m n o p q r s t")
    console.wait_line("--- task q-")
    console.close_stdin()  # the end of the script: the console waits for the task…

    agent.terminate()  # …which the agent cuts short and puts back in its queue as it stops

    assert console.wait_exit() == TASK_FAILED_EXIT, console.output()
    line = console.wait_line("error [task.failed]")
    # Cut short by the shutdown (its task.end says so), or gone before a task.end was read.
    assert re.search(r"task q-\S+ of gone/zeus (failed \[task\.interrupted\]|did not end)", line)


# --- several configuration problems, one run ------------------------------------------


def test_every_configuration_problem_is_reported_by_agent_up_and_ps(
    redis_url: str, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "proj", "typos", agents=("zeus", "hera"))
    ateam = root / ".ateam"
    zeus = ateam / "agents/zeus/agent.yaml"
    hera = ateam / "agents/hera/agent.yaml"
    zeus.write_text("modle: slowecho\nmax_iterations: 0\n")
    hera.write_text("model: slowech\n")
    problems = [
        f"{zeus}: modle: unknown field (did you mean 'model'?)",
        f"{zeus}: max_iterations: Input should be greater than or equal to 1",
        f"{hera}: model: unknown model 'slowech' (did you mean 'slowecho'?); known:",
    ]

    def all_listed(output: str) -> None:
        assert "error [config.invalid]: 3 problems in the configuration:" in output, output
        for problem in problems:
            assert f"\n  {problem}" in output, output
        assert "Traceback" not in output

    agent = run_ateam(
        "agent", "--project", "typos", "--name", "zeus", "--redis", redis_url, "--no-repl",
        cwd=root,
    )  # fmt: skip
    assert agent.returncode == 12
    all_listed(agent.stderr)

    up = run_ateam("up", str(root), "--detach", "--redis", redis_url)
    assert up.returncode == 4
    all_listed(up.stderr)

    listed = run_ateam("ps", "--redis", redis_url, cwd=root)
    assert listed.returncode == 0
    assert "warning: ignoring configuration: 3 problems in the configuration:" in listed.stderr
    for problem in problems:
        assert f"\n  {problem}" in listed.stderr
