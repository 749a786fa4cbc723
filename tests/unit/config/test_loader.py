"""Configuration: discovery, merge rules, schemas and error messages (SPEC §3)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from ateam.config import (
    Approval,
    ConfigError,
    Provider,
    agent_dir_for,
    discover,
    load_project,
    standalone_agent,
)

REPO = Path(__file__).resolve().parents[3]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def config_error(start: Path, **kwargs: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_project(start, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.fixture
def outer(tmp_path: Path) -> Path:
    """A parent project directory; ``inner`` nests inside it."""
    return tmp_path / "outer"


@pytest.fixture
def inner(outer: Path) -> Path:
    return outer / "inner"


# --- discovery --------------------------------------------------------------------------


def test_discover_lists_nearest_first_then_home(
    outer: Path, inner: Path, isolated_home: Path
) -> None:
    (outer / ".ateam").mkdir(parents=True)
    (inner / ".ateam").mkdir(parents=True)
    start = inner / "src" / "pkg"
    start.mkdir(parents=True)

    assert discover(start) == [inner / ".ateam", outer / ".ateam", isolated_home]
    # A file as start behaves like its directory.
    assert discover(write(start / "mod.py", "")) == discover(start)


def test_discover_lists_home_once_and_only_if_it_exists(
    outer: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (outer / ".ateam").mkdir(parents=True)
    monkeypatch.setenv("ATEAM_HOME", str(outer / ".ateam"))
    assert discover(outer) == [outer / ".ateam"]

    monkeypatch.setenv("ATEAM_HOME", str(tmp_path / "missing"))
    assert discover(outer) == [outer / ".ateam"]


def test_load_project_root_must_contain_ateam_dir(tmp_path: Path) -> None:
    message = config_error(tmp_path, root=tmp_path)
    assert f"no .ateam/ directory in {tmp_path}" in message


# --- merge rules ------------------------------------------------------------------------


def test_scalars_nearest_wins_and_mappings_merge_recursively(
    outer: Path, inner: Path, isolated_home: Path
) -> None:
    write(
        isolated_home / "tools.yaml",
        """
        transport: {url: "redis://bus:6379/0", username: far-user}
        exec: {timeout_s: 10, output_limit_bytes: 100, cpu_s: 7}
        """,
    )
    write(outer / ".ateam/tools.yaml", "exec: {timeout_s: 20, output_limit_bytes: 200}\n")
    write(inner / ".ateam/tools.yaml", "exec: {timeout_s: 30}\ntransport: {username: near}\n")

    project = load_project(inner)

    assert project.exec.timeout_s == 30
    assert project.exec.output_limit_bytes == 200
    assert project.exec.cpu_s == 7
    assert project.transport.url == "redis://bus:6379/0"
    assert project.transport.username == "near"


def test_lists_concatenate_nearest_first_and_dedupe_by_id(
    outer: Path, inner: Path, isolated_home: Path
) -> None:
    write(
        isolated_home / "models.yaml",
        """
        models:
          - {id: shared, provider: openai, context_window: 300}
          - {id: far, provider: anthropic}
        """,
    )
    write(
        inner / ".ateam/models.yaml",
        "models: [{id: shared, provider: openai, context_window: 100}]\n",
    )
    write(outer / ".ateam/models.yaml", "models: [{id: middle, provider: openai}]\n")

    project = load_project(inner)

    assert list(project.models) == ["shared", "middle", "far", "echo"]
    assert project.models["shared"].context_window == 100


def test_lists_dedupe_by_name(outer: Path, inner: Path) -> None:
    write(
        outer / ".ateam/redact.yaml",
        """
        patterns:
          - {name: token, regex: "far"}
          - {name: other, regex: "x+"}
        """,
    )
    write(inner / ".ateam/redact.yaml", "patterns: [{name: token, regex: near}]\n")

    patterns = load_project(inner).redact_patterns

    assert [(p.name, p.regex) for p in patterns] == [("token", "near"), ("other", "x+")]
    assert patterns[1].compile().fullmatch("xxx")


def test_plain_lists_dedupe_by_value(outer: Path, inner: Path) -> None:
    write(outer / ".ateam/tools.yaml", "tools: {allow: [b.*, c.*], deny: [x.y]}\n")
    write(inner / ".ateam/tools.yaml", "tools: {allow: [a.*, b.*]}\n")

    tools = load_project(inner).tools

    assert tools.allow == ("a.*", "b.*", "c.*")
    assert tools.deny == ("x.y",)


def test_nearest_agent_dir_is_taken_whole(outer: Path, inner: Path, isolated_home: Path) -> None:
    write(
        isolated_home / "models.yaml",
        "models: [{id: big, provider: openai}]\n",
    )
    write(
        outer / ".ateam/agents/zeus/agent.yaml",
        """
        description: the outer zeus
        fallbacks: [big]
        cwd: somewhere
        """,
    )
    write(outer / ".ateam/agents/hera/agent.yaml", "description: only outside\n")
    write(inner / ".ateam/agents/zeus/agent.yaml", "model: echo\n")
    # A directory without agent.yaml (leftovers) does not shadow a farther agent.
    (inner / ".ateam/agents/hera/state").mkdir(parents=True)
    (inner / ".ateam/agents/.hidden").mkdir()

    project = load_project(inner)

    zeus = project.agent("zeus")
    assert zeus.dir == inner / ".ateam/agents/zeus"
    assert zeus.spec.description == ""
    assert zeus.fallbacks == ()
    assert zeus.cwd == inner
    assert project.agent("hera").dir == outer / ".ateam/agents/hera"
    assert set(project.agents) == {"zeus", "hera"}


def test_agent_exec_is_one_more_layer_over_tools_yaml(outer: Path) -> None:
    write(
        outer / ".ateam/tools.yaml",
        "exec: {timeout_s: 100, env_allow: [FAR], inherit_env: true}\ntools: {allow: [kb.*]}\n",
    )
    write(
        outer / ".ateam/agents/zeus/agent.yaml",
        "exec: {cpu_s: 5, env_allow: [NEAR, FAR]}\ntools: {allow: [fs.*]}\n",
    )

    zeus = load_project(outer).agent("zeus")

    assert zeus.exec.timeout_s == 100
    assert zeus.exec.cpu_s == 5
    assert zeus.exec.inherit_env is True
    assert zeus.exec.env_allow == ("NEAR", "FAR")
    assert zeus.tools_allow == ("fs.*", "kb.*")


def test_empty_values_mean_not_set(outer: Path, inner: Path) -> None:
    write(outer / ".ateam/tools.yaml", "exec: {timeout_s: 42}\n")
    write(inner / ".ateam/tools.yaml", "exec:\n  # timeout_s: 1\ntransport:\n")
    write(inner / ".ateam/project.yaml", "")

    assert load_project(inner).exec.timeout_s == 42


# --- names, paths and defaults ----------------------------------------------------------


def test_project_name_defaults_to_directory_of_nearest_ateam(outer: Path, inner: Path) -> None:
    (outer / ".ateam").mkdir(parents=True)
    (inner / ".ateam").mkdir(parents=True)
    (inner / "deep").mkdir()

    project = load_project(inner / "deep")

    assert project.name == "inner"
    assert project.root == inner


def test_project_name_from_project_yaml_and_namespace(outer: Path) -> None:
    write(outer / ".ateam/project.yaml", "name: myproj\nnamespace: team1\n")
    write(outer / ".ateam/tools.yaml", "transport: {namespace: 'other:'}\n")

    project = load_project(outer)

    assert project.name == "myproj"
    assert project.namespace == "team1:"


def test_without_project_dir_root_is_none_and_home_is_not_a_project(
    tmp_path: Path, isolated_home: Path
) -> None:
    write(isolated_home / "agents/helper/agent.yaml", "description: everywhere\n")
    work = tmp_path / "work"
    work.mkdir()

    project = load_project(work)

    assert project.root is None
    assert project.name == "work"
    assert project.namespace == "ateam:"
    assert project.dirs == [isolated_home]
    assert project.agent("helper").cwd == work


def test_cwd_and_whitelist_resolve_against_project_root(outer: Path) -> None:
    write(
        outer / ".ateam/agents/zeus/agent.yaml",
        "cwd: src/../app\nfs: {whitelist: [shared, /opt/data]}\n",
    )

    zeus = load_project(outer / ".ateam").agent("zeus")

    assert zeus.cwd == outer / "app"
    assert zeus.fs_whitelist == (outer / "shared", Path("/opt/data"))
    assert zeus.state_dir == outer / ".ateam/agents/zeus/state"
    assert zeus.base_prompt_path == outer / ".ateam/agents/zeus/system_base.md"
    assert zeus.id == "outer/zeus"


def test_transport_password_env_and_tls(outer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(
        outer / ".ateam/tools.yaml",
        """
        transport:
          url: redis://example:6380/0
          password: literal
          password_env: TEST_ATEAM_PW
          tls: true
          ca_file: certs/ca.pem
        """,
    )
    monkeypatch.setenv("TEST_ATEAM_PW", "from-env")

    transport = load_project(outer).transport

    assert transport.url == "rediss://example:6380/0"
    assert transport.password == "from-env"
    assert "from-env" not in repr(transport)
    assert transport.ca_file == str(outer / ".ateam/certs/ca.pem")


def test_builtin_echo_model_exists_without_models_yaml(outer: Path) -> None:
    write(outer / ".ateam/agents/zeus/agent.yaml", "description: no model named\n")

    project = load_project(outer)

    assert project.models["echo"].provider is Provider.ECHO
    assert project.default_model == "echo"
    zeus = project.agent("zeus")
    assert zeus.model == "echo"
    assert zeus.model_entry().provider is Provider.ECHO


def test_models_yaml_can_redefine_echo_and_set_default(outer: Path) -> None:
    write(
        outer / ".ateam/models.yaml",
        """
        models:
          - {id: echo, provider: echo, context_window: 100}
          - id: gpt
            provider: openai
            model: gpt-4o-mini
            settings: {temperature: 0.1, top_p: 0.9}
        default: gpt
        """,
    )
    write(outer / ".ateam/agents/zeus/agent.yaml", "fallbacks: [echo]\n")

    project = load_project(outer)

    assert project.models["echo"].context_window == 100
    zeus = project.agent("zeus")
    assert zeus.model == "gpt"
    assert zeus.model_entry().model == "gpt-4o-mini"
    assert zeus.model_entry().settings.as_kwargs() == {"temperature": 0.1, "top_p": 0.9}
    assert project.models["echo"].model == "echo"  # `model` defaults to the id


def test_scripted_script_resolves_against_defining_ateam_dir(
    outer: Path, isolated_home: Path
) -> None:
    write(
        isolated_home / "models.yaml",
        "models: [{id: demo, provider: scripted, script: scripts/demo.yaml}]\n",
    )
    write(
        outer / ".ateam/models.yaml", "models: [{id: near, provider: scripted, script: s.yaml}]\n"
    )
    (outer / "sub").mkdir()

    models = load_project(outer / "sub").models

    assert models["demo"].script == isolated_home / "scripts/demo.yaml"
    assert models["near"].script == outer / ".ateam/s.yaml"


def test_standalone_agent_lives_under_home_projects(tmp_path: Path, isolated_home: Path) -> None:
    assert agent_dir_for("proj", "zeus") == isolated_home / "projects/proj/agents/zeus"

    agent = standalone_agent("proj", "zeus", tmp_path)

    assert agent.dir == isolated_home / "projects/proj/agents/zeus"
    assert agent.state_dir == agent.dir / "state"
    assert agent.cwd == tmp_path
    assert agent.model == "echo"
    assert agent.model_entry().provider is Provider.ECHO
    assert agent.tools_allow == ()


def test_standalone_agent_inherits_loaded_config(outer: Path) -> None:
    write(outer / ".ateam/models.yaml", "models: [{id: gpt, provider: openai}]\ndefault: gpt\n")
    write(outer / ".ateam/tools.yaml", "exec: {timeout_s: 5}\ntools: {allow: [fs.read]}\n")

    agent = standalone_agent("proj", "solo", outer, config=load_project(outer))

    assert agent.model == "gpt"
    assert agent.exec.timeout_s == 5
    assert agent.tools_allow == ("fs.read",)


@pytest.mark.parametrize("bad", ["../escape", "a/b", "", "has space"])
def test_invalid_names_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError):
        standalone_agent("proj", bad, tmp_path)
    with pytest.raises(ConfigError):
        agent_dir_for(bad, "zeus")


def test_unknown_agent_lists_configured_ones(outer: Path) -> None:
    write(outer / ".ateam/agents/zeus/agent.yaml", "")
    write(outer / ".ateam/agents/hera/agent.yaml", "")

    with pytest.raises(ConfigError, match=r"unknown agent 'ares'.*configured: hera, zeus"):
        load_project(outer).agent("ares")


# --- errors -----------------------------------------------------------------------------


def test_invalid_yaml_names_file_line_and_column(outer: Path) -> None:
    path = write(outer / ".ateam/tools.yaml", "exec:\n  timeout_s: 5\n  bad: value: x\n")

    assert config_error(outer) == (
        f"{path}: invalid YAML at line 3, column 13: mapping values are not allowed here"
    )


def test_top_level_must_be_a_mapping(outer: Path) -> None:
    path = write(outer / ".ateam/project.yaml", "- just\n- a list\n")

    assert config_error(outer) == f"{path}: the top level must be a mapping, not a list"


def test_unreadable_file(outer: Path) -> None:
    (outer / ".ateam/models.yaml").mkdir(parents=True)

    assert config_error(outer).startswith(f"{outer / '.ateam/models.yaml'}: cannot read")


def test_unknown_field_names_field_path(outer: Path) -> None:
    path = write(
        outer / ".ateam/agents/zeus/agent.yaml",
        "switching: {switch_at: 0.9, swtich_back: 0.3}\n",
    )

    assert config_error(outer) == (
        f"{path}: switching.swtich_back: unknown field (did you mean 'switch_back'?)"
    )


def test_schema_violation_message_format(outer: Path) -> None:
    path = write(outer / ".ateam/agents/zeus/agent.yaml", "switching: {switch_at: 1.5}\n")

    assert config_error(outer) == (
        f"{path}: switching.switch_at: Input should be less than or equal to 1"
    )


def test_switch_back_must_be_below_switch_at(outer: Path) -> None:
    path = write(
        outer / ".ateam/agents/zeus/agent.yaml",
        "switching: {switch_at: 0.6, switch_back: 0.7}\n",
    )

    assert config_error(outer) == (
        f"{path}: switching.switch_back: must be less than switch_at (0.6)"
    )


def test_wrong_section_type_is_explained(outer: Path) -> None:
    path = write(outer / ".ateam/tools.yaml", "exec: 5\n")

    assert config_error(outer) == f"{path}: exec: must be a mapping, not a number"


def test_unknown_model_in_fallbacks_names_index(outer: Path) -> None:
    write(outer / ".ateam/models.yaml", "models: [{id: gpt, provider: openai}]\n")
    path = write(outer / ".ateam/agents/zeus/agent.yaml", "fallbacks: [gpt, nope]\n")

    message = config_error(outer)

    assert message.startswith(f"{path}: fallbacks[1]: unknown model 'nope'")
    assert "known: gpt, echo" in message

    write(outer / ".ateam/agents/zeus/agent.yaml", "fallbacks: [nope]\n")
    assert config_error(outer).startswith(f"{path}: fallbacks[0]: unknown model 'nope'")


def test_unknown_primary_and_default_model(outer: Path) -> None:
    agent = write(outer / ".ateam/agents/zeus/agent.yaml", "model: gpt9\n")
    assert config_error(outer).startswith(f"{agent}: model: unknown model 'gpt9'")

    agent.unlink()
    models = write(outer / ".ateam/models.yaml", "default: gpt9\n")
    assert config_error(outer).startswith(f"{models}: default: unknown model 'gpt9'")


def test_bad_regex_in_redact_yaml(outer: Path) -> None:
    path = write(
        outer / ".ateam/redact.yaml",
        "patterns:\n  - {name: ok, regex: 'a+'}\n  - {name: broken, regex: '[unclosed'}\n",
    )

    message = config_error(outer)

    assert message.startswith(
        f"{path}: patterns[1].regex: invalid regular expression at line 3:"
    ), message


def test_bad_regex_in_block_style_redact_yaml_names_its_line(outer: Path) -> None:
    path = write(
        outer / ".ateam/redact.yaml",
        "# extra secrets\npatterns:\n  - name: ok\n    regex: 'a+'\n"
        "  - name: broken\n    regex: '(unclosed'\n",
    )

    message = config_error(outer)

    assert message.startswith(f"{path}: patterns[1].regex: invalid regular expression at line 6:")
    assert "\n" not in message and "Traceback" not in message


def test_error_in_farther_file_points_at_that_file_and_its_index(
    outer: Path, isolated_home: Path
) -> None:
    write(outer / ".ateam/models.yaml", "models: [{id: a, provider: openai}]\n")
    far = write(
        isolated_home / "models.yaml",
        "models:\n  - {id: b, provider: openia}\n",
    )

    message = config_error(outer)

    assert message.startswith(f"{far}: models[0].provider: Input should be 'openai'")


def test_scripted_model_needs_a_script(outer: Path) -> None:
    path = write(outer / ".ateam/models.yaml", "models: [{id: s, provider: scripted}]\n")

    assert config_error(outer) == f"{path}: models[0]: a scripted model needs `script: PATH`"


def test_duplicate_id_in_one_file_is_an_error(outer: Path) -> None:
    path = write(
        outer / ".ateam/models.yaml",
        "models: [{id: a, provider: echo}, {id: a, provider: openai}]\n",
    )

    assert config_error(outer) == f"{path}: models[1].id: duplicate id 'a' (first at models[0])"


def test_approval_keys_with_dots_are_quoted_in_errors(outer: Path) -> None:
    path = write(
        outer / ".ateam/agents/zeus/agent.yaml",
        "tools: {approval: {fs.patch: ask, os.exec: maybe}}\n",
    )

    message = config_error(outer)

    assert message.startswith(f'{path}: tools.approval["os.exec"]: Input should be')


def test_invalid_agent_directory_name(outer: Path) -> None:
    write(outer / ".ateam/agents/bad name/agent.yaml", "")

    assert "invalid agent name 'bad name'" in config_error(outer)


# --- shipped configurations -------------------------------------------------------------


def test_template_loads_cleanly(tmp_path: Path) -> None:
    project_dir = tmp_path / "myproj"
    shutil.copytree(REPO / ".ateam.example", project_dir / ".ateam")

    project = load_project(root=project_dir)

    assert project.name == "myproj"
    zeus = project.agent("zeus")
    assert zeus.model == "echo"
    assert zeus.approval["fs.patch"] is Approval.ASK
    assert zeus.base_prompt_path.is_file()
    assert zeus.overlay_prompt_path.is_file()
    assert project.redact_patterns


def test_hello_example_loads_two_echo_agents_and_a_scripted_one(tmp_path: Path) -> None:
    project_dir = tmp_path / "hello-copy"
    shutil.copytree(REPO / "examples/hello/.ateam", project_dir / ".ateam")

    project = load_project(root=project_dir)

    assert project.name == "hello"
    assert sorted(project.agents) == ["ares", "hera", "zeus"]
    providers = {name: agent.model_entry().provider for name, agent in project.agents.items()}
    assert providers == {"ares": Provider.SCRIPTED, "hera": Provider.ECHO, "zeus": Provider.ECHO}
    for agent in project.agents.values():
        assert agent.base_prompt_path.is_file()
        assert agent.overlay_prompt_path.is_file()
