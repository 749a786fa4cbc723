"""ateam as the runtime's editor: the ACP client side, over the agent's own parts.

The runtime asks its editor to read and write files, run commands and allow tool calls;
here each request goes through what a native agent's tools go through:

* ``fs/read_text_file`` and ``fs/write_text_file`` through the agent's
  :class:`~ateam.tools.fs.Sandbox` (same root, same refusals: a write outside the root
  is refused with the sandbox's reason); a write is shown as a diff;
* ``terminal/*`` through :class:`~ateam.agent.acp.terminals.Terminals` (ateam's PTY
  execution);
* ``session/request_permission`` through the agent's approval policy
  (``tools.approval`` of ``agent.yaml``, by the ateam tool a request's kind stands for)
  and, where it says ``ask``, the owner's console (:class:`~ateam.tools.approvals.Approvals`,
  answered with ``/apply``, ``/apply always`` or ``/reject``);
* ``session/update`` to the prompt's :class:`~ateam.agent.acp.stream.PromptStream`.

A request that arrives while no prompt runs (a late update, a replay after
``session/load``) is answered without acting on it: nothing happens in the agent's name
outside a task.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from acp import RequestError, schema

from ateam.agent.acp.stream import PromptStream, unified
from ateam.agent.acp.terminals import Terminals
from ateam.agent.loop.control import TaskControl
from ateam.bus.events import EventType
from ateam.bus.publisher import EventPublisher
from ateam.config.schema import Approval
from ateam.errors import AteamError, ToolDenied
from ateam.tools.approvals import Approvals, Decision
from ateam.tools.exec_values import ExecLimits, OutputRoom
from ateam.tools.fs import Sandbox
from ateam.tools.registry import ToolPolicy

__all__ = ["EditorClient", "tool_for_kind"]

log = logging.getLogger(__name__)

# The ateam tool whose approval policy a runtime's request of each kind follows, so a
# policy written for native agents means the same for a runtime.
_TOOL_FOR_KIND: dict[str, str] = {
    "execute": "os.exec",
    "edit": "fs.patch",
    "delete": "fs.patch",
    "move": "fs.patch",
    "read": "fs.read",
    "search": "fs.read",
    "fetch": "os.exec",
    "think": "fs.read",
    "switch_mode": "os.exec",
    "other": "os.exec",
}

_ALLOW_KINDS = {
    Decision.APPROVE: ("allow_once", "allow_always"),
    Decision.ALWAYS: ("allow_always", "allow_once"),
}
_REJECT_KINDS = ("reject_once", "reject_always")


def tool_for_kind(kind: str | None) -> str:
    """The ateam tool whose policy a request of ``kind`` follows (``os.exec`` if unknown)."""
    return _TOOL_FOR_KIND.get(kind or "other", "os.exec")


class EditorClient:
    """The ACP ``Client`` of one agent's runtime.

    Args:
        name: The runtime's entry id.
        events: Where events go (``None``: a probe, which reports nothing).
        sandbox: The agent's file sandbox.
        exec_limits: The agent's command limits.
        policy: The agent's tool policy (its approvals); ``None`` denies every ask.
        approvals: Where a request waits for the owner.
        approval_timeout_s: How long it waits.
        output_room: Asked before each read of a terminal's output: its commands are
            held while the owning console lags, as native commands are (issue 28 §3).
    """

    def __init__(
        self,
        name: str,
        *,
        events: EventPublisher | None,
        sandbox: Sandbox,
        exec_limits: ExecLimits,
        policy: ToolPolicy | None,
        approvals: Approvals | None,
        approval_timeout_s: float,
        output_room: OutputRoom | None = None,
    ) -> None:
        self.name = name
        self._events = events
        self._sandbox = sandbox
        self._policy = policy
        self._approvals = approvals
        self._approval_timeout_s = approval_timeout_s
        self.stream: PromptStream | None = None
        """The prompt running now, if any."""
        self.control: TaskControl | None = None
        self.terminals = Terminals(sandbox, exec_limits, self._terminal_output, room=output_room)
        self._terminal_calls: dict[str, str | None] = {}
        self._granted: set[str] = set()
        """Tool calls a permission allowed: their writes and commands are not asked again."""
        self.on_connect_called = False

    # the SDK's hooks ----------------------------------------------------------------------

    def on_connect(self, conn: Any) -> None:
        self.on_connect_called = True

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.stream is not None:
            self.stream.update(update)

    async def request_permission(
        self,
        session_id: str,
        tool_call: schema.ToolCallUpdate,
        options: list[schema.PermissionOption],
        **kwargs: Any,
    ) -> schema.RequestPermissionResponse:
        stream, control = self._task()
        known = stream.calls.get(tool_call.tool_call_id)
        call_kind = tool_call.kind or (known.kind if known is not None else None)
        call_kind = call_kind or _kind_from_meta(tool_call.field_meta)
        tool = tool_for_kind(call_kind)
        kind, args, extra = _request_shape(tool_call, tool, call_kind)
        if kind == "tool" and tool == "fs.patch":
            extra = await asyncio.to_thread(_file_change, self._sandbox, tool_call)
            kind = "diff" if extra else kind
        title = tool_call.title or (known.title if known is not None else tool)
        decision = await self._decide(tool, title, kind, args, extra, stream, control)
        chosen = _pick(options, decision)
        if chosen is None:
            return schema.RequestPermissionResponse(
                outcome=schema.DeniedOutcome(outcome="cancelled")
            )
        if decision in _ALLOW_KINDS:
            # What it was allowed to do is not asked about again when it asks ateam to
            # do it (the write, the command) under the same call.
            self._granted.add(tool_call.tool_call_id)
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=chosen)
        )

    async def _decide(
        self,
        tool: str,
        title: str,
        kind: str,
        args: dict[str, Any],
        extra: dict[str, Any],
        stream: PromptStream,
        control: TaskControl,
    ) -> Decision | None:
        """What the policy for ``tool``, or else the owner, says; ``None``: cancelled."""
        if control.interrupted.is_set():
            return None
        try:
            approval = self._policy.check(tool) if self._policy is not None else Approval.ASK
        except ToolDenied as exc:
            self._emit(
                EventType.WARN,
                msg=f"{self.name}: refused {title}: {exc.message}",
                code=exc.code,
                **stream.ids,
            )
            return Decision.REJECT
        if approval is Approval.ALLOW:
            return Decision.APPROVE
        if approval is Approval.DENY or self._approvals is None:
            return Decision.REJECT
        answer = await self._approvals.ask(
            kind=kind,
            tool=f"{self.name}: {title}",
            args=args,
            task_id=stream.ids.get("task_id"),
            trace_id=stream.ids.get("trace_id"),
            timeout_s=self._approval_timeout_s,
            extra=extra,
        )
        if control.interrupted.is_set():
            return None
        # An edited version cannot be handed back through a permission: a rejection.
        return answer.decision if answer.decision in _ALLOW_KINDS else Decision.REJECT

    async def _allowed(
        self,
        stream: PromptStream,
        control: TaskControl,
        tool: str,
        args: dict[str, Any],
        extra: dict[str, Any] | None = None,
    ) -> None:
        """A request not covered by a permission the runtime asked for: the policy decides.

        Raises the refusal the runtime reads when the policy or the owner says no.
        """
        call_id = stream.open_call()
        if call_id is not None and call_id in self._granted:
            return
        title = stream.calls[call_id].title if call_id is not None else tool
        kind = "diff" if extra else "tool"
        decision = await self._decide(tool, title, kind, args, extra or {}, stream, control)
        if decision not in _ALLOW_KINDS:
            denied = ToolDenied(f"{tool} of {self.name}: not allowed ({title})")
            raise _refused(denied)
        if call_id is not None:
            self._granted.add(call_id)

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> schema.ReadTextFileResponse:
        self._task()
        try:
            result = await asyncio.to_thread(self._sandbox.read, path)
        except AteamError as exc:
            raise _refused(exc) from None
        except OSError as exc:
            raise RequestError.invalid_params({"message": f"{path}: {exc.strerror}"}) from None
        if result.encoding != "utf-8":
            raise RequestError.invalid_params({"message": f"{path} is not a text file"})
        text = result.content
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start : start + limit if limit is not None else None])
        return schema.ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> schema.WriteTextFileResponse | None:
        stream, control = self._task()
        try:  # outside the sandbox is refused before anyone is asked
            await asyncio.to_thread(self._sandbox.resolve, path)
        except AteamError as exc:
            raise _refused(exc) from None
        old = await asyncio.to_thread(_old_text, self._sandbox, path)
        diff = unified(old, content, path)
        await self._allowed(
            stream, control, "fs.patch", {"path": path}, {"path": path, "diff": diff}
        )
        try:
            await asyncio.to_thread(self._sandbox.write, path, content)
        except AteamError as exc:
            self._emit(
                EventType.WARN,
                msg=f"{self.name}: write refused: {exc.message}",
                code=exc.code,
                **stream.ids,
            )
            raise _refused(exc) from None
        except OSError as exc:
            raise RequestError.invalid_params({"message": f"{path}: {exc.strerror}"}) from None
        call_id = stream.open_call()
        if diff and call_id is not None:
            stream.calls[call_id].diffs.append(diff)  # shown with the call's end
        elif diff:
            stream.output(None, diff.encode())
        return schema.WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[schema.EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> schema.CreateTerminalResponse:
        stream, control = self._task()
        line = " ".join([command, *(args or ())])
        await self._allowed(stream, control, "os.exec", {"command": line})
        try:
            terminal = await self.terminals.create(
                command,
                args,
                cwd=cwd,
                env={var.name: var.value for var in env or ()},
                output_limit=output_byte_limit,
            )
        except AteamError as exc:
            raise _refused(exc) from None
        self._terminal_calls[terminal.id] = stream.open_call()
        return schema.CreateTerminalResponse(terminal_id=terminal.id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.TerminalOutputResponse:
        terminal = self._terminal(terminal_id)
        status = None
        if terminal.result is not None or terminal.process.done:
            status = _exit_status(await self.terminals.wait(terminal_id))
        return schema.TerminalOutputResponse(
            output=terminal.text(), truncated=terminal.truncated, exit_status=status
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.WaitForTerminalExitResponse:
        self._terminal(terminal_id)
        result = await self.terminals.wait(terminal_id)
        status = _exit_status(result)
        return schema.WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.KillTerminalResponse | None:
        self._terminal(terminal_id)
        self.terminals.kill(terminal_id)
        return schema.KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.ReleaseTerminalResponse | None:
        await self.terminals.release(terminal_id)
        self._terminal_calls.pop(terminal_id, None)
        return schema.ReleaseTerminalResponse()

    async def create_elicitation(
        self, message: str, mode: schema.ElicitationMode, **kwargs: Any
    ) -> schema.CreateElicitationResponse:
        # A form for a person: ateam has no form to show it in, so it is declined and the
        # runtime goes on without the answer rather than waiting for one.
        return schema.DeclineElicitationResponse(action="decline")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.debug("runtime %s: extension notification %s left alone", self.name, method)

    # helpers ------------------------------------------------------------------------------

    def _emit(self, etype: str, **fields: Any) -> None:
        if self._events is not None:
            self._events.emit(etype, **fields)

    def _task(self) -> tuple[PromptStream, TaskControl]:
        if self.stream is None or self.control is None:
            raise RequestError.invalid_request({"message": "no task is running in this agent"})
        return self.stream, self.control

    def _terminal(self, terminal_id: str) -> Any:
        try:
            return self.terminals.get(terminal_id)
        except AteamError as exc:
            raise RequestError.invalid_params({"message": exc.message}) from None

    def _terminal_output(self, terminal_id: str, data: bytes) -> None:
        if self.stream is not None:
            self.stream.terminal_output(self._terminal_calls.get(terminal_id), data)


def _pick(options: list[schema.PermissionOption], decision: Decision | None) -> str | None:
    """The option that says ``decision``; ``None`` when the request is to be cancelled."""
    if decision is None:
        return None
    by_kind: dict[str, str] = {}
    for option in options:
        by_kind.setdefault(str(option.kind), option.option_id)
    wanted = _ALLOW_KINDS.get(decision, _REJECT_KINDS)
    for kind in wanted:
        if kind in by_kind:
            return by_kind[kind]
    # A runtime that offers no rejecting option: cancelling is the only safe answer.
    return None


def _request_shape(
    call: schema.ToolCallUpdate, tool: str, kind: str | None
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """How a permission request shows in the console: a diff for an edit, else the call."""
    raw = call.raw_input if isinstance(call.raw_input, dict) else {}
    args: dict[str, Any] = {"title": call.title, "kind": kind}
    diffs = [part for part in call.content or () if getattr(part, "type", None) == "diff"]
    if diffs:
        first = diffs[0]
        text = "".join(unified(d.old_text or "", d.new_text, d.path) for d in diffs)
        return "diff", args, {"path": first.path, "diff": text}
    command = raw.get("command") or raw.get("cmd")
    if command is not None:
        args["command"] = command if isinstance(command, str) else " ".join(map(str, command))
    elif raw:
        args["input"] = raw
    return "tool", args, {}


# Claude Code names its tools in ``_meta`` and leaves ``kind`` out of a permission
# request; its names say the kind.
_KIND_OF_TOOL: dict[str, str] = {
    "Bash": "execute",
    "Write": "edit",
    "Edit": "edit",
    "MultiEdit": "edit",
    "NotebookEdit": "edit",
    "Read": "read",
}


def _kind_from_meta(meta: dict[str, Any] | None) -> str | None:
    claude = meta.get("claudeCode") if isinstance(meta, dict) else None
    name = claude.get("toolName") if isinstance(claude, dict) else None
    if not isinstance(name, str):
        return None
    return _KIND_OF_TOOL.get(name.rpartition("__")[2])


def _file_change(sandbox: Sandbox, call: schema.ToolCallUpdate) -> dict[str, Any]:
    """The diff an edit would make, from its input (``file_path`` with ``content``, or
    ``old_string``/``new_string``): what the owner reads before ``/apply``."""
    raw = call.raw_input if isinstance(call.raw_input, dict) else {}
    path = raw.get("file_path") or raw.get("path")
    if not isinstance(path, str):
        return {}
    old = _old_text(sandbox, path)
    if isinstance(raw.get("content"), str):
        new = str(raw["content"])
    elif isinstance(raw.get("new_string"), str):
        before = str(raw.get("old_string", ""))
        new = old.replace(before, str(raw["new_string"]), 1) if before else str(raw["new_string"])
    else:
        return {}
    return {"path": path, "diff": unified(old, new, path)}


def _old_text(sandbox: Sandbox, path: str) -> str:
    try:
        result = sandbox.read(path)
    except (AteamError, OSError):
        return ""
    return result.content if result.encoding == "utf-8" else ""


def _exit_status(result: Any) -> schema.TerminalExitStatus:
    signal_name: str | None = None
    if result.signal is not None:
        try:
            signal_name = signal.Signals(result.signal).name
        except ValueError:
            signal_name = str(result.signal)
    return schema.TerminalExitStatus(exit_code=result.exit_code, signal=signal_name)


def _refused(exc: AteamError) -> RequestError:
    """The sandbox's or the policy's refusal, as the runtime reads it."""
    return RequestError.invalid_params({"message": exc.one_line(), "code": str(exc.code)})
