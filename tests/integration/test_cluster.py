"""ateam on a real 3-master Redis Cluster with a replica (issue 13 point 6).

Two projects whose keys sit on different nodes: agents serve, the verbs (``ps``,
``send``, ``tail``) and ``ateam up`` work, and one plain console follows both agents at
once, which without reads grouped by slot would be a cross-slot ``XREAD``. The context
and board verbs run too (a global post's transaction stays in one slot). The cluster
is named by ``redis+cluster://`` or, in ``tools.yaml``, by a plain ``redis://`` URL and
``cluster: true``. ``ateam acl --apply`` makes its user on every node, replica included
(users are not replicated).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ateam.bus.cluster import group_by_slot
from ateam.bus.keys import Keys
from tests._wait import wait_for
from tests.servers.cluster import ClusterProcess

from .conftest import (
    START_TIMEOUT_S,
    AgentProcess,
    Bus,
    ConsoleFactory,
    ateam_cmd,
    attach_and_send,
    run_ateam,
    subprocess_env,
    wait_serving,
    write_project,
)

pytestmark = [pytest.mark.integration, pytest.mark.redis_matrix]

KEYS = Keys()


class ClusterBus(Bus):
    """The tests' view of the bus (:class:`Bus`) through a cluster client."""

    def __init__(self, cluster: ClusterProcess) -> None:
        self.url = cluster.url
        self.client = cluster.client()  # type: ignore[assignment]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    cluster = ClusterProcess(tmp_path_factory.mktemp("cluster"), replicas=1)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def cbus(cluster: ClusterProcess) -> Iterator[ClusterBus]:
    bus = ClusterBus(cluster)
    yield bus
    bus.close()


@pytest.fixture
def spawn(tmp_path: Path, cbus: ClusterBus) -> Iterator[Callable[..., AgentProcess]]:
    """``spawn("proj/name", cwd, url=None)`` → an ``ateam agent`` on the cluster, once serving."""
    started: list[AgentProcess] = []

    def start(agent_id: str, cwd: Path, url: str | None = None) -> AgentProcess:
        project, name = agent_id.split("/")
        args = ateam_cmd(
            "agent", "--project", project, "--name", name,
            "--redis", url or cbus.url, "--no-repl",
        )  # fmt: skip
        err_path = tmp_path / f"{project}-{name}.stderr"
        with err_path.open("wb") as err:
            proc = subprocess.Popen(
                args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                env=subprocess_env(),
            )  # fmt: skip
        agent = AgentProcess(agent_id, args, proc, err_path)
        started.append(agent)
        wait_serving(cbus, agent)
        return agent

    yield start
    for agent in started:
        if agent.running():
            agent.terminate()


def _on_different_nodes(cluster: ClusterProcess, *agents: str) -> None:
    nodes = {cluster.node_of(KEYS.events(agent)).port for agent in agents}
    assert len(nodes) == len(agents), "pick project names whose keys land on different nodes"


def test_agents_verbs_and_a_console_across_slots(
    cluster: ClusterProcess,
    cbus: ClusterBus,
    spawn: Callable[..., AgentProcess],
    start_console: ConsoleFactory,
    tmp_path: Path,
) -> None:
    alpha, beta = "alpha/zeus", "beta/hera"
    _on_different_nodes(cluster, alpha, beta)
    root_a = write_project(tmp_path / "a", "alpha", agents=("zeus",), delay_ms=0)
    root_b = write_project(tmp_path / "b", "beta", agents=("hera",), delay_ms=0)
    spawn(alpha, root_a)
    spawn(beta, root_b)
    url = cluster.url

    listed = run_ateam("ps", "--json", "--redis", url)
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert {alpha, beta} <= set(rows)
    assert rows[alpha]["state"] == rows[beta]["state"] == "idle"

    # A console following both agents: their streams are in different slots.
    console = start_console(redis_url=url)
    console.session  # noqa: B018  # connected
    console.send(f"/tail {alpha}")
    console.wait_line(f"tailing {alpha}")
    attach_and_send(console, beta, "hi hera")
    console.wait_line("echo: hi hera")

    sent = run_ateam("send", alpha, "hello", "alpha", "--redis", url)
    assert sent.returncode == 0, sent.stderr
    task = sent.stdout.strip()
    wait_for(lambda: task in cbus.task_ends(alpha), START_TIMEOUT_S, "alpha's task to end")
    console.wait_line(f"[A:{alpha}] echo: hello alpha")

    tail = run_ateam("tail", beta, "--redis", url)
    assert tail.returncode == 0, tail.stderr
    assert "echo: hi hera" in tail.stdout

    # Context (a global post publishes in the global items' slot) and the board.
    posted = run_ateam(
        "context", "post", "--scope", "global", "--project", "alpha", "--redis", url, "all", "hands"
    )
    assert posted.returncode == 0, posted.stderr
    listed = run_ateam("context", "ls", "--project", "beta", "--redis", url)
    assert "all hands" in listed.stdout, listed.stdout + listed.stderr
    added = run_ateam("tasks", "add", "--project", "beta", "--redis", url, "ship", "it")
    assert added.returncode == 0, added.stderr
    assert "ship it" in run_ateam("tasks", "ls", "--project", "beta", "--redis", url).stdout

    console.send("/quit")
    assert console.wait_exit() == 0
    assert "Traceback" not in console.stderr_path.read_text()


def test_up_detach_and_down_on_a_cluster_named_in_tools_yaml(
    cluster: ClusterProcess, cbus: ClusterBus, tmp_path: Path
) -> None:
    root = write_project(tmp_path / "gamma", "gamma", agents=("zeus", "ares"), delay_ms=0)
    # The URL from tools.yaml this time: what `ateam up` and its agents read.
    (root / ".ateam" / "tools.yaml").write_text(f"transport:\n  url: {cluster.url}\n")
    up = run_ateam("up", "--detach", str(root), timeout=60)
    try:
        assert up.returncode == 0, up.stdout + up.stderr

        def serving() -> bool:
            entries = (cbus.entry(f"gamma/{n}") for n in ("zeus", "ares"))
            return all(e is not None and e.get("state") == "idle" for e in entries)

        wait_for(serving, START_TIMEOUT_S, "both agents of gamma to serve")
        sent = run_ateam("send", "gamma/ares", "ping", "--redis", cluster.url)
        assert sent.returncode == 0, sent.stderr
        wait_for(lambda: sent.stdout.strip() in cbus.task_ends("gamma/ares"), START_TIMEOUT_S)
    finally:
        down = run_ateam("up", "--down", str(root), timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    assert cbus.entry("gamma/zeus") is None and cbus.entry("gamma/ares") is None


def test_a_node_that_may_evict_is_refused(cluster: ClusterProcess) -> None:
    node = cluster.nodes[-1]  # not the one the slot map lists first (the default node)
    with node.client() as client:
        client.config_set("maxmemory", "512mb")
        client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        listed = run_ateam("ps", "--redis", cluster.url)
    finally:
        with node.client() as client:
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", "0")
    assert listed.returncode == 2, listed.stdout + listed.stderr
    assert "redis.eviction_policy" in listed.stderr and "allkeys-lru" in listed.stderr


def test_streams_of_a_project_share_a_slot_and_projects_split() -> None:
    agents = ["alpha/zeus", "beta/hera", "alpha/ares", "beta/zeus"]
    groups = group_by_slot(agents, KEYS.events)
    assert groups == [["alpha/zeus", "alpha/ares"], ["beta/hera", "beta/zeus"]]


def test_cluster_true_in_tools_yaml_makes_every_front_end_use_the_cluster_client(
    cluster: ClusterProcess, cbus: ClusterBus, start_console: ConsoleFactory, tmp_path: Path
) -> None:
    agent = "delta/zeus"
    # One seed that does not serve delta's slot: a single-server client would get MOVED.
    owner = cluster.node_of(KEYS.events(agent))
    seed = next(node for node in cluster.nodes if node is not owner)
    # The project at the console fixture's working directory: no --redis anywhere.
    root = write_project(tmp_path, "delta", delay_ms=0)
    (root / ".ateam" / "tools.yaml").write_text(
        f"transport:\n  url: redis://127.0.0.1:{seed.port}\n  cluster: true\n"
    )
    up = run_ateam("up", "--detach", str(root), cwd=root, timeout=60)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        wait_for(
            lambda: (cbus.entry(agent) or {}).get("state") == "idle",
            START_TIMEOUT_S,
            f"{agent}, started by ateam up, to serve",
        )
        listed = run_ateam("ps", "--json", cwd=root)
        assert listed.returncode == 0, listed.stderr
        assert agent in {row["id"] for row in json.loads(listed.stdout)}
        sent = run_ateam("send", agent, "through", "tools.yaml", cwd=root)
        assert sent.returncode == 0, sent.stderr
        task = sent.stdout.strip()
        wait_for(lambda: task in cbus.task_ends(agent), START_TIMEOUT_S, "the task to end")

        console = start_console(redis_url="")
        attach_and_send(console, agent, "hi from a console")
        console.wait_line("echo: hi from a console")
        console.send("/quit")
        assert console.wait_exit() == 0
        assert "Traceback" not in console.stderr_path.read_text()
    finally:
        down = run_ateam("up", "--down", str(root), cwd=root, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    assert cbus.entry(agent) is None


USER, PASSWORD = "hello-user", "hello-password-0123456789"


def test_acl_apply_makes_the_user_on_every_node(
    cluster: ClusterProcess, cbus: ClusterBus, spawn: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    secret = tmp_path / "hello.password"
    secret.write_text(PASSWORD + "\n")
    made = run_ateam(
        "acl", "hello", "--apply", "--user", USER, "--password-file", str(secret),
        "--redis", cluster.url,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    # ACLs live in each server: masters and the replica all know the user.
    for node in cluster.every_node:
        with node.client() as client:
            assert client.acl_getuser(USER) is not None, f"no {USER} on node {node.port}"

    seeds = cluster.url.removeprefix("redis+cluster://")
    as_user = f"redis+cluster://{USER}:{PASSWORD}@{seeds}"
    agent = "hello/zeus"
    spawn(agent, write_project(tmp_path / "hello", "hello", delay_ms=0), url=as_user)
    # The project's keys and the team-wide ones sit on different slots, and the
    # eviction guard asks every node: each connection logs in as the user.
    listed = run_ateam("ps", "--json", "--redis", as_user)
    assert listed.returncode == 0, listed.stderr
    assert [row["id"] for row in json.loads(listed.stdout)] == [agent]
    sent = run_ateam("send", agent, "as", "the", "user", "--redis", as_user)
    assert sent.returncode == 0, sent.stderr
    task = sent.stdout.strip()
    wait_for(lambda: task in cbus.task_ends(agent), START_TIMEOUT_S, "the user's task to end")
