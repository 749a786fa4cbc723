"""``tools.yaml`` ``transport.cluster: true``: a plain URL that names Cluster nodes.

That it reaches every front end and agent is tested on a real Cluster in
tests/integration/test_cluster.py; here, what the URL becomes and what is refused.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ateam.bus.cluster import cluster_url
from ateam.bus.connection import resolve_target
from ateam.config.schema import TransportSpec
from ateam.errors import UsageError


@pytest.mark.parametrize(
    ("url", "meant"),
    [
        ("redis://10.0.0.1:7000", "redis+cluster://10.0.0.1:7000"),
        ("rediss://u:p@a:7000,b:7001/", "rediss+cluster://u:p@a:7000,b:7001/"),
        ("redis+cluster://a:7000", "redis+cluster://a:7000"),
    ],
)
def test_cluster_true_turns_the_url_into_a_cluster_url(url: str, meant: str) -> None:
    assert cluster_url(url) == meant
    target = resolve_target(None, transport=TransportSpec(url=url, cluster=True))
    assert target is not None and (target.url, target.source) == (meant, "tools.yaml")


def test_without_it_a_redis_url_stays_one_server() -> None:
    target = resolve_target(None, transport=TransportSpec(url="redis://a:7000"))
    assert target is not None and target.url == "redis://a:7000"


def test_a_url_given_alone_wins_as_it_is() -> None:
    # --redis names its own server: tools.yaml's cluster flag is for tools.yaml's url.
    spec = TransportSpec(url="redis://a:7000", cluster=True)
    target = resolve_target("redis://b:6379", transport=spec)
    assert target is not None and target.url == "redis://b:6379"


@pytest.mark.parametrize("url", ["unix:///run/redis.sock", "redis+sentinel://s:26379/m"])
def test_cluster_true_needs_a_tcp_url(url: str) -> None:
    with pytest.raises(ValidationError, match="cluster: true"):
        TransportSpec(url=url, cluster=True)
    with pytest.raises(UsageError, match="cluster: true"):
        cluster_url(url)


def test_a_cluster_has_database_0_only() -> None:
    with pytest.raises(UsageError, match="database 0"):
        resolve_target(None, transport=TransportSpec(url="redis://a:7000/2", cluster=True))
