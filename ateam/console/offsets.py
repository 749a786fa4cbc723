"""Per-agent "last rendered" offsets, so a restarted console resumes where it stopped."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from ateam.paths import ateam_home, private_dir


class OffsetStore:
    """``~/.ateam/console/offsets.json``: ``{"<bus prefix><agent>": last_offset}``.

    The prefix names the Redis endpoint and namespace, so offsets of one bus never
    apply to another.

    Written after every rendered batch with a rename (no fsync: a killed console must
    not lose its place, but a power cut replaying a few events is acceptable).
    """

    def __init__(self, namespace: str, path: Path | None = None) -> None:
        self._ns = namespace
        self.path = path or private_dir(ateam_home() / "console") / "offsets.json"
        self._data: dict[str, int] = {}
        self._dirty = False
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(self.path.read_text())
            if isinstance(loaded, dict):
                self._data = {k: int(v) for k, v in loaded.items() if isinstance(v, int)}

    def get(self, agent: str) -> int | None:
        return self._data.get(self._ns + agent)

    def set(self, agent: str, offset: int) -> None:
        key = self._ns + agent
        if self._data.get(key) != offset:
            self._data[key] = offset
            self._dirty = True

    def save(self) -> None:
        """Write now, on the calling thread."""
        data = self.snapshot()
        if data is not None:
            self.write(data)

    def snapshot(self) -> dict[str, int] | None:
        """A copy to :meth:`write` (``None`` when nothing changed); marks the store clean.

        Taken on the event loop, written on a worker thread: the console's loop never
        waits for the disk (a slow disk stalled keystroke echo by up to 200 ms).
        """
        if not self._dirty:
            return None
        self._dirty = False
        return dict(self._data)

    def write(self, data: dict[str, int]) -> None:
        """Write ``data``, keeping what other consoles wrote for other keys meanwhile."""
        merged = dict(data)
        with contextlib.suppress(OSError, ValueError):
            on_disk = json.loads(self.path.read_text())
            if isinstance(on_disk, dict):
                for key, value in on_disk.items():
                    if key not in merged and isinstance(value, int):
                        merged[key] = value
        tmp = self.path.with_name(f".offsets.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(merged, fh)
        os.replace(tmp, self.path)
