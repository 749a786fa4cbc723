"""Every ``ateam`` verb in one table, and the parser :func:`build_parser` makes of it.

An entry names the verb, its help line, its handler and the function that adds its
arguments, or its actions (``ateam kb add``). Help and shell completion read this
table; the handlers live in one module per family beside their arguments, named here
as ``"module:function"`` and imported only when that verb is built or run, so
``ateam --help`` imports no verb module and ``ateam ps`` only its own.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ateam import __version__
from ateam.cli import arguments, completion  # light: no client; the scripts are files
from ateam.cli._verb import Verb, chain, handler_at, project_verb_options


def cmd_completion(args: argparse.Namespace) -> int:
    """``ateam completion SHELL`` when it came through the parser (``main`` mostly prints
    the shipped script before building one)."""
    return completion.print_script(args.shell)


VERBS: tuple[Verb, ...] = (
    Verb(
        "agent",
        "run one agent in the foreground",
        handler_at("ateam.cli.agent_verb:cmd_agent"),
        arguments.agent_args,
    ),
    Verb(
        "console",
        "the interactive console",
        handler_at("ateam.cli.console:cmd_console"),
        arguments.console_args,
    ),
    Verb(
        "attach",
        "the console, attached to one agent (like tmux attach -t)",
        handler_at("ateam.cli.attach:cmd_attach"),
        arguments.attach_args,
    ),
    Verb(
        "up",
        "start every agent of a project that is not running, then a console",
        handler_at("ateam.cli.lifecycle:cmd_up"),
        arguments.up_args,
    ),
    Verb(
        "down",
        "stop the agents of a project that up, start or a console started",
        handler_at("ateam.cli.lifecycle:cmd_down"),
        arguments.down_args,
    ),
    Verb(
        "start",
        "start agents of the project here that are not running",
        handler_at("ateam.cli.lifecycle:cmd_start"),
        arguments.start_args,
    ),
    Verb(
        "restart",
        "stop agents of the project here gracefully, then start them again",
        handler_at("ateam.cli.lifecycle:cmd_restart"),
        arguments.restart_args,
    ),
    Verb(
        "ps",
        "list agents",
        handler_at("ateam.cli.agents:cmd_ps"),
        arguments.ps_args,
    ),
    Verb(
        "logs",
        "print an agent's log (state/agent.log), or follow it",
        handler_at("ateam.cli.logs:cmd_logs"),
        arguments.logs_args,
    ),
    Verb(
        "session",
        "the team snapshot (~/.ateam/session.json), fresh",
        handler_at("ateam.cli.agents:cmd_session"),
        arguments.session_args,
    ),
    Verb(
        "send",
        "queue text for an agent",
        handler_at("ateam.cli.agents:cmd_send"),
        arguments.send_args,
    ),
    Verb(
        "broadcast",
        "queue one text at every running agent of the project",
        handler_at("ateam.cli.mail:cmd_broadcast"),
        arguments.broadcast_args,
    ),
    Verb(
        "tail",
        "print an agent's events",
        handler_at("ateam.cli.agents:cmd_tail"),
        arguments.tail_args,
    ),
    Verb(
        "stop",
        "stop agents gracefully; nothing restarts them until a start",
        handler_at("ateam.cli.agents:cmd_stop"),
        arguments.stop_args,
    ),
    Verb(
        "ack",
        "clear an agent's ALERT in ps: damage found, or a final exit",
        handler_at("ateam.cli.agents:cmd_ack"),
        arguments.ack_args,
    ),
    Verb(
        "server",
        "manage the embedded Redis",
        handler_at("ateam.cli.server:cmd_server"),
        arguments.server_args,
    ),
    Verb(
        "runtimes",
        "the coding agents (Claude Code, Codex, Gemini CLI) agents can run: installed or not",
        handler_at("ateam.cli.runtimes:cmd_runtimes"),
        arguments.runtimes_args,
    ),
    Verb(
        "init",
        "create a new project: .ateam/ with one agent on the offline echo model",
        handler_at("ateam.cli.init:cmd_init"),
        arguments.init_args,
    ),
    Verb(
        "kb",
        "an agent's knowledge bases: add documents, search them, list them",
        actions=(
            Verb(
                "add",
                "ingest files and directories (the agent's sandbox only)",
                handler_at("ateam.cli.kb:cmd_kb_add"),
                chain(arguments.kb_agent, arguments.kb_add_args, arguments.kb_common),
            ),
            Verb(
                "search",
                "the passages most like a query, best first",
                handler_at("ateam.cli.kb:cmd_kb_search"),
                chain(arguments.kb_agent, arguments.kb_search_args, arguments.kb_common),
            ),
            Verb(
                "ls",
                "the documents of a scope",
                handler_at("ateam.cli.kb:cmd_kb_ls"),
                chain(arguments.kb_agent, arguments.kb_ls_args, arguments.kb_common),
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
                handler_at("ateam.cli.tasks:cmd_tasks_ls"),
                chain(arguments.tasks_ls_args, project_verb_options),
            ),
            Verb(
                "add",
                "put an open task on the board",
                handler_at("ateam.cli.tasks:cmd_tasks_add"),
                chain(arguments.tasks_add_args, project_verb_options),
            ),
            Verb(
                "claim",
                "take a task: exits 0 only for the winner",
                handler_at("ateam.cli.tasks:cmd_tasks_claim"),
                chain(arguments.tasks_claim_args, project_verb_options),
            ),
            Verb(
                "done",
                "finish a task you hold",
                handler_at("ateam.cli.tasks:cmd_tasks_done"),
                chain(arguments.tasks_done_args, project_verb_options),
            ),
            Verb(
                "fail",
                "give up a task you hold, saying why",
                handler_at("ateam.cli.tasks:cmd_tasks_fail"),
                chain(arguments.tasks_fail_args, project_verb_options),
            ),
            Verb(
                "reopen",
                "put a failed task back on the board for anyone",
                handler_at("ateam.cli.tasks:cmd_tasks_reopen"),
                chain(arguments.tasks_again_args, project_verb_options),
            ),
            Verb(
                "retry",
                "put a failed task back, offered first to the agent that failed it",
                handler_at("ateam.cli.tasks:cmd_tasks_retry"),
                chain(arguments.tasks_again_args, project_verb_options),
            ),
        ),
    ),
    Verb(
        "diff",
        "what an agent or a task changed on its branch",
        handler_at("ateam.cli.work:cmd_diff"),
        arguments.diff_args,
    ),
    Verb(
        "merge",
        "land an agent's or a task's branch in its base (refused, changing nothing, if unsafe)",
        handler_at("ateam.cli.work:cmd_merge"),
        arguments.merge_args,
    ),
    Verb(
        "discard",
        "delete an agent's or a task's worktree and branch (asks)",
        handler_at("ateam.cli.work:cmd_discard"),
        arguments.discard_args,
    ),
    Verb(
        "plan",
        "an agent's plan and its approval (agents or tasks with require_plan)",
        actions=(
            Verb(
                "show",
                "plan.md and its approval",
                handler_at("ateam.cli.modes:cmd_plan_show"),
                arguments.plan_show_args,
            ),
            Verb(
                "approve",
                "approve the plan: edits and commands allowed again",
                handler_at("ateam.cli.modes:cmd_plan_approve"),
                arguments.plan_approve_args,
            ),
            Verb(
                "reject",
                "send the plan back with feedback",
                handler_at("ateam.cli.modes:cmd_plan_reject"),
                arguments.plan_reject_args,
            ),
        ),
    ),
    Verb(
        "delegate",
        "delegate mode on or off: coordination tools only",
        handler_at("ateam.cli.modes:cmd_delegate"),
        arguments.delegate_args,
    ),
    Verb(
        "context",
        "the team's context items: what agents and people share",
        actions=(
            Verb(
                "ls",
                "the project's live items, newest first",
                handler_at("ateam.cli.context:cmd_context_ls"),
                chain(arguments.context_ls_args, project_verb_options),
            ),
            Verb(
                "search",
                "items ranked by meaning",
                handler_at("ateam.cli.context:cmd_context_search"),
                chain(arguments.context_search_args, project_verb_options),
            ),
            Verb(
                "post",
                "share an item with the team",
                handler_at("ateam.cli.context:cmd_context_post"),
                chain(arguments.context_post_args, project_verb_options),
            ),
        ),
    ),
    Verb(
        "acl",
        "print (or, with --apply, create) a Redis user that can reach one project only: "
        "its keys, channels and commands",
        handler_at("ateam.cli.acl:cmd_acl"),
        arguments.acl_args,
    ),
    Verb(
        "mcp",
        "serve the team to MCP clients (Claude Code, Codex CLI, Cursor) on stdio",
        handler_at("ateam.cli.mcp:cmd_mcp"),
        arguments.mcp_args,
    ),
    Verb(
        "completion",
        "print a shell completion script (bash, zsh or fish)",
        cmd_completion,
        completion.completion_args,
    ),
)
"""The verbs in the order ``ateam --help`` lists them."""


def build_parser(
    verbs: Sequence[Verb] = VERBS, *, only: str | None = None
) -> argparse.ArgumentParser:
    """``ateam``'s parser: one subparser per verb of ``verbs``, one per action below it.

    With ``only``, every verb is listed but only the verb of that name gets its arguments
    and handler: building a verb imports its module, and a run (or ``--help``) needs one.
    ``only=""`` builds none, which is all ``ateam --help`` needs.
    """
    parser = argparse.ArgumentParser(
        prog="ateam", description="A team of AI coding agents steered from a console over Redis."
    )
    parser.add_argument("--version", action="version", version=f"ateam {__version__}")
    _add_verbs(parser, verbs, dest="command", only=only)
    return parser


def _add_verbs(
    parser: argparse.ArgumentParser, verbs: Sequence[Verb], *, dest: str, only: str | None
) -> None:
    sub = parser.add_subparsers(
        dest=dest,
        required=True,
        metavar="VERB" if dest == "command" else "ACTION",
        help="one of these (each takes --help)",
    )
    for verb in verbs:
        p = sub.add_parser(verb.name, help=verb.help, description=verb.help)
        if only is not None and verb.name != only:
            continue  # listed in help, never chosen in this run: its module stays unread
        verb.args(p)
        if verb.actions:
            _add_verbs(p, verb.actions, dest=f"{verb.name}_action", only=None)
        else:
            p.set_defaults(handler=verb.handler)
