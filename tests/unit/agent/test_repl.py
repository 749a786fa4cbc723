"""The agent's local REPL without a terminal: inbox scan, command dispatch, completion."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from ateam.agent.runtime.process import Agent
from ateam.agent.runtime.repl import INBOX_MAX_BYTES, AgentRepl, ReplCompleter, scan_inbox
from ateam.bus.connection import RedisTarget
from ateam.config import standalone_agent
from ateam.providers import EchoProvider
from tests._wait import async_wait_for


@pytest.fixture
async def agent(target: RedisTarget, tmp_path: Path) -> AsyncIterator[Agent]:
    a = Agent(standalone_agent("proj", "zeus", tmp_path), target, EchoProvider())
    await a.start()
    yield a
    await a.stop()


class Script:
    """Answers questions from a list and records everything written."""

    def __init__(self, answers: Iterable[str] = ()) -> None:
        self.answers = list(answers)
        self.questions: list[str] = []
        self.lines: list[str] = []

    async def ask(self, question: str) -> str:
        self.questions.append(question)
        return self.answers.pop(0)

    def out(self, text: str) -> None:
        self.lines.append(text)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def inbox_of(agent: Agent) -> Path:
    inbox = agent.config.dir / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    return inbox


async def test_inbox_scan_queues_only_confirmed_files_and_moves_them(agent: Agent) -> None:
    inbox = inbox_of(agent)
    (inbox / "a.md").write_text("first task\nline two\n")
    (inbox / "b.md").write_text("refused task\n")
    (inbox / "c.txt").write_text("third task\n")
    script = Script(["y", "n", "YES"])
    # The worker would take items as they arrive; hold it so the queue can be inspected.
    agent._worker.cancel()  # type: ignore[union-attr]

    items = await scan_inbox(agent.port, script.ask, script.out)

    assert [q.split("?")[0] for q in script.questions] == [
        "enqueue a.md",
        "enqueue b.md",
        "enqueue c.txt",
    ]
    assert [item.source for item in items] == ["inbox", "inbox"]
    assert items[0].text == "[inbox file: a.md]\nfirst task\nline two\n"
    assert items[1].text.startswith("[inbox file: c.txt]\n")
    assert [p.text for p in agent.parts.queue.pending()] == [i.text for i in items]
    assert sorted(p.name for p in (inbox / "processed").iterdir()) == ["a.md", "c.txt"]
    assert (inbox / "b.md").read_text() == "refused task\n"  # left where it was
    assert not (inbox / "a.md").exists() and not (inbox / "c.txt").exists()
    assert "first task" in script.text  # the preview was shown before the question


async def test_inbox_scan_skips_binary_and_oversized_and_never_overwrites(agent: Agent) -> None:
    inbox = inbox_of(agent)
    (inbox / "blob.bin").write_bytes(b"\x00\x01\x02text")
    (inbox / "huge.txt").write_text("x" * (INBOX_MAX_BYTES + 1))
    (inbox / "latin.txt").write_bytes(b"caf\xe9\n")
    (inbox / "note.md").write_text("new note\n")
    processed = inbox / "processed"
    processed.mkdir()
    (processed / "note.md").write_text("old note\n")
    script = Script(["y"])

    items = await scan_inbox(agent.port, script.ask, script.out)

    assert len(script.questions) == 1 and "note.md" in script.questions[0]
    assert [item.text for item in items] == ["[inbox file: note.md]\nnew note\n"]
    assert "skipped blob.bin: binary" in script.text
    assert "skipped huge.txt: larger than 256 KiB" in script.text
    assert "skipped latin.txt" in script.text
    assert (processed / "note.md").read_text() == "old note\n"
    assert (processed / "note-1.md").read_text() == "new note\n"
    for name in ("blob.bin", "huge.txt", "latin.txt"):
        assert (inbox / name).exists()


async def test_inbox_scan_without_an_inbox_says_so(agent: Agent) -> None:
    script = Script()
    assert await scan_inbox(agent.port, script.ask, script.out) == []
    assert "does not exist" in script.text and not script.questions


async def test_commands_dispatch_to_the_agent(agent: Agent) -> None:
    script = Script()
    repl = AgentRepl(agent.port, out=script.out, ask=script.ask)

    await repl.handle("status")
    assert "proj/zeus" in script.text and "state idle" in script.text

    await repl.handle("hello there")
    assert script.lines[-1].startswith("queued q-")
    # The worker runs the task on its own asyncio task: wait for the echo's answer.
    await async_wait_for(
        lambda: any(t.get("content") == "echo: hello there" for t in agent.parts.history.tail(10)),
        5,
    )

    script.lines.clear()
    await repl.handle("history tail 2")
    assert len(script.lines) == 1 and len(script.lines[0].splitlines()) == 2
    assert "echo: hello there" in script.lines[0]

    script.lines.clear()
    await repl.handle("sys show")
    assert script.text == agent.parts.prompts.show()

    script.lines.clear()
    await repl.handle("queue")
    assert script.text.endswith("0 pending")

    await repl.handle("/attach proj/other")
    assert script.lines[-1].startswith("error [repl.unknown_command]: unknown command /attach")
    (agent.config.cwd / "notes.md").write_text("# Deploys\nRoll back with make rollback.\n")
    await repl.handle("kb ingest notes.md")
    assert script.lines[-1].startswith("kb agent: 1 document(s) ingested")
    await repl.handle("kb ingest /etc/hostname")
    assert script.lines[-1].startswith("error [kb.ingest.denied]")
    await repl.handle("history last")
    assert script.lines[-1].startswith("error [bad_request]: usage: history tail [N]")
    await repl.handle("help")
    assert "inbox scan" in script.lines[-1]


async def test_plain_text_is_queued_with_source_local(agent: Agent) -> None:
    agent._worker.cancel()  # type: ignore[union-attr]
    script = Script()
    repl = AgentRepl(agent.port, out=script.out, ask=script.ask)
    await repl.handle("  please build it  ")
    (item,) = agent.parts.queue.pending()
    assert (item.text, item.source) == ("please build it", "local")
    assert script.lines == [f"queued {item.id} (1 waiting)"]


async def test_a_secret_typed_at_the_repl_is_queued_redacted_and_the_user_told(
    agent: Agent,
) -> None:
    agent._worker.cancel()  # type: ignore[union-attr]
    script = Script()
    repl = AgentRepl(agent.port, out=script.out, ask=script.ask)
    key = "AKIA" + "Q4W7E2R9T5Y1U8I3"
    await repl.handle(f"upload as {key}")
    (item,) = agent.parts.queue.pending()
    assert item.text == "upload as ****"
    assert script.lines[-1].startswith("1 secret replaced by ****;")
    assert "env_passthrough" in script.lines[-1]


async def test_queue_clear_needs_yes(agent: Agent) -> None:
    agent._worker.cancel()  # type: ignore[union-attr]
    agent.parts.worker.enqueue("one", source="test")
    agent.parts.worker.enqueue("two", source="test")
    script = Script(["y", "", "yes"])
    repl = AgentRepl(agent.port, out=script.out, ask=script.ask)

    await repl.handle("queue clear")
    await repl.handle("queue clear")
    assert len(agent.parts.queue) == 2 and script.lines == ["queue: not cleared"] * 2

    await repl.handle("queue clear")
    assert len(agent.parts.queue) == 0 and script.lines[-1] == "queue: cleared 2 item(s)"
    assert script.questions == ["drop 2 pending item(s)? type yes to confirm: "] * 3


async def test_info_panel_shows_state_ctx_queue_and_last_error(agent: Agent) -> None:
    repl = AgentRepl(agent.port, out=lambda _: None)
    agent.parts.status.entry.last_error = "provider.error: boom"
    text = repl.panel_text()
    assert "state idle" in text and "ctx " in text and "queue 0" in text
    assert "provider.error: boom" in text
    assert repl.prompt_text() == "proj/zeus [idle]> "
    assert not repl.panel
    repl.toggle_panel()
    assert repl.panel


def test_completion_of_commands_arguments_and_paths(tmp_path: Path) -> None:
    (tmp_path / "my notes").mkdir()
    (tmp_path / "my notes" / "todo.md").write_text("x")
    completer = ReplCompleter(tmp_path)

    def complete(line: str) -> list[str]:
        return [c.apply(line)[0] for c in completer.complete(line)]

    assert complete("hi") == ["history "]
    assert complete("history t") == ["history tail "]
    assert sorted(complete("sys ")) == ["sys reload", "sys show"]
    assert complete("inbox s") == ["inbox scan "]
    assert complete("kb ingest my") == ["kb ingest 'my notes/'"]
    assert complete("kb ingest 'my notes/t") == ["kb ingest 'my notes/todo.md' "]
    assert complete("look at ./my") == ["look at './my notes/'"]


async def test_run_reads_lines_f1_toggles_the_panel_ctrl_c_clears_ctrl_d_ends(
    agent: Agent,
) -> None:
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    agent._worker.cancel()  # type: ignore[union-attr]
    script = Script()
    repl = AgentRepl(agent.port, out=script.out, ask=script.ask)
    with create_pipe_input() as keys:
        # F1, a task, a line abandoned with Ctrl+C, F1 again, then Ctrl+D.
        keys.send_text("\x1bOP")
        keys.send_text("build the thing\r")
        keys.send_text("never sent\x03")
        keys.send_text("\x1bOP")
        keys.send_text("\x04")
        await asyncio.wait_for(repl.run(input=keys, output=DummyOutput()), 10)
    assert [item.text for item in agent.parts.queue.pending()] == ["build the thing"]
    assert script.lines[-1].startswith("REPL closed; the agent keeps running")
    assert not repl.panel  # toggled twice
    assert agent.state.value == "idle"  # Ctrl+C on an idle agent interrupts nothing


async def test_f1_sets_the_bottom_toolbar(agent: Agent) -> None:
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    repl = AgentRepl(agent.port, out=lambda _: None)
    with create_pipe_input() as keys:
        keys.send_text("\x1bOP")
        keys.send_text("\x04")
        await asyncio.wait_for(repl.run(input=keys, output=DummyOutput()), 10)
    assert repl.panel
    assert repl._session is not None and repl._session.bottom_toolbar == repl.panel_text
