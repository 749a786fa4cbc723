"""A real Redis master, one replica and one Sentinel watching them, for failover tests.

The Sentinel has quorum 1 and declares the master down after ``down_after_ms`` without
an answer, so killing the master (:meth:`SentinelSet.kill_master`) promotes the replica
within a few seconds. ``url`` is ateam's ``redis+sentinel://`` URL for the set.

Every process listens on 127.0.0.1 and a free port and is killed by its owner (a fixture).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests._wait import wait_for
from tests.servers.redis import RedisProcess, ServerStartError, free_port, server_binary

__all__ = ["MASTER_NAME", "SentinelSet"]

MASTER_NAME = "ateam-test"


@dataclass
class SentinelSet:
    """Master + replica + one Sentinel; the master may be killed and the replica promoted."""

    workdir: Path
    down_after_ms: int = 1000
    binary: str = field(default_factory=lambda: server_binary().path)
    master: RedisProcess | None = None
    replica: RedisProcess | None = None
    sentinel_port: int = field(default_factory=free_port)
    sentinel_proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{MASTER_NAME}"

    def sentinel(self) -> redis.Redis:
        """A sync client of the Sentinel itself."""
        return redis.Redis(host="127.0.0.1", port=self.sentinel_port)

    def master_port(self) -> int:
        """The port of the master the Sentinel names now."""
        with self.sentinel() as client:
            _host, port = client.sentinel_get_master_addr_by_name(MASTER_NAME)
        return int(port)

    def start(self) -> None:
        try:
            self.master = RedisProcess(self.workdir / "master", binary=self.binary)
            self.master.start()
            self.replica = RedisProcess(
                self.workdir / "replica",
                binary=self.binary,
                extra=("--replicaof", "127.0.0.1", str(self.master.port)),
            )
            self.replica.start()
            wait_for(self._replicating, 20, "the replica to sync with the master")
            self._start_sentinel()
            wait_for(self._watching, 20, "the Sentinel to see the master and its replica")
        except BaseException:
            self.stop()
            raise

    def _replicating(self) -> bool:
        assert self.replica is not None
        with self.replica.client() as client:
            info = client.info("replication")
        return info.get("master_link_status") == "up"

    def _start_sentinel(self) -> None:
        assert self.master is not None
        directory = self.workdir / "sentinel"
        directory.mkdir(parents=True, exist_ok=True)
        conf = directory / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel_port}\n"
            "bind 127.0.0.1\n"
            f"dir {directory}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}\n"
            f"sentinel failover-timeout {MASTER_NAME} 10000\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        with (directory / "sentinel.log").open("ab") as log:
            self.sentinel_proc = subprocess.Popen(
                [self.binary, str(conf), "--sentinel"], stdout=log, stderr=log
            )

    def _watching(self) -> bool:
        proc = self.sentinel_proc
        if proc is not None and proc.poll() is not None:
            raise ServerStartError(f"sentinel exited: {self.sentinel_log()}")
        try:
            with self.sentinel() as client:
                replicas = client.sentinel_slaves(MASTER_NAME)
        except redis.ConnectionError:
            return False
        assert self.replica is not None
        return any(
            r.get("port") == self.replica.port
            and not r.get("is_sdown")
            and r.get("master-link-status") == "ok"
            for r in replicas
        )

    def sentinel_log(self) -> str:
        try:
            text = (self.workdir / "sentinel" / "sentinel.log").read_text(errors="replace")
        except OSError:
            return "no log"
        return " | ".join(text.strip().splitlines()[-5:])

    def kill_master(self, timeout: float = 30.0) -> RedisProcess:
        """SIGKILL the master; return the replica once the Sentinel has promoted it."""
        assert self.master is not None and self.replica is not None
        self.master.stop()
        replica = self.replica

        def promoted() -> bool:
            if self.master_port() != replica.port:
                return False
            with replica.client() as client:
                return client.info("replication").get("role") == "master"

        wait_for(
            promoted, timeout, "the Sentinel to promote the replica", ignore=(redis.RedisError,)
        )
        self.master, self.replica = replica, None
        return replica

    def stop(self) -> None:
        if self.sentinel_proc is not None:
            self.sentinel_proc.kill()
            self.sentinel_proc.wait(5)
            self.sentinel_proc = None
        for node in (self.replica, self.master):
            if node is not None:
                node.stop()
