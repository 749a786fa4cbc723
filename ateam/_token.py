"""``--token-file FILE``: one meaning wherever a verb takes it (``ateam mcp --http``,
``ateam console --web``).

The file exists: its first line is the token (so a client's configuration survives
restarts). It does not: a new random token is written there, readable by its owner only
(0600). Either way the verb says which, and never prints the token itself (``ateam mcp``
on stderr, its stdout may be the MCP stream; ``console --web`` beside the URL it prints).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from ateam.errors import UsageError

__all__ = ["TOKEN_MIN_CHARS", "TokenFile", "token_from_file"]

TOKEN_MIN_CHARS = 16
"""A shorter token in a token file is refused: it could be guessed."""


@dataclass(frozen=True)
class TokenFile:
    """The token a ``--token-file`` gave, and whether it was written just now."""

    path: Path
    token: str = field(repr=False)
    created: bool
    """True: the file did not exist, and holds a new token now."""

    def line(self, who: str) -> str:
        """The line telling people which it was (``who``: the verb, for its stderr)."""
        if self.created:
            return f"{who}: wrote a new token to {self.path} (mode 0600); clients read it there"
        return f"{who}: read the token from {self.path}"


def token_from_file(path: str | Path) -> TokenFile:
    """The token in ``path`` if it exists, else a new one written there with mode 0600.

    Raises:
        UsageError: the file cannot be read or written, or holds no token of at least
            :data:`TOKEN_MIN_CHARS` characters without spaces on its first line.
    """
    where = Path(path).expanduser()
    token = secrets.token_urlsafe(32)
    try:
        # Created 0600 and only if absent (never readable by others, not for a moment;
        # a symlink is not followed): an existing file is the user's, read, not replaced.
        fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return TokenFile(where, _read(where), created=False)
    except OSError as exc:
        raise UsageError(f"--token-file {where}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return TokenFile(where, token, created=True)


def _read(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--token-file {path}: {exc}") from None
    token = lines[0].strip() if lines else ""
    if len(token) < TOKEN_MIN_CHARS or any(ch.isspace() for ch in token):
        raise UsageError(
            f"--token-file {path}: the first line must be a token of at least "
            f"{TOKEN_MIN_CHARS} characters without spaces (remove the file to have one made)"
        )
    return token
