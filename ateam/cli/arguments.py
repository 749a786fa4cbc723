"""Each verb's arguments, kept apart from its handler so that building them is cheap.

One module on purpose: the command line's whole surface, read as one file.

``ateam VERB --help`` and the parse before a verb runs build one verb's arguments; the
handlers' modules import the client, the bus and the console, which take longer to
import (redis-py, pydantic) than the whole rest of a help. So this module imports
argparse, the option helpers of :mod:`ateam.cli._verb` and constants, nothing heavier:
``tests/unit/cli/test_imports.py`` holds it to that.

The constants they name (the knowledge bases' scopes, the diff limit, the coding agents
``init`` offers) live in :mod:`ateam.constants`, not in their heavier packages.
"""

from __future__ import annotations

import argparse

from ateam.cli._verb import add_json_option, add_project_option, add_redis_option, port_number
from ateam.constants import (
    ACP_RUNTIME_IDS,
    AGENT_TOKEN_ENV,
    DIFF_MAX_BYTES,
    KB_DEFAULT_SCOPE,
    KB_SCOPES,
    RPC_DEFAULT_DEADLINE_S,
)


def agent_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    add_project_option(p)
    p.add_argument("--name", required=True, help="the agent's name within its project")
    p.add_argument(
        "--cwd", metavar="DIR", help="its working directory and configuration (default: here)"
    )
    p.add_argument("--model", metavar="ID", help="a model of models.yaml to use instead")
    p.add_argument("--no-repl", action="store_true", help="no local prompt, even on a terminal")
    p.add_argument(
        "--bootstrap",
        metavar="TOKEN",
        help="join with a one-time token a console issued (a start on another host)",
    )


def ps_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    add_json_option(p, "the registry entries, with heartbeat_age_s")
    p.add_argument(
        "--project",
        nargs="?",
        const="",
        metavar="NAME",
        help="only the agents of project NAME (alone: of the project here)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every project in id order (default: the project here first, then the others)",
    )


def session_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    add_json_option(p, "the snapshot document")
    p.add_argument("--project", metavar="NAME", help="only this project (default: every one)")


_AGENT_HELP = "the agent: NAME in the project here, a unique prefix of it, or PROJECT/NAME"


_TAKEOVER_HELP = "{what} even while a console owns the agent (that console turns read-only)"


def send_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("id", metavar="NAME", help=_AGENT_HELP)
    add_project_option(p)
    p.add_argument("text", nargs="+", metavar="TEXT", help="the words to queue, as one input")
    p.add_argument("--takeover", action="store_true", help=_TAKEOVER_HELP.format(what="send"))
    add_json_option(p, "the queued item: id (the task id), agent, queued, created, redacted")
    p.add_argument(
        "--wait-for-start",
        action="store_true",
        help="if the agent is not running, keep the text in its mailbox: it is queued when "
        "the agent starts",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=RPC_DEFAULT_DEADLINE_S,
        metavar="SECONDS",
        help=f"how long to wait for the agent's answer (default {RPC_DEFAULT_DEADLINE_S:g})",
    )
    p.add_argument(
        "--request-id",
        metavar="ID",
        help="resend a send that timed out: an id the agent has seen is never queued twice",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help=(
            "wait for the task to end and print its answer instead of its id; exit 5 "
            "(task.failed) if it fails"
        ),
    )


def tail_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("id", metavar="NAME", help=_AGENT_HELP)
    add_project_option(p)
    p.add_argument(
        "--from",
        dest="from_offset",
        type=int,
        metavar="OFFSET",
        help="start at this event offset; 1 replays all that is kept (default: the newest 100)",
    )
    p.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new events until Ctrl+C"
    )
    add_json_option(
        p, "JSON Lines: one event a line (offset, type, ts, data; text chunks as data.text)"
    )


def stop_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("ids", nargs="+", metavar="NAME", help=_AGENT_HELP)
    add_project_option(p)
    p.add_argument("--takeover", action="store_true", help=_TAKEOVER_HELP.format(what="stop it"))
    p.add_argument(
        "--wait",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for each agent to leave the registry (default 10)",
    )
    add_json_option(p, "one row per agent: id, status (stopped or failed), pid, error")


def ack_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("id", metavar="NAME", help=_AGENT_HELP)
    add_project_option(p)
    p.add_argument(
        "--takeover", action="store_true", help=_TAKEOVER_HELP.format(what="clear its alerts")
    )
    add_json_option(p, "agent, alerts_cleared, exit_cleared (the exit record, or null)")


# --- acl ----------------------------------------------------------------------


def acl_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("project_name", metavar="PROJECT", help="the one project the user may reach")
    p.add_argument("--user", metavar="NAME", help="the user's name (default ateam-PROJECT)")
    p.add_argument("--password-file", metavar="FILE", help="use this password, not a random one")
    p.add_argument("--apply", action="store_true", help="run ACL SETUSER on the server now")
    add_redis_option(p)
    add_json_option(p, "project, user, password, command (the ACL SETUSER line), applied")


# --- attach -------------------------------------------------------------------


def attach_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "id",
        metavar="NAME",
        help="the agent: NAME in the project here, a unique prefix of it, or PROJECT/NAME",
    )
    add_project_option(p)
    p.add_argument(
        "--takeover",
        action="store_true",
        help="take it over from the console that owns it (that console turns read-only)",
    )
    p.add_argument("--no-ui", action="store_true", help="plain line mode")
    add_redis_option(p)


# --- console ------------------------------------------------------------------


def console_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument("--no-ui", action="store_true", help="plain line mode")
    p.add_argument("--panes", action="store_true", help="full-screen panes (when available)")
    p.add_argument("--web", action="store_true", help="serve the console to browsers (one per tab)")
    p.add_argument("--host", metavar="ADDR", help="with --web (default 127.0.0.1)")
    # A string, checked by the handler: a bad port is a one-line error with a code.
    p.add_argument("--port", metavar="N", help="with --web (default 8765; 0: any free port)")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --web: the token to ask for, read from FILE if it exists, "
        "else a new one written there (mode 0600)",
    )
    p.add_argument("--read-only", action="store_true", help="with --web: tabs only watch")


# --- lifecycle ----------------------------------------------------------------


def up_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument(
        "dir", nargs="?", default=".", help="the project's directory (default: the current one)"
    )
    p.add_argument("--no-ui", action="store_true", help="open the console in plain line mode")
    p.add_argument("--down", action="store_true", help="stop the project's agents (`ateam down`)")
    p.add_argument("--detach", action="store_true", help="start the agents, open no console")
    add_json_option(p, "one row per agent, and no console")


def down_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument(
        "dir", nargs="?", default=".", help="the project's directory (default: the current one)"
    )
    add_json_option(p, "one row per agent")


def _names_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "names",
        nargs="+",
        metavar="NAME",
        help="an agent of the project here: its name, a unique prefix, or PROJECT/NAME "
        "(which also works outside the project, once `ateam up` has started it)",
    )


def start_args(p: argparse.ArgumentParser) -> None:
    _names_arg(p)
    add_redis_option(p)
    add_json_option(p, "one row per agent")


def restart_args(p: argparse.ArgumentParser) -> None:
    start_args(p)
    p.add_argument(
        "--takeover",
        action="store_true",
        help="stop an agent even while a console owns it (that console turns read-only)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long each agent gets to stop before this gives up (default 10)",
    )


# --- logs ---------------------------------------------------------------------


def logs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "id",
        metavar="NAME",
        help="the agent: NAME in the project here, a unique prefix of it, or PROJECT/NAME",
    )
    add_project_option(p)
    p.add_argument(
        "-f", "--follow", action="store_true", help="keep printing what is added until Ctrl+C"
    )
    p.add_argument(
        "-n",
        "--lines",
        type=int,
        metavar="N",
        help="only the last N lines (default: the whole log)",
    )


# --- mail ---------------------------------------------------------------------


def broadcast_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    add_project_option(p)
    p.add_argument("text", nargs="+", metavar="TEXT", help="the words to queue, as one input")
    p.add_argument(
        "--takeover",
        action="store_true",
        help="send even to agents a console owns (those consoles turn read-only)",
    )
    add_json_option(p, "per agent: the queued id, or the error (code, message)")


# --- mcp ----------------------------------------------------------------------


def mcp_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument(
        "--project",
        metavar="NAME",
        help="the project tools mean when they name none (default: the nearest .ateam/)",
    )
    p.add_argument(
        "--as",
        dest="as_agent",
        metavar="NAME",
        help="act as agent NAME of the project (or PROJECT/NAME): its claims, posts and "
        f"sends; needs its running instance's token in {AGENT_TOKEN_ENV} (what an agent "
        "gives its coding agent's runtime)",
    )
    p.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    p.add_argument("--host", metavar="ADDR", help="with --http (default 127.0.0.1)")
    p.add_argument(
        "--port", type=port_number, metavar="N", help="with --http (default 8765; 0: any)"
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --http: the bearer token clients send is read from FILE, or a new one "
        "written there (0600) if it does not exist (default: a new one each start, printed)",
    )


# --- modes --------------------------------------------------------------------


_MODES_TAKEOVER_HELP = "even while a console owns the agent (that console turns read-only)"


def _modes_agent_args(p: argparse.ArgumentParser, json_what: str) -> None:
    add_redis_option(p)
    p.add_argument("id", metavar="NAME", help=_AGENT_HELP)
    add_project_option(p)
    add_json_option(p, json_what)


_STATE_JSON = "agent, plan, task, status, feedback, by, at, require_plan, delegate"


def plan_show_args(p: argparse.ArgumentParser) -> None:
    _modes_agent_args(p, f"{_STATE_JSON}, text (plan.md)")


def plan_approve_args(p: argparse.ArgumentParser) -> None:
    _modes_agent_args(p, _STATE_JSON)
    p.add_argument("--feedback", default="", metavar="TEXT", help="a note for the agent")
    p.add_argument("--takeover", action="store_true", help=f"approve {_MODES_TAKEOVER_HELP}")


def plan_reject_args(p: argparse.ArgumentParser) -> None:
    _modes_agent_args(p, _STATE_JSON)
    p.add_argument(
        "--feedback", required=True, metavar="TEXT", help="what to change: the agent's next input"
    )
    p.add_argument("--takeover", action="store_true", help=f"reject {_MODES_TAKEOVER_HELP}")


def delegate_args(p: argparse.ArgumentParser) -> None:
    _modes_agent_args(p, _STATE_JSON)
    p.add_argument("mode", choices=["on", "off"], help="coordination tools only, or every tool")
    p.add_argument("--takeover", action="store_true", help=f"switch it {_MODES_TAKEOVER_HELP}")


# --- runtimes -----------------------------------------------------------------


def runtimes_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", nargs="?", default=".", help="the project (default: the nearest)")
    add_json_option(p, "one object per runtime (see docs/configuration.md)")


# --- server -------------------------------------------------------------------


def server_args(p: argparse.ArgumentParser) -> None:
    # No --redis: this verb is about the one server ateam starts itself.
    p.add_argument(
        "action",
        choices=["start", "stop", "status"],
        help="start it (or find it running), stop it, or say how it is",
    )
    add_json_option(p, "one object: running, pid, socket, version, ... (url, started for start)")


# --- tasks --------------------------------------------------------------------


_AS_HELP = "the agent that {what}: NAME in this project, a unique prefix, or PROJECT/NAME"


def tasks_ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--status", choices=["open", "claimed", "done", "failed"], help="only tasks in this state"
    )


def tasks_add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("title", nargs="+", metavar="WORD", help="the task's title")
    p.add_argument("--detail", default="", metavar="TEXT", help="a longer description")
    p.add_argument("--priority", type=int, default=0, metavar="N", help="higher first")
    p.add_argument("--depends-on", metavar="ID,ID", help="tasks that must be done first")
    p.add_argument(
        "--require-plan",
        action="store_true",
        help="its agent works read-only until its plan is approved (ateam plan approve)",
    )
    p.add_argument(
        "--as", dest="agent", metavar="NAME", help=_AS_HELP.format(what="adds it (default: cli)")
    )


def tasks_claim_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("task_id", metavar="ID", help="the task: its id, or a unique prefix of it")
    p.add_argument(
        "--as", dest="agent", required=True, metavar="NAME", help=_AS_HELP.format(what="holds it")
    )


def tasks_done_args(p: argparse.ArgumentParser) -> None:
    tasks_claim_args(p)
    p.add_argument("--result", default="", metavar="TEXT", help="what came of it")


def tasks_fail_args(p: argparse.ArgumentParser) -> None:
    tasks_claim_args(p)
    p.add_argument("--reason", required=True, metavar="TEXT", help="why it could not be done")


def tasks_again_args(p: argparse.ArgumentParser) -> None:
    p.epilog = (
        "Only a failed task goes back; why it failed is kept (last_error) and shown to "
        "whoever takes it next. reopen opens it to anyone at once; retry lets only the "
        "agent that failed it claim it for 30 s if that agent is running, then anyone."
    )
    p.add_argument("task_id", metavar="ID", help="the failed task: its id, or a unique prefix")
    p.add_argument(
        "--as",
        dest="agent",
        metavar="NAME",
        help=_AS_HELP.format(what="sends it back (default: cli)"),
    )


# --- context ------------------------------------------------------------------


CONTEXT_TYPES = ["discovery", "decision", "status", "request", "alert"]


URGENCIES = ["background", "attention", "blocking"]


def context_ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--urgency", choices=URGENCIES, help="only items at least this urgent")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (default 50)")


SEARCH_EPILOG = (
    "Items are ranked with the embedder models.yaml configures (embeddings:). The offline "
    "default (hashing) matches words, not meaning: configure an embeddings endpoint to find "
    "paraphrases."
)


def context_search_args(p: argparse.ArgumentParser) -> None:
    p.epilog = SEARCH_EPILOG
    p.add_argument("query", nargs="+", metavar="WORD", help="what to look for, in any words")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="at most N (default 20)")


def context_post_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("title", nargs="+", metavar="WORD", help="the item's title")
    p.add_argument(
        "--type", default="status", choices=CONTEXT_TYPES, help="what kind of item (default status)"
    )
    p.add_argument(
        "--urgency",
        choices=URGENCIES,
        help="background (default), attention (a banner) or blocking (a task for agents)",
    )
    p.add_argument(
        "--scope",
        default="project",
        choices=["task", "project", "global"],
        help="who sees it (default project; global: every project)",
    )
    p.add_argument("--tags", metavar="A,B", help="tags agents subscribe to, comma-separated")
    p.add_argument("--content", default="", metavar="TEXT", help="the body, beyond the title")


# --- kb -----------------------------------------------------------------------


def kb_agent(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "id",
        metavar="NAME",
        help="the agent: NAME in the project here, a unique prefix of it, or PROJECT/NAME",
    )


def kb_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scope",
        choices=KB_SCOPES,
        default=KB_DEFAULT_SCOPE,
        help=f"the agent's own, its project's or yours (default {KB_DEFAULT_SCOPE})",
    )
    add_redis_option(p)
    add_project_option(p)


def kb_add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help="files and directories in the agent's sandbox"
    )
    p.add_argument(
        "--takeover",
        action="store_true",
        help="add even while a console owns the agent (that console turns read-only)",
    )
    add_json_option(p, "the report: ingested, skipped, chunks")


def kb_search_args(p: argparse.ArgumentParser) -> None:
    p.epilog = (
        "The agent searches with the embedder models.yaml configures (embeddings:). The "
        "offline default (hashing) matches words, not meaning: configure an embeddings "
        "endpoint to find paraphrases."
    )
    p.add_argument("query", nargs="+", metavar="WORD", help="what to look for, in any words")
    p.add_argument("--k", type=int, help="at most this many passages (default 8)")
    add_json_option(p, "the passages, best first")


def kb_ls_args(p: argparse.ArgumentParser) -> None:
    add_json_option(p, "one object per document")


# --- work ---------------------------------------------------------------------


_TARGET_HELP = "an agent's name (its branch ateam/NAME) or a board task's id (ateam/*/TASK)"


def _work_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="NAME|TASK", help=_TARGET_HELP)
    p.add_argument(
        "--project",
        metavar="NAME",
        help="the project (default: the nearest .ateam/project.yaml; else where it was started)",
    )


def diff_args(p: argparse.ArgumentParser) -> None:
    _work_common(p)
    p.add_argument("--stat", action="store_true", help="only the files changed and the totals")
    p.add_argument(
        "--max-bytes",
        type=int,
        default=DIFF_MAX_BYTES,
        metavar="N",
        help=f"show at most N bytes of the diff (default {DIFF_MAX_BYTES}); the rest is counted",
    )
    add_json_option(p, "files, stat, diff, and what was left out")


def merge_args(p: argparse.ArgumentParser) -> None:
    _work_common(p)
    p.epilog = (
        "The merge is tried in a scratch worktree first: a conflict, a main tree with "
        "uncommitted changes or a task still claimed is refused and nothing changes."
    )
    p.add_argument("--squash", action="store_true", help="land it as one commit")
    p.add_argument("--into", metavar="BRANCH", help="the branch to merge into (default: its base)")
    p.add_argument("--keep", action="store_true", help="keep the task's worktree and branch")
    add_json_option(p, "the branch, where it landed and the new commit")
    add_redis_option(p)


def discard_args(p: argparse.ArgumentParser) -> None:
    _work_common(p)
    p.add_argument("--yes", action="store_true", help="do not ask (needed without a terminal)")
    p.add_argument(
        "--reopen", action="store_true", help="put the board task back to open, to be done again"
    )
    add_redis_option(p)


# --- init ---------------------------------------------------------------------


def init_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "dir", nargs="?", default=".", help="where to create .ateam/ (default: the current one)"
    )
    p.add_argument("--name", help="the project's name (default: the directory's name)")
    p.add_argument("--agent", default="zeus", help="the first agent's name (default: zeus)")
    p.add_argument(
        "--runtime",
        choices=sorted(ACP_RUNTIME_IDS),
        help="run the agent on a coding agent you use (over ACP) instead of the echo model",
    )
    p.add_argument(
        "--example",
        action="store_true",
        help="write the commented template of every configuration file (a project that "
        "runs as it is, on the echo model) instead of the short one",
    )
    add_json_option(p, "project, root, agent, files")
