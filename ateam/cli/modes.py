"""``ateam plan show|approve|reject NAME`` and ``ateam delegate NAME on|off`` (issue 26)."""

from __future__ import annotations

import argparse
import json

from ateam.cli._run import run_verb
from ateam.client import ModesResult, Team

_AGENT_HELP = "the agent: NAME in the project here, a unique prefix of it, or PROJECT/NAME"


def _print(agent: str, state: ModesResult, as_json: bool, plan: str | None = None) -> None:
    if as_json:
        row = {"agent": agent, **state.model_dump(mode="json")}
        if plan is not None:
            row["text"] = plan
        print(json.dumps(row, indent=2, sort_keys=True))
        return
    if state.plan is None:
        shown = "none: no task has needed one yet"
    else:
        by = f" by {state.by}" if state.by else ""
        shown = f"{state.plan} ({state.task}, {state.status}{by})"
    print(f"{agent}: plan {shown}; delegate mode {'on' if state.delegate else 'off'}")
    if state.feedback:
        print(f"feedback: {state.feedback}")
    if plan is not None:
        print(plan.rstrip("\n") if plan else "(plan.md is empty)")


def cmd_plan_show(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        handle = team.agent(args.id)
        state = await handle.modes.state()
        _print(args.id, state, args.json, await handle.plan.read())
        return 0

    return run_verb(args, "plan", work)


def cmd_plan_approve(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        state = await team.agent(args.id).modes.approve(args.feedback, takeover=args.takeover)
        _print(args.id, state, args.json)
        return 0

    return run_verb(args, "plan", work)


def cmd_plan_reject(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        state = await team.agent(args.id).modes.reject(args.feedback, takeover=args.takeover)
        _print(args.id, state, args.json)
        return 0

    return run_verb(args, "plan", work)


def cmd_delegate(args: argparse.Namespace) -> int:
    async def work(team: Team) -> int:
        on = args.mode == "on"
        state = await team.agent(args.id).modes.delegate(on, takeover=args.takeover)
        _print(args.id, state, args.json)
        return 0

    return run_verb(args, "delegate", work)
