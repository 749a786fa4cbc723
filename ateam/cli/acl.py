"""``ateam acl PROJECT``: the least-privilege Redis user of one project."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ateam.cli._run import project_or_none, run_verb
from ateam.client import Team
from ateam.client.acl import acl_setuser
from ateam.config.names import checked_name
from ateam.constants import DEFAULT_NAMESPACE
from ateam.errors import UsageError


def cmd_acl(args: argparse.Namespace) -> int:
    project = checked_name(args.project_name)
    config = project_or_none()
    namespace = (config.namespace if config else None) or DEFAULT_NAMESPACE
    password = None
    if args.password_file is not None:
        password = _read_secret(args.password_file)
    if not args.apply:
        line, user, secret = acl_setuser(project, namespace, user=args.user, password=password)
        if args.json:
            _print_json(project, user, None if password else secret, command=line, applied=False)
            return 0
        print(line)
        print(
            f"# run it as an admin (redis-cli, then paste), then connect as {user}: "
            f"redis://{user}:{'<password>' if password else secret}@HOST:PORT",
            file=sys.stderr,
        )
        return 0

    async def work(team: Team) -> int:
        user, secret = await team.create_project_user(project, user=args.user, password=password)
        if args.json:
            _print_json(project, user, None if password else secret, command=None, applied=True)
            return 0
        shown = "<the password in the file>" if password else secret
        print(f"created Redis user {user} for project {project}")
        print(f"connect as: redis://{user}:{shown}@HOST:PORT (the password is shown only once)")
        return 0

    return run_verb(args, "acl", work)


def _print_json(
    project: str, user: str, password: str | None, *, command: str | None, applied: bool
) -> None:
    """The documented object; ``password`` is null when it came from --password-file."""
    record = {
        "project": project,
        "user": user,
        "password": password,
        "command": command,
        "applied": applied,
    }
    print(json.dumps(record, indent=2, sort_keys=True))


def _read_secret(path: str) -> str:
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    if len(secret) < 16 or any(ch.isspace() for ch in secret):
        raise UsageError(f"{path}: the password must be at least 16 characters, no spaces")
    return secret
