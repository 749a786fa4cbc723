"""A configuration with several problems reports all of them, with a guess at each typo."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ateam.config import ConfigError, load_project
from ateam.config.problems import choices_at, did_you_mean
from ateam.config.schema import AgentSpec, ModelsFile


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def problems_of(root: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_project(root)
    return caught.value


def test_every_problem_in_every_agent_and_file_is_reported_in_one_load(tmp_path: Path) -> None:
    ateam = tmp_path / ".ateam"
    write(ateam / "models.yaml", "models: [{id: gpt-4o-mini, provider: openai}]\n")
    tools = write(ateam / "tools.yaml", "exec: {timeout_s: -1}\n")
    zeus = write(ateam / "agents/zeus/agent.yaml", "modle: echo\nmax_iterations: 0\n")
    hera = write(ateam / "agents/hera/agent.yaml", "model: gpt-4o-mnii\n")
    ares = write(ateam / "agents/ares/agent.yaml", "model: [unclosed\n")

    error = problems_of(tmp_path)

    found = {(p.file, p.field): p.message for p in error.problems}
    assert set(found) == {
        (str(tools), "exec.timeout_s"),
        (str(zeus), "modle"),
        (str(zeus), "max_iterations"),
        (str(hera), "model"),
        (str(ares), None),
    }
    assert found[(str(zeus), "modle")].endswith("unknown field (did you mean 'model'?)")
    assert (
        "unknown model 'gpt-4o-mnii' (did you mean 'gpt-4o-mini'?)" in found[(str(hera), "model")]
    )
    assert "invalid YAML at line 2" in found[(str(ares), None)]
    # One report: a count a one-line reader sees, then every problem on a line of its own.
    first, *rest = error.message.split("\n")
    assert first == "5 problems in the configuration:"
    assert sorted(line.strip() for line in rest) == sorted(found.values())
    assert error.code == "config.invalid"
    assert len(error.detail["problems"]) == 5


def test_a_problem_of_a_shared_file_is_reported_once_not_per_agent(tmp_path: Path) -> None:
    ateam = tmp_path / ".ateam"
    tools = write(ateam / "tools.yaml", "exec: {output_limit_bytes: 0}\n")
    for name in ("zeus", "hera", "ares"):
        write(ateam / f"agents/{name}/agent.yaml", "model: echo\n")

    error = problems_of(tmp_path)

    assert error.problems == (error,)
    assert error.message.startswith(f"{tools}: exec.output_limit_bytes: Input should be greater")


def test_a_registry_with_problems_does_not_make_every_agent_model_unknown(tmp_path: Path) -> None:
    ateam = tmp_path / ".ateam"
    models = write(ateam / "models.yaml", "models: [{id: gpt, provider: openia}]\n")
    write(ateam / "agents/zeus/agent.yaml", "model: gpt\n")

    error = problems_of(tmp_path)

    # The misspelt provider is the problem; "unknown model 'gpt'" would only be noise.
    assert len(error.problems) == 1
    assert error.message.startswith(f"{models}: models[0].provider: Input should be 'openai'")
    assert error.message.endswith("(did you mean 'openai'?)")


def test_one_problem_stays_one_line(tmp_path: Path) -> None:
    agent = write(tmp_path / ".ateam/agents/zeus/agent.yaml", "model: nope\n")

    error = problems_of(tmp_path)

    assert "\n" not in error.message
    assert error.message == f"{agent}: model: unknown model 'nope'; known: echo"


def test_a_guess_is_offered_only_when_something_is_close() -> None:
    assert did_you_mean("fallback", ["model", "fallbacks"]) == " (did you mean 'fallbacks'?)"
    assert did_you_mean("zzzz", ["model", "fallbacks"]) == ""
    assert did_you_mean(3, ["model"]) == ""


def test_choices_are_found_through_sections_lists_and_maps() -> None:
    assert "switch_back" in choices_at(AgentSpec, ("switching",))
    assert "approval_timeout_s" in choices_at(AgentSpec, ("tools",))
    assert "openai" in choices_at(ModelsFile, ("models", 0, "provider"))
    assert choices_at(AgentSpec, ("tools", "approval", "os.exec")) == ["allow", "ask", "deny"]
    assert choices_at(AgentSpec, ("nothing", "here")) == []
