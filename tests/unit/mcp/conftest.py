"""An ``ateam mcp`` server in process, reached through the SDK's own client.

The server stands on a real team session (a real Redis, the echo agent ``proj/zeus``
of ``tests/unit/conftest.py`` where a test asks for ``agent``); tests reach it with
:func:`tests.unit.mcp._client.connect`.
"""

from __future__ import annotations

import pytest

from ateam.client import Team
from ateam.mcp import AteamServer, TeamBridge, build_server


@pytest.fixture
def server(team: Team) -> AteamServer:
    return build_server(TeamBridge(team, "proj"))
