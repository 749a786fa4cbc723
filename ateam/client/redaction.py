"""Whose secret patterns apply to text a front end sends (SPEC §11).

Text is masked before it reaches Redis (its request lists, its AOF), so the sender
applies the patterns of the project it stands in and, when the receiving agent's
working directory is on this host, of the agent's project too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ateam.config.discovery import configured
from ateam.errors import AteamError
from ateam.redact import Redactor, Scrubbed

if TYPE_CHECKING:
    from ateam.config.loader import ProjectConfig

__all__ = [
    "Masked",
    "local_redactor",
    "project_at",
    "redactor_for",
    "same_fields",
    "secrets_notice",
]


def same_fields(a: object, b: object, base: type) -> bool:
    """Whether dataclasses ``a`` and ``b`` agree on every field of ``base``."""
    return all(getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(base))


class Masked:
    """Masks the texts of one request with ``redactor``, counting the secrets replaced.

    The stores mask what they keep as well (their redactor is the same); masking at the
    door first is what lets the sender be told how many secrets never left it.
    """

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self.replaced = 0
        """Secrets replaced so far, over every text of the request."""

    def __call__(self, text: str) -> str:
        """``text`` masked (what is not a string is left for the store to refuse)."""
        if not isinstance(text, str):
            return text  # a caller that ignored the types: the store refuses it
        scrubbed = self._redactor.scrub(text)
        self.replaced += scrubbed.replaced
        return scrubbed.text

    @staticmethod
    def fields_of(value: Any) -> dict[str, Any]:
        """A dataclass's fields by name, unconverted (to rebuild it as a subclass)."""
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


def redactor_for(cwd: str | None, base: Redactor) -> Redactor:
    """``base`` plus the ``redact.yaml`` patterns of the project an agent runs in.

    The agent's own patterns can be read only when its working directory is on this
    host; otherwise ``base`` is all there is.
    """
    project = project_at(Path(cwd)) if cwd else None
    if project is None or not project.redact_patterns:
        return base
    return Redactor((*base.extra, *project.redact_patterns))


def project_at(cwd: Path) -> ProjectConfig | None:
    """The project configuration for ``cwd``; ``None`` if it is not a directory here."""
    if not cwd.is_dir() or not configured(cwd):
        return None  # nothing there, or nothing configured: the defaults have no patterns
    # Imported here, as below: the loader brings YAML and the schemas, for projects only.
    from ateam.config.loader import load_project

    try:
        return load_project(cwd)
    except AteamError:
        return None


def local_redactor() -> Redactor:
    """The redactor of the project here (the cwd): built-ins plus its redact.yaml."""
    if not configured():
        return Redactor()  # no redact.yaml anywhere: the built-ins alone, no YAML loaded
    from ateam.config.loader import load_project

    try:
        return Redactor.from_config(load_project())
    except AteamError:
        return Redactor()  # no project, or a broken one: the built-in patterns still hold


def secrets_notice(count: int) -> str | None:
    """The line telling a sender that ``count`` secrets were masked (``redacted`` of an
    :class:`~ateam.wire.results.InputResult`); ``None`` when there were none."""
    return Scrubbed("", count).notice()
