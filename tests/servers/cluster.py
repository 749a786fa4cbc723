"""A real 3-master Redis Cluster for the tests, made without ``redis-cli``.

Three servers start with ``--cluster-enabled yes``; each is given a third of the 16 384
hash slots (``CLUSTER ADDSLOTSRANGE``, or ``ADDSLOTS`` before 7.0), the second and third
``CLUSTER MEET`` the first, and the cluster is ready when every node says
``cluster_state:ok``. With ``replicas=N``, N more servers each ``CLUSTER REPLICATE`` a
master in turn (for what each server keeps to itself, like ACL users); a test of
failover uses Sentinel (:mod:`tests.servers.sentinel`).

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
    replicas: int = 0
    """Replica servers, following master 0, 1, … in turn."""
    binary: str = field(default_factory=lambda: server_binary().path)
    nodes: list[RedisProcess] = field(default_factory=list)
    """The masters (the ones holding slots), in slot order."""
    replica_nodes: list[RedisProcess] = field(default_factory=list)
    _modern: bool = True
    _bus_ports: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        seeds = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redis+cluster://{seeds}"

    @property
    def every_node(self) -> list[RedisProcess]:
        """Masters, then replicas."""
        return [*self.nodes, *self.replica_nodes]

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
            for index in range(self.size + self.replicas):
                # The cluster bus listens on port + 10000 unless told otherwise, which a
                # free port above 55535 cannot have: name a free one (7.0 and later).
                bus_port = free_port() if self._modern else 0
                bus = ("--cluster-port", str(bus_port)) if bus_port else ()
                self._bus_ports.append(bus_port)
                node = RedisProcess(
                    self.workdir / f"node{index}", binary=self.binary, extra=(*options, *bus)
                )
                (self.nodes if index < self.size else self.replica_nodes).append(node)
                node.start()
            self._assign_slots()
            self._meet()
            if self.replica_nodes:
                wait_for(self._all_known, 20, "every node to know every other")
                self._replicate()
            self.wait_ok()
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
        for node in self.every_node[1:]:
            with node.client() as client:
                client.execute_command("CLUSTER MEET", "127.0.0.1", first.port, *bus)

    def _all_known(self) -> bool:
        for node in self.every_node:
            with node.client() as client:
                info = client.execute_command("CLUSTER INFO")  # parsed into a dict
            if int(info["cluster_known_nodes"]) != len(self.every_node):
                return False
        return True

    def _replicate(self) -> None:
        for index, replica in enumerate(self.replica_nodes):
            master_id = self.node_id(self.nodes[index % self.size])
            with replica.client() as client:
                client.execute_command("CLUSTER REPLICATE", master_id)

    @staticmethod
    def node_id(node: RedisProcess) -> str:
        """The cluster's id of ``node``."""
        with node.client() as client:
            # Parsed by redis-py: {address: {"node_id": …, "flags": "myself,master"}}
            # (CLUSTER NODES, since CLUSTER MYID is 7.0 and later).
            known = client.execute_command("CLUSTER NODES")
        return str(next(n["node_id"] for n in known.values() if "myself" in n["flags"]))

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every node says ``cluster_state:ok`` and lists every node and replica."""
        wait_for(self._ok, timeout, "the cluster to say cluster_state:ok")

    def _ok(self) -> bool:
        for node in self.every_node:
            with node.client() as client:
                info = client.execute_command("CLUSTER INFO")  # parsed into a dict
                if node in self.replica_nodes:
                    replication = client.info("replication")
                    if replication.get("master_link_status") != "up":
                        return False
                # Clients learn the replicas from CLUSTER SLOTS: every node must list them.
                ranges = client.execute_command("CLUSTER SLOTS")
                if sum(len(r) - 3 for r in ranges) != len(self.replica_nodes):
                    return False
            known = int(info["cluster_known_nodes"])
            if info.get("cluster_state") != "ok" or known != len(self.every_node):
                return False
        return True

    def node_of(self, key: str) -> RedisProcess:
        """The node serving ``key``'s slot."""
        with self.nodes[0].client() as client:
            slot = int(client.execute_command("CLUSTER KEYSLOT", key))
        share = SLOTS // self.size
        return self.nodes[min(slot // share, self.size - 1)]

    def stop(self) -> None:
        for node in self.every_node:
            try:
                node.stop()
            except (OSError, redis.RedisError):
                pass
