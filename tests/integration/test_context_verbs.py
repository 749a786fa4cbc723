"""``ateam context ls|post|search`` and the console's ``/context search`` (issue 12 point 1).

Real ``ateam`` processes on the test's Redis; search ranks by meaning with the KB's
offline embedder, so a query that shares no exact phrase with an item still finds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest import ConsoleFactory, run_ateam

pytestmark = pytest.mark.integration


def ctx(redis_url: str, *args: str) -> tuple[int, str, str]:
    done = run_ateam("context", *args, "--project", "acme", "--redis", redis_url)
    return done.returncode, done.stdout, done.stderr


def test_post_list_and_search_by_meaning(redis_url: str) -> None:
    posts = [
        ("staging database moved to db2.internal", "--tags", "db", "--urgency", "attention"),
        ("lunch is at noon",),
        ("login test is flaky on CI", "--type", "alert"),
    ]
    for words in posts:
        code, out, err = ctx(redis_url, "post", *words)
        assert code == 0, err
        assert out.startswith("posted c-")
    code, out, _ = ctx(redis_url, "ls", "--json")
    assert code == 0
    listed = json.loads(out)
    assert listed[0]["title"] == "login test is flaky on CI"  # newest first
    assert {i["source_runtime"] for i in listed} == {"cli"}

    code, out, _ = ctx(redis_url, "search", "where", "is", "the", "staging", "DB", "--json")
    assert code == 0
    found = json.loads(out)
    assert found[0]["title"] == "staging database moved to db2.internal"
    assert "lunch is at noon" not in [i["title"] for i in found]

    code, out, _ = ctx(redis_url, "search", "quantum", "entanglement")
    assert code == 0 and "no context item in acme matches" in out


@pytest.mark.parametrize(
    ("args", "code_text"),
    [
        (("post", "x" * 300), "title"),
        (("post", "ok", "--tags", "bad tag!"), "tags"),
        (("search", "   "), "query"),
    ],
)
def test_bad_input_is_one_line_with_a_code(
    redis_url: str, args: tuple[str, ...], code_text: str
) -> None:
    code, out, err = ctx(redis_url, *args)
    assert code == 4, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error [bad_request]") and code_text in lines[0]
    assert "Traceback" not in err


def test_the_console_searches_the_team_context(
    start_console: ConsoleFactory, redis_url: str, tmp_path: Path
) -> None:
    # The console runs in tmp_path: make that project acme.
    (tmp_path / ".ateam").mkdir()
    (tmp_path / ".ateam" / "project.yaml").write_text("name: acme\n")
    assert ctx(redis_url, "post", "deploy freeze until friday", "--type", "decision")[0] == 0
    assert ctx(redis_url, "post", "coffee machine fixed")[0] == 0
    console = start_console()
    console.send("/context search when can we deploy again")
    line = console.wait_line(lambda line: "deploy freeze until friday" in line)
    assert "decision" in line
    assert "coffee machine" not in console.output()
