"""``ateam mcp``: the team as a Model Context Protocol server (stdio, or HTTP + token)."""

from __future__ import annotations

import argparse

from ateam.cli._run import run_verb
from ateam.cli._verb import add_redis_option, port_number
from ateam.client import Team, local_redactor
from ateam.config import project_name
from ateam.errors import UsageError


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from ateam.mcp import DEFAULT_PORT, HttpOptions, read_token, serve
    except ImportError as exc:  # the SDK is an extra
        need = f"ateam mcp needs the mcp extra: pip install 'ateam[mcp]' ({exc})"
        raise UsageError(need) from None
    if not args.http and (args.host, args.port, args.token_file) != (None, None, None):
        raise UsageError("--host, --port and --token-file go with --http")
    http = None
    if args.http:
        token = {} if args.token_file is None else {"token": read_token(args.token_file)}
        http = HttpOptions(
            host=args.host or "127.0.0.1",
            port=DEFAULT_PORT if args.port is None else args.port,
            token_from=args.token_file,
            **token,
        )
    try:  # the default project: --project, else the nearest one, else each call names one
        project: str | None = project_name(args.project)
    except UsageError:
        project = None

    async def work(team: Team) -> int:
        return await serve(team, project, http=http)

    return run_verb(args, "mcp", work, redactor=local_redactor())


def mcp_args(p: argparse.ArgumentParser) -> None:
    add_redis_option(p)
    p.add_argument(
        "--project",
        metavar="NAME",
        help="the project tools mean when they name none (default: the nearest .ateam/)",
    )
    p.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    p.add_argument("--host", metavar="ADDR", help="with --http (default 127.0.0.1)")
    p.add_argument(
        "--port", type=port_number, metavar="N", help="with --http (default 8765; 0: any)"
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --http: the bearer token clients send (default: a new one, printed)",
    )
