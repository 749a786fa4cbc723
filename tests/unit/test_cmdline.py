"""What ateam shows of a command line: passwords masked (``ateam._cmdline``)."""

from __future__ import annotations

import os

import pytest

from ateam._cmdline import bus_environment, masked_title


@pytest.mark.parametrize(
    ("title", "shown"),
    [
        (
            "python -m ateam up --redis redis://:s3cret@db:6379/0 --detach",
            "python -m ateam up --redis redis://:****@db:6379/0 --detach",
        ),
        (
            "ateam agent --redis=rediss://ateam:pa55@host:6380/1",
            "ateam agent --redis=rediss://ateam:****@host:6380/1",
        ),
        (
            "ateam ps --redis unix:///run/r.sock?password=hunter2&db=0",
            "ateam ps --redis unix:///run/r.sock?password=****&db=0",
        ),
        ("ateam ps --redis redis://db:6379/0", "ateam ps --redis redis://db:6379/0"),
        ("ateam send zeus hello", "ateam send zeus hello"),
    ],
)
def test_masked_title_hides_every_url_password(title: str, shown: str) -> None:
    assert masked_title(title) == shown


def test_a_child_gets_the_url_in_its_environment_not_its_arguments() -> None:
    assert bus_environment(None) is None
    env = bus_environment("redis://:pw@db:6379/0")
    assert env is not None
    assert env["ATEAM_REDIS_URL"] == "redis://:pw@db:6379/0"
    assert env["PATH"] == os.environ["PATH"]
