"""A Cluster or a Sentinel set passing through a bad moment is a lost link, not a crash.

Issue 13 point 6: ``CLUSTERDOWN``, ``TRYAGAIN``, a slot map with a hole and a Sentinel
naming no master all pass by waiting, so ateam's loops must retry them with backoff
(:data:`ateam.bus.backoff.CONNECTION_ERRORS`) and front ends report them as
``redis.unavailable``, never as a final refusal or an ``internal`` error.

Real servers: a 3-master Cluster (:mod:`tests.servers.cluster`) whose nodes are told to
forget a slot (``CLUSTER DELSLOTS``) or to migrate one (``CLUSTER SETSLOT … MIGRATING``),
and a master + replica + Sentinel (:mod:`tests.servers.sentinel`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import MasterNotFoundError
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, RedisClusterException, RedisError, TryAgainError

from ateam.bus.backoff import CONNECTION_ERRORS
from ateam.bus.cluster import ClusterUnavailable
from ateam.bus.connection import RedisTarget, bus_error, ensure_reachable, make_client
from ateam.bus.keys import Keys
from ateam.bus.publisher import EventPublisher
from ateam.errors import Code, RedisUnavailable
from tests._wait import async_wait_for
from tests.servers.cluster import ClusterProcess
from tests.servers.sentinel import SentinelSet

AGENT = "proj/zeus"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    cluster = ClusterProcess(tmp_path_factory.mktemp("cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def keys() -> Keys:
    return Keys(f"t{uuid.uuid4().hex[:10]}:")


@pytest.fixture
async def cclient(cluster: ClusterProcess, keys: Keys) -> AsyncIterator[aioredis.Redis]:
    """ateam's own client of the Cluster."""
    client = make_client(RedisTarget(cluster.url, "test", namespace=keys.ns))
    yield client
    await client.aclose()


@contextmanager
def unserved(cluster: ClusterProcess, key: str) -> Iterator[redis.Redis]:
    """While inside, no node serves ``key``'s slot; yields a plain client of its old owner.

    Every node forgets the slot, so the cluster is down (``cluster_state:fail``) and no
    node's slot map covers it; afterwards the owner takes it back and the others learn
    it from the cluster bus.
    """
    slot = key_slot(key.encode())
    owner = cluster.node_of(key)
    for node in cluster.nodes:
        with node.client() as client:
            client.execute_command("CLUSTER DELSLOTS", slot)
    try:
        with redis.Redis(host="127.0.0.1", port=owner.port) as plain:
            yield plain
    finally:
        with owner.client() as client:
            client.execute_command("CLUSTER ADDSLOTS", slot)
        cluster.wait_ok()


def assert_transient(exc: BaseException) -> None:
    """Retried by every reconnecting loop; one ``redis.unavailable`` line at a front end."""
    assert isinstance(exc, CONNECTION_ERRORS), type(exc).__mro__
    assert isinstance(exc, RedisError), "front ends turn RedisError into one line"
    assert bus_error(exc).code == Code.REDIS_UNAVAILABLE


async def test_clusterdown_is_a_lost_link_raw_and_through_the_cluster_client(
    cluster: ClusterProcess, cclient: aioredis.Redis, keys: Keys
) -> None:
    key = keys.registry("proj")
    await cclient.set(key, "x")  # the client has learnt the full slot map
    with unserved(cluster, key) as owner:
        with pytest.raises(ClusterDownError) as raw:
            owner.get(key)
        assert_transient(raw.value)
        # redis-py retries and relearns the slot map. Up to 8.1 it finds a hole there,
        # not a RedisError of its own (RedisClusterException), which ateam raises as a
        # lost link; from 8.2 it may hand on the node's CLUSTERDOWN, already one.
        with pytest.raises((ClusterUnavailable, ClusterDownError)) as routed:
            await cclient.get(key)
        assert_transient(routed.value)
    assert await cclient.get(key) == b"x"


async def test_keys_in_two_slots_are_a_mistake_not_a_cluster_that_is_down(
    cclient: aioredis.Redis, keys: Keys
) -> None:
    # redis-py says both with RedisClusterException; only a slot map it could not learn
    # is waited out. A command that cannot be routed would never succeed by retrying.
    first, second = keys.registry("one"), keys.registry("two")
    assert key_slot(first.encode()) != key_slot(second.encode())
    with pytest.raises(RedisClusterException) as raised:
        await cclient.execute_command("MGET", first, second)
    assert not isinstance(raised.value, ClusterUnavailable)
    assert not isinstance(raised.value, CONNECTION_ERRORS)


def test_tryagain_during_a_slot_migration_is_a_lost_link(
    cluster: ClusterProcess, keys: Keys
) -> None:
    present, absent = keys.registry("proj"), keys.events(AGENT)  # one project: one slot
    assert key_slot(present.encode()) == key_slot(absent.encode())
    slot = key_slot(present.encode())
    owner = cluster.node_of(present)
    other = next(node for node in cluster.nodes if node is not owner)
    with redis.Redis(host="127.0.0.1", port=owner.port) as client:
        client.set(present, "x")
        client.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", cluster.node_id(other))
        try:
            # One key here, one maybe moved already: the owner cannot answer for both.
            with pytest.raises(TryAgainError) as raised:
                client.mget(present, absent)
        finally:
            client.execute_command("CLUSTER SETSLOT", slot, "STABLE")
            client.delete(present)
    assert_transient(raised.value)


async def test_a_publisher_waits_out_a_cluster_that_is_down(
    cluster: ClusterProcess, cclient: aioredis.Redis, keys: Keys, tmp_path: Path
) -> None:
    changes: list[tuple[bool, int]] = []
    publisher = EventPublisher(
        cclient,
        keys,
        AGENT,
        offset_file=tmp_path / "offset",
        on_connection_change=lambda up, failures: changes.append((up, failures)),
    )
    await publisher.start()
    try:
        publisher.emit("token", text="before")
        assert await publisher.flush(10)
        with unserved(cluster, keys.events(AGENT)):
            publisher.emit("token", text="during")
            # Retried with backoff, as a lost link: not refused, and the loop lives on.
            await async_wait_for(
                lambda: any(not up and failures >= 2 for up, failures in changes),
                20,
                "the publisher to retry the down cluster twice",
            )
            assert publisher._task is not None and not publisher._task.done()
        assert await publisher.flush(20)
        assert changes[-1] == (True, 0)
        stream = await cclient.xrange(keys.events(AGENT))
        assert len(stream) == 2
    finally:
        await publisher.aclose()


@pytest.fixture(scope="module")
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    servers = SentinelSet(tmp_path_factory.mktemp("sentinel"))
    servers.start()
    yield servers
    servers.stop()


async def test_a_sentinel_naming_no_master_is_a_lost_link(sentinels: SentinelSet) -> None:
    # What a client sees while the Sentinels have no master to name (mid-failover):
    # here for a name they do not watch, which fails the same way.
    target = RedisTarget(
        f"redis+sentinel://127.0.0.1:{sentinels.sentinel_port}/not-watched", "test"
    )
    client = make_client(target)
    try:
        with pytest.raises(MasterNotFoundError) as raised:
            await client.ping()
        assert_transient(raised.value)
        with pytest.raises(RedisUnavailable):
            await ensure_reachable(client, target)
    finally:
        await client.aclose()
