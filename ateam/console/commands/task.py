"""Commands about the attached agent's work: input, stopping a task, its queue and history."""

from __future__ import annotations

from typing import Any

from ateam.console.commands.base import Call, Command
from ateam.wire.results import (
    MemoryStatsResult,
    QueueClearResult,
    QueueListResult,
    QueueRetryResult,
)
from ateam.wire.rpc import ConfirmParams, build_params


async def input_(call: Call) -> None:
    if not call.args:
        raise call.bad()
    await call.console.send_input(" ".join(call.args))


async def interrupt(call: Call) -> None:
    console = call.console
    task = await console.agent(console.require_writer()).interrupt(claim=False)
    call.view.info(f"interrupting {task}" if task else "agent is idle")


async def cancel(call: Call) -> None:
    console = call.console
    hard = "--hard" in call.parse(flags=("--hard",)).flags
    task = await console.agent(console.require_writer()).cancel(hard=hard, claim=False)
    what = "hard-cancelled" if hard else "cancelling"
    call.view.info(f"{what} {task}" if task else "agent is idle")


async def queue(call: Call) -> None:
    await call.action(_QUEUE_ACTIONS, "list")(call)


async def _queue_list(call: Call) -> None:
    console = call.console
    reply = await console.agent(console.require_attached()).request("queue.list", QueueListResult)
    current = reply.current
    call.view.info(f"current: {current.id} {current.text!r}" if current else "current: -")
    for item in reply.pending:
        call.view.info(f"pending: {item.id} {item.text!r}")
    for item in reply.dead:
        call.view.info(f"dead: {item.id} ({item.reason})")


async def _queue_clear(call: Call) -> None:
    agent = call.console.require_writer()
    answer = await call.view.ask(f"clear every pending item of {agent}? type 'yes': ")
    if answer.strip().lower() != "yes":
        call.view.info("queue clear cancelled")
        return
    params = build_params(ConfirmParams, "queue.clear", confirm=True)
    reply = await call.console.agent(agent).request("queue.clear", QueueClearResult, params)
    call.view.info(f"cleared {reply.cleared} item(s)")


async def _queue_retry(call: Call) -> None:
    agent = call.console.agent(call.console.require_writer())
    reply = await agent.request("queue.retry", QueueRetryResult)
    call.view.info(f"re-queued {len(reply.requeued)} item(s)")


_QUEUE_ACTIONS = {"list": _queue_list, "clear": _queue_clear, "retry": _queue_retry}


async def history(call: Call) -> None:
    agent = call.console.require_attached()
    try:
        n = int(call.args[0]) if call.args else 20
    except ValueError as exc:
        raise call.bad() from exc
    for turn in await call.console.agent(agent).history(n):
        call.view.info(f"{turn.role}: {turn.content}", agent)


async def ctx(call: Call) -> None:
    console = call.console
    agent = console.agent(console.require_attached())
    stats = await agent.request("memory.stats", MemoryStatsResult)
    say = call.view.info
    say(
        f"model {stats.model}: {stats.tokens_in_context} of {stats.context_window} "
        f"tokens in context ({stats.ctx_pct}%), {stats.history_turns} turns in history"
    )
    if stats.next_context_tokens is not None:
        say(
            f"next context: ~{stats.next_context_tokens} tokens, "
            f"{stats.turns_in_context} turns ({stats.turns_dropped} older left out), "
            f"{stats.summaries} summaries"
        )
    if stats.working_context is not None:
        say(_working_context_line(stats.switch_at, stats.working_context))
    for model, used in stats.usage.per_model.items():
        say(
            f"usage {model}: {used.tokens_in} in, {used.tokens_out} out, "
            f"{used.calls} calls, est. cost {used.cost}"
        )


def _working_context_line(switch_at: float, work: dict[str, Any]) -> str:
    tokens = work.get("tokens", {})
    budget = work.get("budget", {})
    return (
        f"switch at {100 * switch_at:g}%; working context "
        f"{tokens.get('total', 0)} of {budget.get('total', '?')} tokens (summary "
        f"{tokens.get('summary', 0)}/{budget.get('summary', '?')}, decisions "
        f"{tokens.get('decisions', 0)}, failures {tokens.get('failures', 0)}, "
        f"constraints {tokens.get('constraints', 0)})"
    )


COMMANDS = (
    Command("input", input_, "TEXT", "send text (or just type it)"),
    Command("interrupt", interrupt, "", "stop the current task"),
    Command("cancel", cancel, "[--hard]", "cancel the current task"),
    Command("queue", queue, "[clear|retry]", "show or change the queue"),
    Command("history", history, "[N]", "the newest N turns"),
    Command("ctx", ctx, "", "tokens in context and ctx %"),
)
