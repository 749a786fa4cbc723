"""Commands that answer what the attached agent waits for: tool calls and proposed diffs."""

from __future__ import annotations

import json
import os

from ateam.console.commands.base import Call, Command
from ateam.errors import UsageError
from ateam.wire.results import ApprovalAnswerResult, ApprovalListResult
from ateam.wire.rpc import ApprovalAnswerParams, ApprovalListParams, build_params


async def pending(call: Call) -> None:
    agent = call.console.agent(call.console.require_attached())
    reply = await agent.request("approval.list", ApprovalListResult)
    for request in reply.pending:
        what = request.path or json.dumps(request.args, default=str)
        call.view.info(f"{request.request_id}: {request.tool} {what}")
    if not reply.pending:
        call.view.info("nothing is waiting")


async def _answer(
    call: Call, request: str | None, decision: str, content: str | None = None
) -> None:
    # Only what was given travels: no request id answers the oldest waiting request.
    fields: dict[str, object] = {"decision": decision}
    if content is not None:
        fields["content"] = content
    if request:
        fields["request_id"] = request
    params = build_params(ApprovalAnswerParams, "approval.answer", **fields)
    agent = call.console.agent(call.console.require_writer())
    reply = await agent.request("approval.answer", ApprovalAnswerResult, params)
    call.view.info(f"{reply.request_id}: {reply.decision}")


async def approve(call: Call) -> None:
    # `/apply always [REQ]`: allow this and the like from now on (a coding agent's
    # "allow always"); a native agent takes it as a plain approval.
    args = list(call.args)
    decision = "approve"
    if args and args[0].lower() == "always":
        decision = "always"
        args.pop(0)
    await _answer(call, args[0] if args else None, decision)


async def reject(call: Call) -> None:
    await _answer(call, call.args[0] if call.args else None, "reject")


async def edit(call: Call) -> None:
    console = call.console
    agent = console.agent(console.require_writer())
    params = build_params(ApprovalListParams, "approval.list", full=True)
    waiting = (await agent.request("approval.list", ApprovalListResult, params)).pending
    wanted = [
        r for r in waiting if r.kind == "diff" and (not call.args or r.request_id == call.args[0])
    ]
    if not wanted:
        raise UsageError(
            "no proposed diff is waiting" + (f" with id {call.args[0]}" if call.args else "")
        )
    request = wanted[0]
    suffix = os.path.splitext(request.path or "")[1] or ".txt"
    edited = await console.edit_text(request.new_content or "", suffix=suffix)
    if edited is None:
        call.view.info("editor failed; nothing was answered")
        return
    await _answer(call, request.request_id, "edit", content=edited)


COMMANDS = (
    Command("approve", approve, "[always] [REQ]", "approve the waiting tool call"),
    Command("apply", approve, "[always] [REQ]", "apply the proposed diff"),
    Command("reject", reject, "[REQ]", "reject the waiting call or diff"),
    Command("edit", edit, "[REQ]", "edit the proposed file in $EDITOR, apply it"),
    Command("pending", pending, "", "requests waiting for an answer"),
)
