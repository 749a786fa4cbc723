"""Listening sockets of ateam's HTTP front ends (``ateam mcp --http``, ``console --web``).

Both bind a host and port given by the user and warn when it reaches beyond this
machine, so the two rules live here once.
"""

from __future__ import annotations

import ipaddress
import socket

from ateam.errors import UsageError

__all__ = ["is_loopback", "listen"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``.

    Listening starts before the caller prints the address, so a client that reads it
    and connects at once waits in the backlog instead of being refused.

    Raises:
        UsageError: The host does not resolve, or the address is in use or not ours.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock
