"""Console errors name console commands, about the agent the failed line named."""

from __future__ import annotations

from ateam.bus.connection import RedisTarget
from ateam.console.hints import console_line
from ateam.errors import (
    AgentNotFound,
    BadRequest,
    OwnershipDenied,
    RedisUnavailable,
    TaskNotFound,
    UsageError,
)
from tests._wait import async_wait_for
from tests.unit.console.test_panes import make_app, started, static_text


def test_ownership_names_the_console_commands_for_the_agent_of_the_line() -> None:
    denied = OwnershipDenied("proj/zeus is already attached by console c1 (me@box)")
    line = console_line(denied, "/attach zeus", attached=None)
    assert line == (
        "error [ownership.denied]: proj/zeus is already attached by console c1 (me@box) — "
        "another console owns it: /tail zeus to watch, /attach zeus --takeover to write"
    )
    # Typed input to an agent this console lost: the attached agent is the one.
    assert "/attach proj/hera --takeover" in console_line(denied, "hello", "proj/hera")
    assert "/tail ID to watch" in console_line(denied, "/detach", None)


def test_shell_verbs_in_hints_become_console_commands() -> None:
    assert "`ateam" in AgentNotFound("no agent 'ghost' on this bus").one_line()
    cases = [
        (AgentNotFound("no agent 'ghost' on this bus"), "/ps lists the agents"),
        (UsageError("unknown command /frob"), "/help lists the commands"),
        (TaskNotFound("no task 3f2 on the board"), "/tasks ls lists the board"),
    ]
    for error, hint in cases:
        line = console_line(error, "/attach ghost")
        assert hint in line and "ateam " not in line, line
        assert line.startswith(f"error [{error.code}]: {error.message} — ")


def test_other_errors_keep_their_line() -> None:
    refused = BadRequest("text must not be blank")  # the agent's word, no hint to add
    assert console_line(refused, "/input  ") == "error [bad_request]: text must not be blank"
    down = RedisUnavailable("cannot reach redis://127.0.0.1:1")
    assert console_line(down, "/ps") == down.one_line()


async def test_the_panes_show_the_console_hint(target: RedisTarget) -> None:
    app = make_app(target)
    async with app.run_test(size=(100, 30)):
        await started(app)
        await app.run_line("/attach ghost")
        await async_wait_for(lambda: "agent.not_found" in static_text(app, "#message"))
        shown = static_text(app, "#message")
        assert "/ps lists the agents on this bus" in shown and "ateam" not in shown
