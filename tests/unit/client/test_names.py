"""Bare names and unique prefixes: which agent or task a typed text names."""

from __future__ import annotations

import pytest

from ateam.client.names import resolve_agent, resolve_task
from ateam.errors import AmbiguousName, Code, UsageError
from ateam.exits import Exit, cli_exit_code

AGENTS = ["hello/zeus", "hello/hera", "hello/hermes", "hello/ze", "other/zeus", "other/ares"]


@pytest.mark.parametrize(
    ("given", "project", "meant"),
    [
        ("zeus", "hello", "hello/zeus"),  # a bare name, in its project
        ("zeu", "hello", "hello/zeus"),  # a unique prefix
        ("ze", "hello", "hello/ze"),  # exact beats prefix
        ("hera", "hello", "hello/hera"),  # a name that is also a prefix of another
        ("hello/herm", None, "hello/hermes"),  # a full id cut short
        ("other/zeus", "hello", "other/zeus"),  # a full id, whatever the project
        ("ar", None, "other/ares"),  # no project: unique across every project
        ("apollo", "hello", "hello/apollo"),  # no match: as typed, for the lookup to refuse
        ("hello/apollo", None, "hello/apollo"),
    ],
)
def test_a_name_or_a_unique_prefix_names_one_agent(
    given: str, project: str | None, meant: str
) -> None:
    assert resolve_agent(given, AGENTS, project=project) == meant


def test_an_ambiguous_prefix_lists_the_candidates_with_a_stable_code() -> None:
    with pytest.raises(AmbiguousName) as caught:
        resolve_agent("he", AGENTS, project="hello")

    error = caught.value
    assert error.code == Code.NAME_AMBIGUOUS == "name.ambiguous"
    assert error.detail["candidates"] == ["hello/hera", "hello/hermes"]
    assert error.one_line() == (
        "error [name.ambiguous]: 'he' could be any of the agents of hello: hello/hera, "
        "hello/hermes; type more of the name"
    )
    assert cli_exit_code(error) == Exit.USAGE


def test_one_name_in_two_projects_is_ambiguous_without_a_project() -> None:
    with pytest.raises(AmbiguousName, match=r"several projects: hello/zeus, other/zeus; give"):
        resolve_agent("zeus", AGENTS, project=None)


def test_a_bare_name_that_matches_nothing_and_has_no_project_says_what_to_give() -> None:
    with pytest.raises(UsageError, match="PROJECT/NAME") as caught:
        resolve_agent("apollo", AGENTS, project=None)
    assert caught.value.code == Code.BAD_REQUEST


def test_a_long_candidate_list_is_cut_and_counted() -> None:
    many = [f"p/a{i:02d}" for i in range(12)]
    with pytest.raises(AmbiguousName, match=r"p/a07 and 4 more"):
        resolve_agent("a", many, project="p")


TASKS = ["t-3f2a91c0de", "t-3f9b000000", "t-aa00000000"]


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("3f2", "t-3f2a91c0de"),  # without its t-
        ("t-3f2", "t-3f2a91c0de"),  # with it
        ("aa", "t-aa00000000"),
        ("t-aa00000000", "t-aa00000000"),
        ("beef", "beef"),  # no match: as typed, for the board to refuse
    ],
)
def test_a_task_prefix_with_or_without_its_t_names_one_task(given: str, meant: str) -> None:
    assert resolve_task(given, TASKS) == meant


def test_an_ambiguous_task_prefix_lists_the_tasks() -> None:
    with pytest.raises(AmbiguousName, match=r"t-3f2a91c0de, t-3f9b000000"):
        resolve_task("3f", TASKS)
