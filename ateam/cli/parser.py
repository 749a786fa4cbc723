"""Every ``ateam`` verb in one table, and the parser :func:`build_parser` makes of it.

An entry names the verb, its help line, its handler and the function that adds its
arguments, or its actions (``ateam kb add``). Help and shell completion read this
table; the handlers live in one module per family beside their arguments.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ateam import __version__
from ateam.cli import (
    acl,
    agents,
    attach,
    completion,
    console,
    context,
    init,
    kb,
    lifecycle,
    logs,
    mail,
    mcp,
    modes,
    runtimes,
    server,
    tasks,
    work,
)
from ateam.cli._verb import Verb, chain, project_verb_options


def cmd_completion(args: argparse.Namespace) -> int:
    """``ateam completion SHELL``: here, since the script is made of the whole parser."""
    print(completion.script(build_parser(), args.shell))
    return 0


VERBS: tuple[Verb, ...] = (
    Verb("agent", "run one agent in the foreground", agents.cmd_agent, agents.agent_args),
    Verb("console", "the interactive console", console.cmd_console, console.console_args),
    Verb(
        "attach",
        "the console, attached to one agent (like tmux attach -t)",
        attach.cmd_attach,
        attach.attach_args,
    ),
    Verb(
        "up",
        "start every agent of a project that is not running, then a console",
        lifecycle.cmd_up,
        lifecycle.up_args,
    ),
    Verb(
        "down",
        "stop the agents of a project that up, start or a console started",
        lifecycle.cmd_down,
        lifecycle.down_args,
    ),
    Verb(
        "start",
        "start agents of the project here that are not running",
        lifecycle.cmd_start,
        lifecycle.start_args,
    ),
    Verb(
        "restart",
        "stop agents of the project here gracefully, then start them again",
        lifecycle.cmd_restart,
        lifecycle.restart_args,
    ),
    Verb("ps", "list agents", agents.cmd_ps, agents.ps_args),
    Verb(
        "logs",
        "print an agent's log (state/agent.log), or follow it",
        logs.cmd_logs,
        logs.logs_args,
    ),
    Verb(
        "session",
        "the team snapshot (~/.ateam/session.json), fresh",
        agents.cmd_session,
        agents.session_args,
    ),
    Verb("send", "queue text for an agent", agents.cmd_send, agents.send_args),
    Verb(
        "broadcast",
        "queue one text at every running agent of the project",
        mail.cmd_broadcast,
        mail.broadcast_args,
    ),
    Verb("tail", "print an agent's events", agents.cmd_tail, agents.tail_args),
    Verb(
        "stop",
        "stop agents gracefully; nothing restarts them until a start",
        agents.cmd_stop,
        agents.stop_args,
    ),
    Verb(
        "ack",
        "clear an agent's ALERT in ps: damage found, or a final exit",
        agents.cmd_ack,
        agents.ack_args,
    ),
    Verb("server", "manage the embedded Redis", server.cmd_server, server.server_args),
    Verb(
        "runtimes",
        "the coding agents (Claude Code, Codex, Gemini CLI) agents can run: installed or not",
        runtimes.cmd_runtimes,
        runtimes.runtimes_args,
    ),
    Verb(
        "init",
        "create a new project: .ateam/ with one agent on the offline echo model",
        init.cmd_init,
        init.init_args,
    ),
    Verb(
        "kb",
        "an agent's knowledge bases: add documents, search them, list them",
        actions=(
            Verb(
                "add",
                "ingest files and directories (the agent's sandbox only)",
                kb.cmd_kb_add,
                chain(kb.kb_agent, kb.kb_add_args, kb.kb_common),
            ),
            Verb(
                "search",
                "the passages most like a query, best first",
                kb.cmd_kb_search,
                chain(kb.kb_agent, kb.kb_search_args, kb.kb_common),
            ),
            Verb(
                "ls",
                "the documents of a scope",
                kb.cmd_kb_ls,
                chain(kb.kb_agent, kb.kb_ls_args, kb.kb_common),
            ),
        ),
    ),
    Verb(
        "tasks",
        "the project's task board: tasks agents claim one at a time",
        actions=(
            Verb(
                "ls",
                "the project's tasks, highest priority first",
                tasks.cmd_tasks_ls,
                chain(tasks.tasks_ls_args, project_verb_options),
            ),
            Verb(
                "add",
                "put an open task on the board",
                tasks.cmd_tasks_add,
                chain(tasks.tasks_add_args, project_verb_options),
            ),
            Verb(
                "claim",
                "take a task: exits 0 only for the winner",
                tasks.cmd_tasks_claim,
                chain(tasks.tasks_claim_args, project_verb_options),
            ),
            Verb(
                "done",
                "finish a task you hold",
                tasks.cmd_tasks_done,
                chain(tasks.tasks_done_args, project_verb_options),
            ),
            Verb(
                "fail",
                "give up a task you hold, saying why",
                tasks.cmd_tasks_fail,
                chain(tasks.tasks_fail_args, project_verb_options),
            ),
            Verb(
                "reopen",
                "put a failed task back on the board for anyone",
                tasks.cmd_tasks_reopen,
                chain(tasks.tasks_again_args, project_verb_options),
            ),
            Verb(
                "retry",
                "put a failed task back, offered first to the agent that failed it",
                tasks.cmd_tasks_retry,
                chain(tasks.tasks_again_args, project_verb_options),
            ),
        ),
    ),
    Verb("diff", "what an agent or a task changed on its branch", work.cmd_diff, work.diff_args),
    Verb(
        "merge",
        "land an agent's or a task's branch in its base (refused, changing nothing, if unsafe)",
        work.cmd_merge,
        work.merge_args,
    ),
    Verb(
        "discard",
        "delete an agent's or a task's worktree and branch (asks)",
        work.cmd_discard,
        work.discard_args,
    ),
    Verb(
        "plan",
        "an agent's plan and its approval (agents or tasks with require_plan)",
        actions=(
            Verb("show", "plan.md and its approval", modes.cmd_plan_show, modes.plan_show_args),
            Verb(
                "approve",
                "approve the plan: edits and commands allowed again",
                modes.cmd_plan_approve,
                modes.plan_approve_args,
            ),
            Verb(
                "reject",
                "send the plan back with feedback",
                modes.cmd_plan_reject,
                modes.plan_reject_args,
            ),
        ),
    ),
    Verb(
        "delegate",
        "delegate mode on or off: coordination tools only",
        modes.cmd_delegate,
        modes.delegate_args,
    ),
    Verb(
        "context",
        "the team's context items: what agents and people share",
        actions=(
            Verb(
                "ls",
                "the project's live items, newest first",
                context.cmd_context_ls,
                chain(context.context_ls_args, project_verb_options),
            ),
            Verb(
                "search",
                "items ranked by meaning",
                context.cmd_context_search,
                chain(context.context_search_args, project_verb_options),
            ),
            Verb(
                "post",
                "share an item with the team",
                context.cmd_context_post,
                chain(context.context_post_args, project_verb_options),
            ),
        ),
    ),
    Verb(
        "acl",
        "print (or, with --apply, create) a Redis user that can reach one project only: "
        "its keys, channels and commands",
        acl.cmd_acl,
        acl.acl_args,
    ),
    Verb(
        "mcp",
        "serve the team to MCP clients (Claude Code, Codex CLI, Cursor) on stdio",
        mcp.cmd_mcp,
        mcp.mcp_args,
    ),
    Verb(
        "completion",
        "print a shell completion script (bash, zsh or fish)",
        cmd_completion,
        completion.completion_args,
    ),
)
"""The verbs in the order ``ateam --help`` lists them."""


def build_parser(verbs: Sequence[Verb] = VERBS) -> argparse.ArgumentParser:
    """``ateam``'s parser: one subparser per verb of ``verbs``, one per action below it."""
    parser = argparse.ArgumentParser(
        prog="ateam", description="A team of AI coding agents steered from a console over Redis."
    )
    parser.add_argument("--version", action="version", version=f"ateam {__version__}")
    _add_verbs(parser, verbs, dest="command")
    return parser


def _add_verbs(parser: argparse.ArgumentParser, verbs: Sequence[Verb], *, dest: str) -> None:
    sub = parser.add_subparsers(
        dest=dest,
        required=True,
        metavar="VERB" if dest == "command" else "ACTION",
        help="one of these (each takes --help)",
    )
    for verb in verbs:
        p = sub.add_parser(verb.name, help=verb.help, description=verb.help)
        verb.args(p)
        if verb.actions:
            _add_verbs(p, verb.actions, dest=f"{verb.name}_action")
        else:
            p.set_defaults(handler=verb.handler)
