"""``ateam mcp``: the team as a Model Context Protocol server (stdio, or HTTP + token).

With ``--as NAME`` the server acts as agent ``P/NAME`` (its coding agent's runtime is the
client): the agent hands its instance's identity token down in ``ATEAM_AGENT_TOKEN``
(:mod:`ateam.agent.acp.teammate`), and a server without a valid one does not start.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field

from ateam._token import token_from_file
from ateam.cli._run import run_verb
from ateam.client import Team, local_redactor
from ateam.config import project_name
from ateam.config.schema import TeamSpec, check_name
from ateam.constants import AGENT_MAX_HOPS_ENV, AGENT_TOKEN_ENV
from ateam.errors import IdentityRefused, UsageError


@dataclass(frozen=True)
class _ActingAs:
    """``--as``: the agent, the token its instance handed down, its ``team.max_hops``."""

    agent: str
    token: str = field(repr=False)
    max_hops: int

    @property
    def project(self) -> str:
        return self.agent.partition("/")[0]


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from ateam.mcp import DEFAULT_PORT, HttpOptions, serve
    except ImportError as exc:  # the SDK is an extra
        need = f"ateam mcp needs the mcp extra: pip install 'ateam[mcp]' ({exc})"
        raise UsageError(need) from None
    if not args.http and (args.host, args.port, args.token_file) != (None, None, None):
        raise UsageError("--host, --port and --token-file go with --http")
    http = None
    if args.http:
        token = {}
        if args.token_file is not None:
            found = token_from_file(args.token_file)
            print(found.line("ateam mcp"), file=sys.stderr)
            token = {"token": found.token}
        http = HttpOptions(
            host=args.host or "127.0.0.1",
            port=DEFAULT_PORT if args.port is None else args.port,
            token_from=args.token_file,
            **token,
        )
    acting = _acting_as(args.as_agent, args.project) if args.as_agent else None
    try:  # the default project: --project, else the nearest one, else each call names one
        project: str | None = acting.project if acting else project_name(args.project)
    except UsageError:
        project = None

    async def work(team: Team) -> int:
        member = None
        if acting is not None:
            member = team.member(acting.agent, acting.token, max_hops=acting.max_hops)
            await member.check()  # refused at start: no server acts unproven
        return await serve(team, project, http=http, acting=member)

    return run_verb(args, "mcp", work, redactor=local_redactor())


def _acting_as(name: str, project: str | None) -> _ActingAs:
    """The agent ``--as`` names (``NAME`` in ``--project`` or the nearest project, or
    ``P/NAME``), with the token and hop limit its agent put in this environment.

    The token is taken out of the environment once read: nothing this process starts
    (an embedded server started on demand) inherits it.

    Raises:
        UsageError: a malformed name, a project that differs from ``--project``, no
            project at all, or a hop limit that is not a number from 1 to 64.
        IdentityRefused: no token (the agent's own runtime is always given one).
    """
    their_project, slash, bare = name.rpartition("/")
    if slash and project is not None and their_project != project:
        raise UsageError(f"--as {name} is an agent of {their_project}, not of --project {project}")
    agent_project = their_project if slash else project_name(project)
    try:
        check_name(agent_project, "project")
        check_name(bare, "agent")
    except ValueError as exc:
        raise UsageError(f"--as: {exc}") from None
    agent = f"{agent_project}/{bare}"
    token = os.environ.pop(AGENT_TOKEN_ENV, "").strip()
    if not token:
        raise IdentityRefused(
            f"--as {agent} needs the identity token of {agent}'s running instance in "
            f"{AGENT_TOKEN_ENV}; the agent gives it to the MCP server its coding agent starts",
            detail={"agent": agent},
        )
    return _ActingAs(agent, token, _max_hops())


def _max_hops() -> int:
    """``ATEAM_AGENT_MAX_HOPS``, else the default ``team.max_hops`` of an agent."""
    given = os.environ.get(AGENT_MAX_HOPS_ENV, "").strip()
    if not given:
        return TeamSpec().max_hops
    try:
        return TeamSpec(max_hops=int(given)).max_hops
    except ValueError:  # not a number, or out of range (pydantic's is a ValueError too)
        raise UsageError(
            f"{AGENT_MAX_HOPS_ENV} must be a number of hops from 1 to 64; got {given!r}"
        ) from None
