"""Cluster and Sentinel URLs, taken apart without redis-py's cluster client.

Every URL a process is given is checked here (:func:`parse_topology`); the clients for
the topologies are :mod:`ateam.bus.cluster`'s, which re-exports these names and imports
redis-py's cluster and Sentinel modules: a verb on a single server loads neither.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from ateam.errors import UsageError

__all__ = ["TOPOLOGY_SCHEMES", "Topology", "cluster_url", "parse_topology"]

_CLUSTER = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_SENTINEL = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
TOPOLOGY_SCHEMES = (*_CLUSTER, *_SENTINEL)
"""URL schemes that name a Cluster or a Sentinel-watched master."""

_SENTINEL_QUERY = ("sentinel_username", "sentinel_password")
"""Credentials of the Sentinels themselves, when they require their own."""


@dataclass(frozen=True)
class Topology:
    """A Cluster or Sentinel URL, taken apart."""

    kind: str
    """``cluster`` or ``sentinel``."""
    scheme: str
    """The single-server scheme it stands on: ``redis`` or ``rediss`` (TLS)."""
    nodes: tuple[tuple[str, int], ...]
    """Cluster seed nodes, or the Sentinels."""
    master: str | None = None
    """The Sentinel's name of the master (Sentinel only)."""
    db: int = 0
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    query: tuple[tuple[str, str], ...] = ()

    def node_url(self) -> str:
        """A single-server URL of the first node with the same query (for TLS options)."""
        host, port = self.nodes[0]
        query = "&".join(f"{k}={v}" for k, v in self.query)
        return f"{self.scheme}://{host}:{port}/" + (f"?{query}" if query else "")


def parse_topology(url: str) -> Topology | None:
    """The topology a URL names, or ``None`` for a single-server URL.

    Raises:
        UsageError: a Cluster or Sentinel URL that lacks its nodes or master name, or
            whose ports or database are not numbers.
    """
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme not in TOPOLOGY_SCHEMES:
        return None
    kind = "cluster" if scheme in _CLUSTER else "sentinel"
    netloc = parts.netloc.rpartition("@")[2]
    nodes = tuple(_node(spec, url) for spec in netloc.split(",") if spec)
    if not nodes:
        raise UsageError(f"a {scheme}:// URL needs at least one host:port: {_shown(url)}")
    path = [segment for segment in parts.path.split("/") if segment]
    master: str | None = None
    if kind == "sentinel":
        if not path:
            raise UsageError(
                f"a {scheme}:// URL names the master after the Sentinels: "
                f"{scheme}://host:port/MASTER_NAME (got {_shown(url)})"
            )
        master, path = unquote(path[0]), path[1:]
    if len(path) > 1 or (path and not path[0].isdigit()):
        raise UsageError(f"unexpected path in {_shown(url)}")
    db = int(path[0]) if path else 0
    if kind == "cluster" and db:
        raise UsageError(f"Redis Cluster has database 0 only: {_shown(url)}")
    return Topology(
        kind=kind,
        scheme=_CLUSTER.get(scheme) or _SENTINEL[scheme],
        nodes=nodes,
        master=master,
        db=db,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        query=tuple(parse_qsl(parts.query)),
    )


def cluster_url(url: str) -> str:
    """What a URL means with ``tools.yaml`` ``transport.cluster: true``: a Cluster URL.

    ``redis://host:port[,host:port…]`` names seed nodes like ``redis+cluster://`` does
    (``rediss://`` like ``rediss+cluster://``); a Cluster URL stays as it is.

    Raises:
        UsageError: a ``unix://`` or Sentinel URL (a Cluster is reached over TCP).
    """
    scheme, _, rest = url.partition("://")
    if scheme in _CLUSTER:
        return url
    if scheme in _CLUSTER.values():
        return f"{scheme}+cluster://{rest}"
    raise UsageError(
        f"transport.cluster: true needs a redis:// or rediss:// URL of a Cluster node, "
        f"not {_shown(url)}"
    )


def _node(spec: str, url: str) -> tuple[str, int]:
    host, colon, port = spec.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise UsageError(f"expected host:port, got {spec!r} in {_shown(url)}")
    return host.strip("[]"), int(port)


def _shown(url: str) -> str:
    """The URL without its credentials, for an error message."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}"
