"""``ateam plan show|approve|reject NAME`` and ``ateam delegate NAME on|off`` (issue 26)."""

from __future__ import annotations

import argparse
import json

from ateam.cli._run import run_verb
from ateam.cli._verb import add_json_option, add_project_option, add_redis_option
from ateam.client import ModesResult, Team

_AGENT_HELP = "the agent: NAME in the project here, a unique prefix of it, or PROJECT/NAME"
_TAKEOVER_HELP = "even while a console owns the agent (that console turns read-only)"


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


def _agent_args(p: argparse.ArgumentParser, json_what: str) -> None:
    add_redis_option(p)
    p.add_argument("id", metavar="NAME", help=_AGENT_HELP)
    add_project_option(p)
    add_json_option(p, json_what)


_STATE_JSON = "agent, plan, task, status, feedback, by, at, require_plan, delegate"


def plan_show_args(p: argparse.ArgumentParser) -> None:
    _agent_args(p, f"{_STATE_JSON}, text (plan.md)")


def plan_approve_args(p: argparse.ArgumentParser) -> None:
    _agent_args(p, _STATE_JSON)
    p.add_argument("--feedback", default="", metavar="TEXT", help="a note for the agent")
    p.add_argument("--takeover", action="store_true", help=f"approve {_TAKEOVER_HELP}")


def plan_reject_args(p: argparse.ArgumentParser) -> None:
    _agent_args(p, _STATE_JSON)
    p.add_argument(
        "--feedback", required=True, metavar="TEXT", help="what to change: the agent's next input"
    )
    p.add_argument("--takeover", action="store_true", help=f"reject {_TAKEOVER_HELP}")


def delegate_args(p: argparse.ArgumentParser) -> None:
    _agent_args(p, _STATE_JSON)
    p.add_argument("mode", choices=["on", "off"], help="coordination tools only, or every tool")
    p.add_argument("--takeover", action="store_true", help=f"switch it {_TAKEOVER_HELP}")
