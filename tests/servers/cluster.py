"""A real 3-master Redis Cluster for the tests, made without ``redis-cli``.

Three servers start with ``--cluster-enabled yes``; each is given a third of the 16 384
hash slots (``CLUSTER ADDSLOTSRANGE``, or ``ADDSLOTS`` before 7.0), the second and third
``CLUSTER MEET`` the first, and the cluster is ready when every node says
``cluster_state:ok``. No replicas: a test of failover uses Sentinel
(:mod:`tests.servers.sentinel`).

Every node listens on 127.0.0.1 and a free port and is killed by its owner (a fixture).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.cluster import ClusterNode, RedisCluster

from ateam.bus._server_binary import probe_binary
from tests._wait import wait_for
from tests.servers.redis import RedisProcess, free_port, server_binary

__all__ = ["SLOTS", "ClusterProcess"]

SLOTS = 16384


@dataclass
class ClusterProcess:
    """Three master nodes sharing the slots; ``url`` is ateam's ``redis+cluster://`` URL."""

    workdir: Path
    size: int = 3
    binary: str = field(default_factory=lambda: server_binary().path)
    nodes: list[RedisProcess] = field(default_factory=list)
    _modern: bool = True
    _bus_ports: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        seeds = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redis+cluster://{seeds}"

    def client(self) -> RedisCluster:
        """A sync cluster client for assertions."""
        return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in self.nodes])

    def start(self) -> None:
        options = (
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "5000",
            "--appendfsync", "everysec",
        )  # fmt: skip
        probed = probe_binary(self.binary)
        self._modern = probed is not None and probed.version >= (7, 0, 0)
        try:
            for index in range(self.size):
                # The cluster bus listens on port + 10000 unless told otherwise, which a
                # free port above 55535 cannot have: name a free one (7.0 and later).
                bus_port = free_port() if self._modern else 0
                bus = ("--cluster-port", str(bus_port)) if bus_port else ()
                self._bus_ports.append(bus_port)
                node = RedisProcess(
                    self.workdir / f"node{index}", binary=self.binary, extra=(*options, *bus)
                )
                self.nodes.append(node)
                node.start()
            self._assign_slots()
            self._meet()
            wait_for(self._ok, 20, "the cluster to say cluster_state:ok")
        except BaseException:
            self.stop()
            raise

    def _assign_slots(self) -> None:
        share = SLOTS // self.size
        for index, node in enumerate(self.nodes):
            first = index * share
            last = SLOTS - 1 if index == self.size - 1 else first + share - 1
            with node.client() as client:
                if self._modern:
                    client.execute_command("CLUSTER ADDSLOTSRANGE", first, last)
                else:
                    client.execute_command("CLUSTER ADDSLOTS", *range(first, last + 1))

    def _meet(self) -> None:
        first = self.nodes[0]
        bus = (self._bus_ports[0],) if self._bus_ports[0] else ()
        for node in self.nodes[1:]:
            with node.client() as client:
                client.execute_command("CLUSTER MEET", "127.0.0.1", first.port, *bus)

    def _ok(self) -> bool:
        for node in self.nodes:
            with node.client() as client:
                info = client.execute_command("CLUSTER INFO")  # parsed into a dict
            if info.get("cluster_state") != "ok" or int(info["cluster_known_nodes"]) != self.size:
                return False
        return True

    def node_of(self, key: str) -> RedisProcess:
        """The node serving ``key``'s slot."""
        with self.nodes[0].client() as client:
            slot = int(client.execute_command("CLUSTER KEYSLOT", key))
        share = SLOTS // self.size
        return self.nodes[min(slot // share, self.size - 1)]

    def stop(self) -> None:
        for node in self.nodes:
            try:
                node.stop()
            except (OSError, redis.RedisError):
                pass
