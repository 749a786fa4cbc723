"""The collector held off while a real ``ateam`` process starts (ateam/_gc.py).

Each case runs in a fresh interpreter: the rules are about a process's own collector,
and this test session's must be left alone.

An interpreter may start with objects frozen already (pyenv's Python 3.12 here has 375),
so each case compares with the count it started with (``base``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ateam.bus.connection import RedisTarget


def _run(program: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_hold_then_settle_turns_the_collector_off_and_on_again() -> None:
    program = (
        "import gc\n"
        "base = gc.get_freeze_count()\n"
        "from ateam import _gc\n"
        "_gc.hold(); print(gc.isenabled())\n"
        "_gc.settle(); print(gc.isenabled(), gc.get_freeze_count() > base)\n"
    )

    assert _run(program) == ["False", "True", "True"]


def test_settle_without_hold_changes_nothing() -> None:
    # A program that turned its collector off itself keeps it off.
    program = (
        "import gc\n"
        "base = gc.get_freeze_count()\n"
        "from ateam import _gc\n"
        "gc.disable(); _gc.settle()\n"
        "print(gc.isenabled(), gc.get_freeze_count() - base)\n"
    )

    assert _run(program) == ["False", "0"]


def test_a_verb_runs_with_the_collector_on() -> None:
    # A verb may run for hours (console, tail -f): once its module is imported, the
    # collector is back. The verb here says whether it is on, as its exit status.
    program = (
        "import argparse, gc\n"
        "from ateam import _gc\n"
        "from ateam.cli._verb import handler_at\n"
        "def verb(args):\n"
        "    return int(gc.isenabled())\n"
        "_gc.hold()\n"
        "print(handler_at('__main__:verb')(argparse.Namespace()))\n"
    )

    assert _run(program) == ["1"]


def test_the_command_freezes_what_is_left_for_its_exit_and_a_caller_is_left_alone() -> None:
    program = (
        "import contextlib, gc, io, sys\n"
        "base = gc.get_freeze_count()\n"
        "from ateam.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['completion', 'bash'])\n"
        "print(gc.isenabled(), gc.get_freeze_count() - base)\n"
        "sys.argv = ['ateam', 'completion', 'bash']\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main()\n"
        "print(gc.get_freeze_count() > base)\n"
    )

    assert _run(program) == ["True", "0", "True"]


def test_lasting_objects_are_frozen_once_enough_pile_up_in_an_ateam_process_only() -> None:
    program = (
        "import gc\n"
        "from ateam import _gc\n"
        "kept = []\n"
        "def make(n):\n"
        "    kept.extend([i] for i in range(n))\n"
        "    _gc.lasting(n)\n"
        "def walked():\n"
        "    ids = {id(o) for o in gc.get_objects()}\n"
        "    return sum(id(o) in ids for o in kept)\n"
        "make(2500)\n"
        "print(walked())\n"  # not run by ateam: the program's collector, as it was
        "_gc.hold(); _gc.settle()\n"
        "kept.clear(); make(1500)\n"
        "print(walked())\n"  # too few yet
        "make(1000)\n"
        "print(walked())\n"  # 2 500 since the last freeze: frozen, no longer walked
    )

    assert _run(program) == ["2500", "1500", "0"]


_ON_REDIS = (
    "import asyncio, gc, sys\n"
    "from ateam import _gc\n"
    "_gc.hold()\n"
    "from ateam.bus.connection import RedisTarget, make_client\n"
    "from ateam.bus.keys import Keys\n"
    "from ateam.bus.registry import AgentEntry, Heartbeat, Registry\n"
)
"""The start of a program run by :func:`_run_on`: it then imports what it uses and
settles, and its ``main`` opens ``client`` and ``keys`` with :data:`_CONNECT`."""
_CONNECT = (
    "    target = RedisTarget(sys.argv[1], 'test', namespace=sys.argv[2])\n"
    "    client, keys = make_client(target), Keys(sys.argv[2])\n"
)
_JOIN = (
    "        e = AgentEntry(id=f'p/a{i}', name=f'a{i}', project='p', state='idle')\n"
    "        await Heartbeat(client, keys, e).beat()\n"
)
"""One agent ``i`` joined, in a loop of ``main``."""


def _run_on(target: RedisTarget, program: str, space: str) -> list[str]:
    """What ``program`` prints, run against the test Redis in namespace ``space``."""
    done = subprocess.run(
        [sys.executable, "-c", program, target.url, f"{target.namespace}{space}:"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize(
    "lister",
    [
        "from ateam.bus.registry import Registry as Lister",  # ps, a long-lived front end
        "from ateam.bus.registry_mirror import RegistryMirror as Lister",  # the console
    ],
)
def test_a_listing_of_many_agents_freezes_their_entries(target: RedisTarget, lister: str) -> None:
    # At 10 000 agents the entries a listing keeps made every full collection 50-140 ms
    # (issue 28 §4). 600 agents are some 2 400 containers: enough to freeze, once a
    # second listing shows the process lists again.
    program = (
        f"{_ON_REDIS}{lister}\n"
        "_gc.settle()\n"
        f"async def main():\n{_CONNECT}"
        f"    for i in range(600):\n{_JOIN}"
        "    registry = Lister(client, keys)\n"
        "    for _ in range(3):\n"  # ps lists once: only the next listing freezes
        "        views = await registry.list()\n"
        "        ids = {id(o) for o in gc.get_objects()}\n"
        "        print(len(views), sum(id(v.entry) in ids for v in views))\n"
        "    await client.aclose()\n"
        "asyncio.run(main())\n"
    )

    assert _run_on(target, program, "gc") == ["600", "600", "600", "0", "600", "0"]


def test_a_team_that_joined_by_notices_has_its_entries_frozen_at_the_next_check(
    target: RedisTarget,
) -> None:
    # A console hears of joins by notice, not by a listing: 10 000 of them left some
    # 100 000 objects to every full collection, 250 ms each here (issue 28 §4).
    program = (
        f"{_ON_REDIS}"
        "from ateam.client.listing import AgentListing\n"
        "from ateam.client.notices import Notice, NoticeKind\n"
        "_gc.settle()\n"
        f"async def main():\n{_CONNECT}"
        "    listing = AgentListing(Registry(client, keys))\n"
        "    await listing.load()\n"
        f"    for i in range(600):\n{_JOIN}"
        "        wire = {'entry': e.to_wire()}\n"  # its notice, heard
        "        listing.apply(Notice(NoticeKind.REGISTRY, 'join', e.id, wire, 'p'))\n"
        "    def walked():\n"
        "        ids = {id(o) for o in gc.get_objects()}\n"
        "        return sum(id(v.entry) in ids for v in listing.agents.values())\n"
        "    print(len(listing.agents), walked())\n"
        "    await listing.check()\n"
        "    print(len(listing.agents), walked())\n"
        "    for e in [v.entry for v in listing.agents.values()]:\n"  # all busy now
        "        wire = {'entry': {**e.to_wire(), 'state': 'busy'}}\n"
        "        listing.apply(Notice(NoticeKind.REGISTRY, 'update', e.id, wire, 'p'))\n"
        "    await listing.check()\n"
        "    print(walked())\n"
        "    await client.aclose()\n"
        "asyncio.run(main())\n"
    )

    # Updates replace what is kept: not counted, so no freeze every few seconds in a busy
    # team (each would pin whatever cyclic garbage was alive at that moment).
    assert _run_on(target, program, "gcn") == ["600", "600", "600", "0", "600"]
