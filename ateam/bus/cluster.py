"""Redis Cluster and Sentinel: their URLs, their clients, and keys grouped by slot.

Two URL forms name a topology rather than one server (``rediss+…`` for TLS)::

    redis+cluster://[user:password@]host:port[,host:port…]
    redis+sentinel://[user:password@]host:port[,host:port…]/MASTER_NAME[/DB]

A **Cluster** URL lists seed nodes; redis-py's asyncio cluster client learns the rest
and follows ``MOVED``/``ASK``. ateam keeps every multi-key operation inside one slot
(each project's keys share the hash tag ``{<project>}``, see :mod:`ateam.bus.keys`); the
reads that span agents of several projects (the event tail's ``XREAD``) are split by
slot with :func:`group_by_slot`. Classic ``PUBLISH`` reaches subscribers on every node,
so pub/sub works unchanged through the cluster client's pub/sub.

A **Sentinel** URL lists Sentinels and names the monitored master; the client asks a
Sentinel for the master at each (re)connection, so after a failover the next attempt
of ateam's usual reconnection lands on the promoted replica.

``tools.yaml`` may say ``transport.cluster: true`` beside a plain ``redis://host:port``
URL instead: :func:`cluster_url` turns that into the Cluster URL it means.

Both clients are handed out typed as :class:`redis.asyncio.Redis`: the Sentinel one is
one, and the Cluster one answers the same command methods (the few places that differ
ask :func:`is_cluster`).

A Cluster that cannot serve for a while (no node answers, a slot has no master while
a replica is promoted or slots move) raises :class:`ClusterUnavailable`, a redis-py
``ConnectionError``: ateam's reconnecting loops wait it out like a lost link. What a
server keeps to itself and does not replicate (``ACL SETUSER``) is run on every server
of the set with :func:`on_every_node`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import (
    ClusterNode,
    ClusterPipeline,
    ClusterPubSub,
    NodesManager,
    RedisCluster,
)
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.commands.core import ManagementCommands, PubSubCommands
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, SlotNotCoveredError

from ateam.bus._tls import tls_options

# The URL forms are ateam.bus.topology's (no cluster client there), re-exported here.
from ateam.bus.topology import (
    _SENTINEL_QUERY,
    TOPOLOGY_SCHEMES,
    Topology,
    cluster_url,
    parse_topology,
)

__all__ = [
    "TOPOLOGY_SCHEMES",
    "ClusterUnavailable",
    "Topology",
    "cluster_url",
    "group_by_slot",
    "is_cluster",
    "make_topology_client",
    "on_every_node",
    "parse_topology",
]

T = TypeVar("T")


def make_topology_client(target: Any, options: dict[str, Any]) -> aioredis.Redis | None:
    """A client for a Cluster or Sentinel ``target``; ``None`` for a single-server URL.

    Args:
        target: the :class:`~ateam.bus.connection.RedisTarget` (duck-typed: this module
            sits under :mod:`ateam.bus.connection`).
        options: the connection options a single server would get (timeouts, pool size,
            credentials from ``tools.yaml``); credentials in the URL win.
    """
    topology = parse_topology(target.url)
    if topology is None:
        return None
    kwargs = dict(options)
    if topology.username:
        kwargs["username"] = topology.username
    if topology.password:
        kwargs["password"] = topology.password
    if topology.scheme == "rediss":
        kwargs.update(tls_options(dataclasses.replace(target, url=topology.node_url())))
        kwargs["ssl"] = True
    if topology.kind == "cluster":
        return _cluster_client(topology, kwargs)
    return _sentinel_client(topology, kwargs)


class ClusterUnavailable(RedisConnectionError):
    """The Cluster cannot serve now: no seed node answers, or some slot has no master.

    redis-py says so with exceptions outside its ``RedisError`` tree
    (``RedisClusterException``, ``SlotNotCoveredError``). Both pass by waiting (a node
    restarts, a replica is promoted, slots are reassigned), so they are raised as the
    ``ConnectionError`` every reconnecting loop of ateam already retries with backoff,
    and that a front end reports as ``redis.unavailable``.
    """


_LEARN_SLOTS = NodesManager.initialize.__code__


def _learning_slots(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while the client learnt the slot map.

    Only then does a ``RedisClusterException`` mean a cluster that is down: the same
    class also says "these keys are in different slots" or "this command names no key",
    which no waiting cures. redis-py learns the map in ``NodesManager.initialize``,
    called from the client's ``initialize`` up to 8.1 and, from 8.2, also straight from
    a command that found its slot uncovered.
    """
    return any(frame.f_code is _LEARN_SLOTS for frame, _ in traceback.walk_tb(exc.__traceback__))


@contextlib.contextmanager
def _unavailable() -> Iterator[None]:
    """Raise redis-py's errors of a cluster that is down as :class:`ClusterUnavailable`:
    a slot still uncovered after its retries, or a slot map it could not learn."""
    try:
        yield
    except RedisClusterException as exc:
        if not isinstance(exc, SlotNotCoveredError) and not _learning_slots(exc):
            raise
        raise ClusterUnavailable(f"Redis Cluster unavailable: {exc}") from exc


class _Pipeline(ClusterPipeline):
    """redis-py blocks ``PUBLISH`` and ``TIME`` in cluster pipelines; Redis does not.

    A ``PUBLISH`` reaches the subscribers of every node whichever node runs it, and is
    routed by its channel's slot (a project's channels carry the project's hash tag, so
    inside a project's transaction it stays in the transaction's slot). ``TIME`` goes to
    the cluster's default node (the first master of the slot map, the same for every
    client while it lives), as a plain ``client.time()`` does, so heartbeat stamps and
    the ages computed from them read one clock.
    """

    publish = PubSubCommands.publish
    time = ManagementCommands.time

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        with _unavailable():
            return await super().execute(*args, **kwargs)


class _Cluster(RedisCluster):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # INFO asks every node (answers keyed by node): the eviction guard must see the
        # policy of each master, not of whichever one is the default.
        self.command_flags["INFO"] = self.ALL_NODES

    async def initialize(self, *args: Any, **kwargs: Any) -> Any:
        # Learning the slot map is where a cluster that is down (every seed unreachable,
        # slots uncovered, nodes disagreeing mid-change) shows; commands, pipelines and
        # pub/sub all come through here first.
        with _unavailable():
            return await super().initialize(*args, **kwargs)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        with _unavailable():
            return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> Any:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # refused there, as it should be
        return _Pipeline(self, transaction)  # type: ignore[abstract]  # typing quirk

    def pubsub(self, node: Any = None, host: Any = None, port: Any = None, **kwargs: Any) -> Any:
        return _PubSub(self, node=node, host=host, port=port, **kwargs)


class _PubSub(ClusterPubSub):
    """Pub/sub that learns the cluster's slots first, if nothing else has yet.

    redis-py picks the node of a subscription from its slot map, which is empty until
    a first command: a process whose first act is to subscribe would fail (KeyError).
    """

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self.connection is None and self.connection_pool is None:
            await self.cluster.initialize()
        with _unavailable():
            return await super().execute_command(*args, **kwargs)


def _cluster_client(topology: Topology, kwargs: dict[str, Any]) -> aioredis.Redis:
    # One pool per node; the single-server default (1000) is per node too.
    kwargs.pop("db", None)
    client = _Cluster(
        startup_nodes=[ClusterNode(host, port) for host, port in topology.nodes], **kwargs
    )
    return cast(aioredis.Redis, client)


class _SentinelMaster(aioredis.Redis):
    """The master's client, which also closes its connections to the Sentinels."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node_options: dict[str, Any] = {}
        """How to connect to one server of the set (credentials, TLS, timeouts), set by
        :func:`_sentinel_client`: a replica is reached with them too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            await self.connection_pool.sentinel_manager.aclose()  # type: ignore[attr-defined]


class _Sentinel(Sentinel):
    """Sentinels whose "no master" says so in one line (redis-py's lists every client)."""

    async def discover_master(self, service_name: str) -> Any:
        try:
            return await super().discover_master(service_name)
        except MasterNotFoundError as exc:
            where = ", ".join(
                f"{s.connection_pool.connection_kwargs['host']}:"
                f"{s.connection_pool.connection_kwargs['port']}"
                for s in self.sentinels
            )
            raise MasterNotFoundError(
                f"no Sentinel ({where}) named a master {service_name!r}: unreachable, "
                "or not monitoring that name"
            ) from exc


def _sentinel_client(topology: Topology, kwargs: dict[str, Any]) -> aioredis.Redis:
    query = dict(topology.query)
    sentinel_kwargs = {k: v for k, v in kwargs.items() if k.startswith(("socket_", "ssl"))}
    for name in _SENTINEL_QUERY:
        if query.get(name):
            sentinel_kwargs[name.removeprefix("sentinel_")] = query[name]
    sentinel = _Sentinel(list(topology.nodes), sentinel_kwargs=sentinel_kwargs, **kwargs)
    assert topology.master is not None
    client = sentinel.master_for(topology.master, redis_class=_SentinelMaster, db=topology.db)
    client.node_options = {**kwargs, "db": topology.db}
    return cast(aioredis.Redis, client)


def is_cluster(client: object) -> bool:
    """Whether ``client`` talks to a Redis Cluster (commands are routed by slot)."""
    return isinstance(client, RedisCluster)


def group_by_slot(items: Iterable[T], key: Callable[[T], str]) -> list[list[T]]:
    """``items`` in groups whose ``key`` share a Cluster slot, in first-seen order.

    A multi-key command (``XREAD`` of several streams, a transaction) sent per group
    never crosses slots; on a single server the grouping is harmless.
    """
    groups: dict[int, list[T]] = {}
    for item in items:
        groups.setdefault(key_slot(key(item).encode()), []).append(item)
    return list(groups.values())


async def on_every_node(client: aioredis.Redis, *command: Any) -> list[str]:
    """Run ``command`` on every server behind ``client``; the ``host:port`` of each.

    For what a server keeps to itself and does not replicate (``ACL SETUSER``): every
    master and replica of a Cluster; the master and each live replica the Sentinels know
    of; the one server otherwise.
    """
    if isinstance(client, RedisCluster):
        await client.initialize()
        nodes = client.get_nodes()
        await client.execute_command(*command, target_nodes=nodes)
        return [node.name for node in nodes]
    await client.execute_command(*command)  # type: ignore[no-untyped-call]
    if not isinstance(client, _SentinelMaster):
        return [_address(client.connection_pool.connection_kwargs)]
    pool: Any = client.connection_pool
    master = await pool.get_master_address()
    done = [f"{master[0]}:{master[1]}"]
    for host, port in await pool.sentinel_manager.discover_slaves(pool.service_name):
        replica = aioredis.Redis(host=host, port=port, **client.node_options)
        try:
            await replica.execute_command(*command)  # type: ignore[no-untyped-call]
        finally:
            await replica.aclose()
        done.append(f"{host}:{port}")
    return done


def _address(options: dict[str, Any]) -> str:
    return str(options.get("path") or f"{options.get('host')}:{options.get('port')}")
