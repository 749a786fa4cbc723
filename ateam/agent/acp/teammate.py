"""The ateam MCP server a coding agent gets in its session: the team, acting as its agent.

An agent whose model is a coding agent (Claude Code, Codex over ACP) hands it ateam's
MCP server in every ``session/new`` (SPEC §7.1), so the runtime uses the board, the
team context, ``team.send`` and the knowledge bases as tools of its own, and what it
does there is the agent's doing (``ateam mcp --as``, :mod:`ateam.mcp.acting`).

The runtime starts the server itself, with an environment of its own making: the
agent's command policy (``PATH``, ``HOME``, ``LANG`` ...), none of the agent's
``ATEAM_*``, perhaps a private ``HOME`` and no ``XDG_RUNTIME_DIR``, and whatever the
runtime adds. So the entry carries everything the server needs in itself, and secrets
only in its environment, never in its arguments (any local user can read a command
line; only the user can read a process's environment).
"""

from __future__ import annotations

import site
import sys
import sysconfig
from pathlib import Path

from acp import schema

import ateam
from ateam.bus.connection import RedisTarget, target_environment
from ateam.bus.identity import AgentIdentity
from ateam.config import AgentConfig
from ateam.constants import AGENT_MAX_HOPS_ENV, AGENT_TOKEN_ENV
from ateam.paths import ateam_home

__all__ = ["SERVER_NAME", "ateam_mcp_server"]

SERVER_NAME = "ateam"
"""The entry's name: the runtime shows its tools as ``ateam``'s (``mcp__ateam__…``)."""


def ateam_mcp_server(
    config: AgentConfig,
    target: RedisTarget,
    identity: AgentIdentity,
    *,
    python: str | None = None,
    home: Path | None = None,
    import_root: str | None = None,
) -> schema.McpServerStdio:
    """The ``mcpServers`` entry that starts ``ateam mcp --as`` for the agent ``config``.

    Pure: the same arguments give the same entry; what it reads of this process (the
    interpreter, the ateam home, where ateam is imported from) can be passed instead.

    Each piece, and why it is there:

    * ``command``: the absolute path of the interpreter running this agent, so the
      server is the same ateam, whatever the runtime's ``PATH`` holds (ACP wants an
      absolute path anyway).
    * ``args``: ``-m ateam mcp --project P --as NAME``: the server acts as this agent
      (``--project`` and ``--as`` name it; nothing secret is in them).
    * ``ATEAM_AGENT_TOKEN``: this instance's identity token, the proof that the server
      acts for it; the server checks it against the hash the agent's heartbeat
      publishes, at start and before every action. It lives as long as this instance.
    * ``ATEAM_AGENT_MAX_HOPS``: the agent's ``team.max_hops``, so the server refuses a
      message past it before sending, as the agent's own ``team.send`` does.
    * the bus (:func:`~ateam.bus.connection.target_environment`): ``ATEAM_REDIS_URL``
      with the credentials and TLS files of ``tools.yaml`` folded in (the server may not
      find that ``tools.yaml`` from the runtime's directory), ``ATEAM_NAMESPACE``, and
      ``ATEAM_ALLOW_EVICTION`` if the project allowed it; nothing for the embedded
      server, which is found through its home's record instead (below).
    * ``ATEAM_HOME``: the agent's ateam home: where the embedded server's record (and
      password) is, and the user's files, even when the runtime's ``HOME`` is another.
    * ``PYTHONPATH``: only when ateam runs from a directory the interpreter would not
      search by itself (a source checkout on ``PYTHONPATH``), so ``-m ateam`` finds the
      same code; an installed ateam needs none.

    Args:
        config: the agent.
        target: the bus it is on.
        identity: its running instance's identity (the heartbeat publishes its hash).
        python: the interpreter; default: this process's (``sys.executable``).
        home: the ateam home; default: this process's (``ATEAM_HOME`` or ``~/.ateam``).
        import_root: the directory ateam is imported from, if it must be on
            ``PYTHONPATH``; default: found for this process (:func:`_import_root`).
    """
    env = {
        AGENT_TOKEN_ENV: identity.token,
        AGENT_MAX_HOPS_ENV: str(config.spec.team.max_hops),
        **target_environment(target),
        "ATEAM_HOME": str((home or ateam_home()).absolute()),
    }
    root = import_root if import_root is not None else _import_root()
    if root:
        env["PYTHONPATH"] = root
    return schema.McpServerStdio(
        name=SERVER_NAME,
        command=str(Path(python or sys.executable).absolute()),
        args=["-m", "ateam", "mcp", "--project", config.project, "--as", config.name],
        env=[schema.EnvVariable(name=name, value=value) for name, value in env.items()],
    )


def _import_root() -> str:
    """The directory this ateam is imported from, or ``""`` when it is a site directory
    (an installed ateam, which the interpreter finds without help)."""
    root = Path(ateam.__file__).resolve().parent.parent
    paths = sysconfig.get_paths()
    sites = [*site.getsitepackages(), site.getusersitepackages(), paths["purelib"]]
    if root in {Path(found).resolve() for found in (*sites, paths["platlib"])}:
        return ""
    return str(root)
