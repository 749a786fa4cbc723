"""The working context (SPEC §8): kept lists, expiry, the render budget, summarisation."""

from __future__ import annotations

import json
import re
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ateam._fs import Problem
from ateam.agent.context.working import (
    DECISIONS_KEEP,
    FAILURES_KEEP,
    RESUMMARIZE_EVERY,
    SUMMARY_MAX_TOKENS,
    Budget,
    WorkingContext,
)
from ateam.errors import StorageError
from ateam.providers import Chunk, Message, ScriptedProvider
from ateam.providers.base import estimate_tokens
from ateam.wire.turns import Turn

TURNS: list[Turn] = [
    Turn(role="user", content="make tests/test_io.py pass"),
    Turn.model_validate(
        {
            "role": "assistant",
            "content": "Running the tests.",
            "tool_calls": [{"id": "call_1", "name": "os.exec", "args": {"cmd": "pytest -q"}}],
        }
    ),
    Turn(role="tool", name="os.exec", tool_call_id="call_1", content="41 passed, 1 failed"),
    Turn(role="assistant", content="test_read_timeout fails on line 88."),
]

LONG_REPLY = "word " * 2200  # 11 000 characters: well over SUMMARY_MAX_TOKENS


class Recording:
    """Delegates to a real :class:`ScriptedProvider` and keeps the messages of each call."""

    def __init__(self, inner: ScriptedProvider) -> None:
        self.inner = inner
        self.model = inner.model
        self.context_window = inner.context_window
        self.calls: list[list[Message]] = []

    def stream(
        self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None
    ) -> AsyncIterator[Chunk]:
        self.calls.append(list(messages))
        return self.inner.stream(messages, tools=tools)


def scripted(tmp_path: Path, *turns: dict[str, Any]) -> Recording:
    path = tmp_path / "summarizer.yaml"
    path.write_text(json.dumps({"turns": list(turns)}), encoding="utf-8")  # JSON is YAML
    return Recording(ScriptedProvider(path, model="summarizer"))


def section(block: str, heading: str) -> list[str]:
    """The ``- `` lines of the section whose heading starts with ``heading``."""
    lines: list[str] = []
    inside = False
    for line in block.splitlines():
        if line.startswith("#"):
            inside = line.startswith(heading)
        elif inside and line.startswith("- "):
            lines.append(line)
    return lines


def store_summary(ctx: WorkingContext, text: str) -> None:
    """Write summary.json directly, past set_summary's length check."""
    ctx.dir.mkdir(parents=True, exist_ok=True)
    record = {"summary": text, "updated": 0.0, "tasks_covered": 0, "model": "m"}
    (ctx.dir / "summary.json").write_text(json.dumps(record), encoding="utf-8")


@pytest.fixture
def ctx(tmp_path: Path) -> WorkingContext:
    return WorkingContext(tmp_path / "state")


# --- the kept lists -------------------------------------------------------------------


def test_nothing_stored_renders_nothing(ctx: WorkingContext) -> None:
    assert ctx.render() == ""
    assert ctx.summary() == ""
    assert ctx.decisions() == [] and ctx.failures() == [] and ctx.constraints() == []
    assert ctx.stats()["tokens"]["total"] == 0


def test_decisions_keep_the_newest_20_and_render_the_newest_3_first(
    ctx: WorkingContext,
) -> None:
    for n in range(DECISIONS_KEEP + 1):
        ctx.add_decision(f"decision-{n:02d}", rationale="why", impact="what", task=f"q-{n}")

    kept = [d["decision"] for d in ctx.decisions()]
    assert kept == [f"decision-{n:02d}" for n in range(1, DECISIONS_KEEP + 1)]
    shown = section(ctx.render(), "### Key decisions")
    assert [re.findall(r"decision-\d+", line)[0] for line in shown] == [
        "decision-20",
        "decision-19",
        "decision-18",
    ]
    assert "why: why" in shown[0] and "impact: what" in shown[0] and "task q-20" in shown[0]


def test_failures_keep_the_newest_10_and_render_the_newest_2_first(ctx: WorkingContext) -> None:
    for n in range(FAILURES_KEEP + 1):
        ctx.add_failure(f"failure-{n:02d}", root_cause="cause", severity="high")

    kept = [f["description"] for f in ctx.failures()]
    assert kept == [f"failure-{n:02d}" for n in range(1, FAILURES_KEEP + 1)]
    assert ctx.failures()[-1]["severity"] == "high"
    shown = section(ctx.render(), "### Past failures")
    assert [re.findall(r"failure-\d+", line)[0] for line in shown] == ["failure-10", "failure-09"]
    assert shown[0].startswith("- [high] failure-10; cause: cause")


def test_bad_entries_are_refused(ctx: WorkingContext) -> None:
    with pytest.raises(ValueError):
        ctx.add_decision("  ")
    with pytest.raises(ValueError):
        ctx.add_failure("disk full", severity="apocalyptic")
    with pytest.raises(ValueError):
        ctx.add_constraint("")
    assert ctx.decisions() == [] and ctx.failures() == [] and ctx.constraints() == []


def test_constraints_expire_and_every_active_one_is_rendered(ctx: WorkingContext) -> None:
    now = time.time()
    ctx.add_constraint("never push to main")
    ctx.add_constraint("API frozen until the release", expires=now + 100)
    ctx.add_constraint("no deploys during the audit", expires=now + 1000)

    assert len(ctx.constraints(now=now + 50)) == 3
    later = [c["text"] for c in ctx.constraints(now=now + 500)]
    assert later == ["never push to main", "no deploys during the audit"]
    rendered = section(ctx.render(now=now + 500), "### Active constraints")
    assert len(rendered) == 2
    assert "API frozen" not in ctx.render(now=now + 500)
    assert "(until " in rendered[1]
    assert [c["text"] for c in ctx.constraints(now=now + 5000)] == ["never push to main"]


def test_expired_constraints_are_pruned_at_the_next_write(ctx: WorkingContext) -> None:
    ctx.add_constraint("gone already", expires=time.time() - 1)
    ctx.add_constraint("still here")
    stored = json.loads((ctx.dir / "constraints.json").read_text())
    assert [c["text"] for c in stored] == ["still here"]
    assert stored[0]["expires"] is None and stored[0]["added"] > 0


def test_re_adding_a_constraint_replaces_it_and_it_can_be_lifted(ctx: WorkingContext) -> None:
    ctx.add_constraint("freeze", expires=time.time() + 10)
    ctx.add_constraint("freeze")
    assert [(c["text"], c["expires"]) for c in ctx.constraints()] == [("freeze", None)]
    assert ctx.remove_constraint("freeze") is True
    assert ctx.remove_constraint("freeze") is False
    assert ctx.constraints() == []


# --- the render budget ----------------------------------------------------------------


def long_summary(tokens: int) -> str:
    """Sentences with file names and numbers, several per line, about ``tokens`` long."""
    sentences = [f"Step {n} edited src/mod_{n}.py and set retries to {n * 3}." for n in range(9999)]
    lines = [" ".join(sentences[i : i + 4]) for i in range(0, len(sentences), 4)]
    text = "\n".join(lines)
    return text[: tokens * 4].rsplit(" ", 1)[0]


def fill(ctx: WorkingContext, *, items: int, words: int, constraints: int) -> list[str]:
    store_summary(ctx, long_summary(10_000))
    for n in range(items):
        ctx.add_decision(f"DECISION-{n} " + "alpha " * words, rationale="beta " * words)
        ctx.add_failure(f"FAILURE-{n} " + "gamma " * words, prevention="delta " * words)
    texts = [f"CONSTRAINT-{n} keep " + "rule " * min(words // 10, 15) for n in range(constraints)]
    for text in texts:
        ctx.add_constraint(text.strip(), expires=time.time() + 3600)
    return [t.strip() for t in texts]


@pytest.mark.parametrize(
    ("items", "words", "constraints"),
    [(1, 5, 0), (5, 50, 3), (20, 400, 8), (20, 2000, 12), (3, 10, 20)],
)
def test_render_stays_within_budget_and_keeps_every_constraint(
    ctx: WorkingContext, items: int, words: int, constraints: int
) -> None:
    texts = fill(ctx, items=items, words=words, constraints=constraints)

    block = ctx.render()
    assert estimate_tokens(block) <= ctx.budget.total
    assert block.startswith("## Working context\n")
    shown = section(block, "### Active constraints")
    assert len(shown) == len(texts)
    for text in texts:  # in full: these all fit when they are alone
        pattern = rf"- {re.escape(text)} \(until \d{{4}}-\d\d-\d\d \d\d:\d\d UTC\)"
        assert any(re.fullmatch(pattern, line) for line in shown), text
    assert len(re.findall(r"DECISION-\d+", block)) == min(items, 3)
    assert len(re.findall(r"FAILURE-\d+", block)) == min(items, 2)
    summary = block.split("### Summary\n", 1)[1].split("\n\n###", 1)[0]
    assert estimate_tokens(summary) <= ctx.budget.summary
    assert summary.endswith(" […]")


def test_render_fills_but_never_overflows_the_budget_across_sizes(ctx: WorkingContext) -> None:
    # A summary without line or sentence ends is cut closest to its room, so an error in
    # the accounting of the other parts would show here as an overflow.
    store_summary(ctx, "lorem ipsum dolor sit amet " * 2000)
    for n in range(40):
        ctx.add_constraint(f"CONSTRAINT-{n} " + "x" * (n * 7 % 23) + " must hold " * (n % 5))
        if n % 3 == 0:
            ctx.add_decision(f"DECISION-{n} " + "because " * (n * 3))
        block = ctx.render()
        used = estimate_tokens(block)
        assert used <= ctx.budget.total, n
        # Full: the summary has its whole share, or the block is only a few tokens short.
        summary_tokens = ctx.stats()["tokens"]["summary"]
        assert summary_tokens >= ctx.budget.summary or used >= ctx.budget.total - 10, n
        assert len(section(block, "### Active constraints")) == n + 1


def test_the_summary_is_cut_at_a_boundary_never_mid_word(ctx: WorkingContext) -> None:
    original = long_summary(10_000)
    store_summary(ctx, original)
    summary = ctx.render().split("### Summary\n", 1)[1]
    kept = summary.removesuffix(" […]")
    assert kept != summary and original.startswith(kept)
    assert kept.endswith(".")  # a line or sentence end, with this text
    assert estimate_tokens(kept) > ctx.budget.summary * 0.9  # and not wastefully early

    words = "lorem ipsum dolor sit amet " * 2000  # no sentence or line ends at all
    store_summary(ctx, words)
    cut = ctx.render().split("### Summary\n", 1)[1].removesuffix(" […]")
    assert words.startswith(cut) and words[len(cut)] == " "


def test_constraints_take_room_from_the_summary(ctx: WorkingContext) -> None:
    fill(ctx, items=3, words=20, constraints=0)
    alone = ctx.stats()["tokens"]["summary"]
    for n in range(15):
        ctx.add_constraint(f"CONSTRAINT-{n} " + "must hold " * 20)
    stats = ctx.stats()
    assert stats["tokens"]["summary"] < alone - 500
    assert stats["counts"]["constraints_shown"] == 15
    assert stats["tokens"]["total"] <= ctx.budget.total


def test_constraints_too_big_for_the_budget_are_shortened_not_dropped(
    ctx: WorkingContext,
) -> None:
    fill(ctx, items=5, words=100, constraints=0)
    for n in range(40):
        ctx.add_constraint(f"CONSTRAINT-{n:02d} " + "a very long standing rule " * 40)

    block = ctx.render()
    assert estimate_tokens(block) <= ctx.budget.total
    shown = section(block, "### Active constraints")
    assert [line[2:15] for line in shown] == [f"CONSTRAINT-{n:02d}" for n in range(40)]
    assert all(line.endswith(" […]") for line in shown)


@pytest.mark.parametrize(
    "budget", [Budget(), Budget(total=400, summary=300), Budget(total=60, summary=20)]
)
def test_even_absurd_constraint_counts_respect_the_budget(tmp_path: Path, budget: Budget) -> None:
    ctx = WorkingContext(tmp_path / "state", budget=budget)
    ctx.dir.mkdir(parents=True)
    many = [{"text": f"rule number {n} " * 5, "expires": None, "added": 0.0} for n in range(3000)]
    (ctx.dir / "constraints.json").write_text(json.dumps(many), encoding="utf-8")
    store_summary(ctx, long_summary(5000))

    block = ctx.render()
    assert estimate_tokens(block) <= budget.total
    assert "more active constraints not shown" in block
    stats = ctx.stats()
    assert 0 < stats["counts"]["constraints_shown"] < 3000
    assert stats["counts"]["constraints"] == 3000


def test_stats_report_the_split(ctx: WorkingContext) -> None:
    fill(ctx, items=4, words=30, constraints=2)
    stats = ctx.stats()
    parts = stats["tokens"]
    assert parts["total"] == estimate_tokens(ctx.render())
    assert sum(v for k, v in parts.items() if k != "total") >= parts["total"] - 5
    assert stats["budget"] == {
        "total": 2000,
        "summary": 1500,
        "decisions": 3,
        "failures": 2,
        "item_tokens": 100,
    }
    assert stats["counts"]["decisions"] == 4 and stats["counts"]["decisions_shown"] == 3
    assert stats["counts"]["failures_shown"] == 2 and stats["counts"]["constraints_shown"] == 2
    assert stats["cut"]["summary"] is True and stats["summary_tokens"] > 9000


# --- the summary ----------------------------------------------------------------------


def test_set_summary_refuses_more_than_the_limit(ctx: WorkingContext) -> None:
    at_limit = "x" * (SUMMARY_MAX_TOKENS * 4)
    ctx.set_summary(at_limit, model="m", tasks_covered=1)
    with pytest.raises(ValueError, match="over the 2000 limit"):
        ctx.set_summary(at_limit + " more", model="m", tasks_covered=2)
    assert ctx.summary() == at_limit
    record = json.loads((ctx.dir / "summary.json").read_text())
    assert record["tasks_covered"] == 1 and record["model"] == "m" and record["updated"] > 0


def test_files_are_private(ctx: WorkingContext) -> None:
    ctx.set_summary("s", model="m", tasks_covered=0)
    ctx.add_decision("d")
    ctx.add_failure("f")
    ctx.add_constraint("c")
    ctx.note_task_done()
    assert stat.S_IMODE(ctx.dir.stat().st_mode) == 0o700
    for path in ctx.dir.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    assert not [p for p in ctx.dir.iterdir() if p.name.endswith(".tmp")]


def test_note_task_done_is_due_on_the_fifth_and_survives_a_restart(tmp_path: Path) -> None:
    first = WorkingContext(tmp_path / "state")
    assert [first.note_task_done() for _ in range(RESUMMARIZE_EVERY - 1)] == [False] * 4
    again = WorkingContext(tmp_path / "state")
    assert again.tasks_since_summary == RESUMMARIZE_EVERY - 1
    assert again.note_task_done() is True
    assert again.note_task_done() is True  # still due until a summary succeeds


async def test_summarize_stores_the_summary_and_resets_the_count(
    ctx: WorkingContext, tmp_path: Path
) -> None:
    ctx.set_summary("Earlier: the CI runs `make ci`.", model="old", tasks_covered=3)
    for _ in range(RESUMMARIZE_EVERY):
        ctx.note_task_done()
    provider = scripted(tmp_path, {"text": "CI runs `make ci`; test_read_timeout fails at 88."})

    outcome = await ctx.summarize(provider, TURNS, model="summarizer")

    assert outcome.ok and outcome.attempts == 1 and outcome.reason is None
    assert outcome.summary == "CI runs `make ci`; test_read_timeout fails at 88."
    assert ctx.summary() == outcome.summary
    assert ctx.tasks_since_summary == 0
    record = json.loads((ctx.dir / "summary.json").read_text())
    assert record["model"] == "summarizer" and record["tasks_covered"] == 3 + RESUMMARIZE_EVERY
    system, user = provider.calls[0]
    assert system.role == "system" and user.role == "user"
    assert "file name" in system.content and "Add no facts" in system.content
    assert "1500 words" in system.content
    for fact in ("Earlier: the CI runs `make ci`.", "tests/test_io.py", "pytest -q", "41 passed"):
        assert fact in user.content


async def test_a_summary_too_long_twice_changes_nothing(
    ctx: WorkingContext, tmp_path: Path
) -> None:
    ctx.set_summary("the old summary", model="old", tasks_covered=2)
    for _ in range(RESUMMARIZE_EVERY):
        ctx.note_task_done()
    before = (ctx.dir / "summary.json").read_bytes()
    provider = scripted(tmp_path, {"text": LONG_REPLY}, {"text": LONG_REPLY})

    outcome = await ctx.summarize(provider, TURNS, model="summarizer")

    assert not outcome.ok and outcome.attempts == 2 and outcome.reason == "too long twice"
    assert outcome.summary is None
    assert (ctx.dir / "summary.json").read_bytes() == before
    assert ctx.tasks_since_summary == RESUMMARIZE_EVERY
    first, second = (call[0].content for call in provider.calls)
    assert "terser" not in first and "1500 words" in first
    assert "terser" in second.lower() and "750 words" in second
    assert provider.calls[0][1] == provider.calls[1][1]  # the same turns both times


async def test_too_long_then_short_enough_succeeds_on_the_retry(
    ctx: WorkingContext, tmp_path: Path
) -> None:
    provider = scripted(tmp_path, {"text": LONG_REPLY}, {"text": "short and sound"})
    outcome = await ctx.summarize(provider, TURNS, model="summarizer")
    assert outcome.ok and outcome.attempts == 2 and ctx.summary() == "short and sound"


@pytest.mark.parametrize(
    ("turn", "reason"),
    [({"error": {"status": 429}}, "provider error: "), ({"text": ""}, "empty reply")],
)
async def test_a_failed_call_changes_nothing(
    ctx: WorkingContext, tmp_path: Path, turn: dict[str, Any], reason: str
) -> None:
    ctx.set_summary("the old summary", model="old", tasks_covered=2)
    ctx.note_task_done()
    provider = scripted(tmp_path, turn)

    outcome = await ctx.summarize(provider, TURNS, model="summarizer")

    assert not outcome.ok and outcome.attempts == 1
    assert outcome.reason is not None and outcome.reason.startswith(reason)
    assert ctx.summary() == "the old summary" and ctx.tasks_since_summary == 1


# --- robustness -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe\x00", b'{"a": 1}', b'[1, null, {}, {"decision": 7}]', b""],
)
def test_corrupt_files_read_as_empty(ctx: WorkingContext, content: bytes) -> None:
    ctx.dir.mkdir(parents=True)
    for name in ("decisions", "failures", "constraints", "progress"):
        (ctx.dir / f"{name}.json").write_bytes(content)
    (ctx.dir / "summary.json").write_bytes(content.replace(b"{", b"[") or b"{")

    assert ctx.summary() == "" and ctx.decisions() == [] and ctx.failures() == []
    assert ctx.constraints() == [] and ctx.tasks_since_summary == 0
    assert ctx.render() == ""
    ctx.add_decision("start over")  # a write replaces the damaged file
    assert [d["decision"] for d in ctx.decisions()] == ["start over"]


def test_a_corrupt_file_is_reported_once_and_kept_before_a_write(ctx: WorkingContext) -> None:
    ctx.dir.mkdir(parents=True)
    (ctx.dir / "decisions.json").write_bytes(b"[{not json")
    (ctx.dir / "progress.json").write_bytes(b"[]")
    for _ in range(3):  # every turn renders the context
        ctx.render()
        assert ctx.tasks_since_summary == 0

    reports = {d.path.name: d for d in ctx.damage.drain()}
    assert set(reports) == {"decisions.json", "progress.json"}
    assert reports["decisions.json"].problem is Problem.NOT_JSON
    assert reports["progress.json"].problem is Problem.WRONG_SHAPE
    assert "context: progress.json holds a JSON list, not a dict" in (
        reports["progress.json"].message()
    )
    kept = reports["decisions.json"].kept
    assert kept is not None and kept.read_bytes() == b"[{not json"
    ctx.add_decision("start over")
    assert kept.read_bytes() == b"[{not json"
    assert ctx.damage.drain() == []


def test_a_failed_write_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a directory")
    ctx = WorkingContext(tmp_path / "state")
    with pytest.raises(StorageError):
        ctx.add_decision("d")
    assert ctx.decisions() == []


# --- the request fed back (issue 9: the echo model nested each summary in the next) -----


class CountingEcho:
    """The real ``echo`` provider, counting the words it streamed."""

    def __init__(self) -> None:
        from ateam.providers.echo import EchoProvider

        self.inner = EchoProvider("echo")
        self.model = "echo"
        self.context_window = self.inner.context_window
        self.words = 0

    async def stream(
        self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None
    ) -> AsyncIterator[Chunk]:
        async for chunk in self.inner.stream(messages, tools=tools):
            self.words += 1
            yield chunk


async def test_the_echo_model_cannot_store_the_request_as_the_summary(
    ctx: WorkingContext,
) -> None:
    ctx.set_summary("CI runs `make ci`.", model="old", tasks_covered=1)
    echo = CountingEcho()
    many = TURNS * 200  # a request of thousands of words

    first = await ctx.summarize(echo, many, model="echo")
    second = await ctx.summarize(echo, many, model="echo")

    for outcome in (first, second):
        assert not outcome.ok and outcome.reason is not None
        assert "repeats the request" in outcome.reason and outcome.attempts == 1
    assert ctx.summary() == "CI runs `make ci`."
    # Refused after a few words, not after reading the whole echo twice.
    assert echo.words < 20


@pytest.mark.parametrize(
    "reply",
    [
        "Current summary:\nCI runs `make ci`.\n\nNew turns, oldest first:\n[user] hi",
        "Summary so far. New turns, oldest first: none worth noting",
    ],
)
async def test_a_reply_quoting_the_request_is_refused_whatever_the_model(
    ctx: WorkingContext, tmp_path: Path, reply: str
) -> None:
    provider = scripted(tmp_path, {"text": reply})
    outcome = await ctx.summarize(provider, TURNS, model="summarizer")
    assert not outcome.ok and "repeats the request" in str(outcome.reason)
    assert ctx.summary() == ""
    with pytest.raises(ValueError, match="headings"):
        ctx.set_summary(reply, model="m", tasks_covered=0)


async def test_a_nested_summary_left_on_disk_is_never_fed_back(
    ctx: WorkingContext, tmp_path: Path
) -> None:
    nested = "echo: Current summary: echo: Current summary: (none yet)"
    ctx.dir.mkdir(parents=True, exist_ok=True)
    (ctx.dir / "summary.json").write_text(json.dumps({"summary": nested, "tasks_covered": 3}))
    assert ctx.summary() == ""
    assert "Current summary" not in ctx.render()
    provider = scripted(tmp_path, {"text": "a clean summary"})

    outcome = await ctx.summarize(provider, TURNS, model="summarizer")

    assert outcome.ok and ctx.summary() == "a clean summary"
    assert "echo:" not in provider.calls[0][1].content


async def test_after_a_failed_summary_the_next_try_waits_a_full_rhythm(
    ctx: WorkingContext, tmp_path: Path
) -> None:
    due = [ctx.note_task_done() for _ in range(RESUMMARIZE_EVERY)]
    assert due[-1] is True
    failed = await ctx.summarize(scripted(tmp_path, {"text": ""}), TURNS, model="m")
    assert not failed.ok

    again = WorkingContext(ctx.dir.parent)  # the rhythm survives a restart too
    due = [again.note_task_done() for _ in range(RESUMMARIZE_EVERY)]

    assert due == [False] * (RESUMMARIZE_EVERY - 1) + [True]
    assert again.tasks_since_summary == 2 * RESUMMARIZE_EVERY
