"""Fixtures several unit packages share: an in-process echo agent, a team session, and
each engine of the secret check in turn.

A test module that needs another agent defines its own `agent` fixture, which wins.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ateam import redact
from ateam._scan import Engine, scanner
from ateam.agent.runtime.process import Agent
from ateam.client import Target, Team
from ateam.config import standalone_agent
from ateam.providers import EchoProvider
from ateam.redact import Redactor


@pytest.fixture
async def agent(target: Target, tmp_path: Path) -> AsyncIterator[Agent]:
    config = standalone_agent("proj", "zeus", tmp_path)
    a = Agent(config, target, EchoProvider())
    await a.start()
    yield a
    await a.stop()


@pytest.fixture
async def team(target: Target) -> AsyncIterator[Team]:
    async with await Team.connect(target, redactor=Redactor(), takeover_grace_s=0.1) as t:
        yield t


@pytest.fixture(params=list(Engine))
def trigger_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Engine:
    """The redactor's trigger check on each engine (Hyperscan, RE2, and CPython's, which
    checks short texts until the full regex is built): each must say yes to every secret.
    No skip: CI installs Hyperscan and RE2, so an engine that fails to load fails here."""
    engine: Engine = request.param
    built = scanner(redact._TRIGGERS_EXACT, redact._TRIGGERS_FOLDED, engine)
    assert built.engine is engine
    monkeypatch.setattr(redact, "_triggers", lambda: built)
    return engine
