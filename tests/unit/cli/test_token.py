"""``--token-file``: read the token when the file exists, else write a new one, 0600."""

from __future__ import annotations

from pathlib import Path

import pytest

from ateam._token import token_from_file
from ateam.errors import UsageError


def test_a_missing_file_gets_a_new_token_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "token"

    made = token_from_file(path)

    assert made.created and len(made.token) >= 32
    assert path.read_text() == made.token + "\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert made.line("ateam mcp") == (
        f"ateam mcp: wrote a new token to {path} (mode 0600); clients read it there"
    )
    # The next start reads the same token back: a client's configuration keeps working.
    again = token_from_file(path)
    assert (again.created, again.token) == (False, made.token)
    assert again.line("ateam mcp") == f"ateam mcp: read the token from {path}"
    assert made.token not in repr(made)


@pytest.mark.parametrize("text", ["", "short\n", "has a space in it somewhere\n"])
def test_a_file_without_a_usable_token_is_refused_and_left_alone(tmp_path: Path, text: str) -> None:
    path = tmp_path / "token"
    path.write_text(text)

    with pytest.raises(UsageError, match="at least 16 characters"):
        token_from_file(path)
    assert path.read_text() == text


def test_a_symlink_is_read_through_never_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_text("a-token-of-enough-length\n")
    link = tmp_path / "link"
    link.symlink_to(real)

    assert token_from_file(link).token == "a-token-of-enough-length"


def test_a_file_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--token-file .*no-dir/token: No such file"):
        token_from_file(tmp_path / "no-dir" / "token")
