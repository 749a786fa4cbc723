"""Keep Redis passwords out of ``ps`` and out of what people read.

Any local user can read every process's command line (``ps``, ``/proc/PID/cmdline``), but
only the process's owner can read its environment. So ateam hands a Redis URL to the
processes it starts (the supervisor, kept agents) in ``ATEAM_REDIS_URL``, never as
``--redis``; and a process that was itself given a URL with a password on its command line
(``ateam up --redis redis://:pw@…``, an agent started by hand) rewrites its own title at
once, so that ``ps`` shows ``****`` from then on.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, urlsplit

__all__ = ["bus_environment", "mask_own_title", "mask_url", "masked_title"]

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
"""A URL inside a command line; a password never holds white space there, as one word."""


def mask_url(url: str) -> str:
    """``url`` with its password (in the user part or a ``password=`` query) as ``****``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:****@{netloc.rsplit('@', 1)[1]}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = "&".join(f"{k}=****" if k == "password" else f"{k}={v}" for k, v in pairs)
    if netloc == parts.netloc and "password" not in dict(pairs):
        return url
    # Rebuilt by hand: urlunsplit drops the "//" of an empty netloc (unix:///path).
    rebuilt = f"{parts.scheme}://{netloc}{parts.path}"
    return f"{rebuilt}?{query}" if query else rebuilt


def masked_title(title: str) -> str:
    """``title`` with the password of every URL in it replaced by ``****``."""
    return _URL.sub(lambda match: mask_url(match.group(0)), title)


def mask_own_title() -> None:
    """Rewrite this process's title if its command line shows a password.

    ``setproctitle`` is imported only then: most command lines hold no URL at all.
    """
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:  # not Linux: ask the library, which knows the platform's way
        raw = b""
    title = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    if raw and masked_title(title) == title:
        return
    import setproctitle

    current = setproctitle.getproctitle()
    masked = masked_title(current)
    if masked != current:
        setproctitle.setproctitle(masked)


def bus_environment(redis_url: str | None) -> dict[str, str] | None:
    """The environment for a child that must use ``redis_url`` (``None``: inherit ours)."""
    if not redis_url:
        return None
    return {**os.environ, "ATEAM_REDIS_URL": redis_url}
