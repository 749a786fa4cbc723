"""``ateam mcp --http --host``: beyond loopback the start-up says the token goes in clear."""

from __future__ import annotations

import pytest

from ateam.mcp.http import HttpOptions, _announce


@pytest.mark.parametrize(
    ("host", "warned"),
    [("127.0.0.1", False), ("::1", False), ("localhost", False), ("0.0.0.0", True),
     ("192.168.1.5", True), ("mcp.example.com", True)],
)  # fmt: skip
def test_a_host_beyond_loopback_is_warned_about(
    host: str, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    _announce(HttpOptions(host=host, token="t" * 32), 8765)
    err = capsys.readouterr().err
    assert ("warning: listening on" in err) is warned
    assert "token: " + "t" * 32 in err
