"""Cluster and Sentinel URLs, their clients, and keys grouped by slot (issue 13 point 6).

What a Cluster or a failover does to ateam is tested against real servers in
tests/integration/test_cluster.py and test_sentinel.py; here, what needs no server.
"""

from __future__ import annotations

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.crc import key_slot

from ateam.bus.cluster import group_by_slot, is_cluster, parse_topology
from ateam.bus.connection import RedisTarget, make_client, resolve_target
from ateam.bus.keys import Keys
from ateam.errors import UsageError


def test_a_cluster_url_lists_its_seed_nodes() -> None:
    found = parse_topology("redis+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2:7001/")
    assert found is not None
    assert (found.kind, found.scheme) == ("cluster", "redis")
    assert found.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert (found.username, found.password) == ("u", "p@ss")


def test_a_sentinel_url_names_the_master_and_a_database() -> None:
    found = parse_topology("rediss+sentinel://s1:26379,s2:26379/mymaster/2")
    assert found is not None
    assert (found.kind, found.scheme, found.master, found.db) == (
        "sentinel",
        "rediss",
        "mymaster",
        2,
    )
    assert found.node_url() == "rediss://s1:26379/"


def test_single_server_urls_are_no_topology() -> None:
    assert parse_topology("redis://localhost:6379/0") is None
    assert parse_topology("unix:///tmp/redis.sock") is None


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://",
        "redis+cluster://host",
        "redis+cluster://host:port",
        "redis+cluster://host:7000/3",
        "redis+sentinel://host:26379",
        "redis+sentinel://host:26379/master/db",
    ],
)
def test_malformed_topology_urls_are_usage_errors(url: str) -> None:
    with pytest.raises(UsageError):
        resolve_target(url)


def test_tls_options_need_a_tls_scheme_there_too() -> None:
    with pytest.raises(UsageError, match="rediss://"):
        resolve_target("redis+cluster://h:7000?ssl_certfile=/x.pem")


def test_the_password_is_masked_in_descriptions() -> None:
    target = resolve_target("redis+sentinel://:hunter2@h:26379/m")
    assert target is not None
    assert "hunter2" not in target.describe()


async def test_make_client_builds_the_cluster_and_sentinel_clients() -> None:
    cluster = make_client(RedisTarget("redis+cluster://127.0.0.1:7000", "test", password="pw"))
    sentinel = make_client(RedisTarget("redis+sentinel://127.0.0.1:26379/m/1", "test"))
    try:
        assert isinstance(cluster, RedisCluster) and is_cluster(cluster)
        assert not is_cluster(sentinel)
        pool = sentinel.connection_pool
        assert isinstance(pool, SentinelConnectionPool)
        assert (pool.service_name, pool.connection_kwargs["db"]) == ("m", 1)
        # The single-server options reach the topology clients too.
        assert pool.connection_kwargs["socket_timeout"] is None
    finally:
        await cluster.aclose()
        await sentinel.aclose()


def test_group_by_slot_keeps_each_projects_streams_together() -> None:
    keys = Keys("ns:")
    agents = [f"p{i}/a{j}" for i in range(5) for j in range(3)]
    groups = group_by_slot(agents, keys.events)
    assert len(groups) == 5
    for group in groups:
        assert len({key_slot(keys.events(a).encode()) for a in group}) == 1
        assert len({a.partition("/")[0] for a in group}) == 1
