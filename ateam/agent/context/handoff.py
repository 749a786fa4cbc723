"""The handoff record: what a model leaves behind for the next one (SPEC §7).

``state/handoff.json`` is one JSON object that lets another model pick up the agent's
task mid-flight. The agent rewrites it after every turn and on every model switch::

    schema_version   1
    sequence         +1 on every write, so readers can tell newer from older
    timestamp        ISO-8601 UTC of the write
    handoff_expires  timestamp + 5 min; an older record is stale for a switch
    handoff_ready    the author considered it complete when it wrote it
    checksum         "sha256:" + hex digest of the record without this field
    author           the model id that wrote it
    model            {current, usage_percent, history: [{model, from, until, reason}]}
    task             {description, status, project}
    context          {recent_actions, decisions, next_steps, blockers}  (lists of strings)
    files_touched    [path, ...]

**Checksum.** The digest covers the record minus ``checksum``, serialised as JSON with
sorted keys, separators ``,`` and ``:``, non-ASCII kept as is, encoded UTF-8
(:func:`canonical_bytes`). The file itself is indented for people; only the canonical
form is hashed, so the layout on disk may change without breaking old records.

**Validity.** A switch may rely on a record only if :func:`check` says so: it exists,
its checksum verifies, it has the expected shape, it is ready and it has not expired.

**Merge under lock.** A write is a patch, not a replacement: :meth:`HandoffStore.update`
takes an exclusive lock on ``state/handoff.lock``, reads the current record, merges the
patch into it (:func:`merge`), stamps sequence, times, author and checksum, and writes.
Writers in other processes (or other stores in this one) therefore never lose each
other's fields.

**Durability.** The record is written to a temporary file in the same directory,
fsynced, renamed over ``handoff.json`` and the directory fsynced, so after a crash at
any moment the file holds either the previous record or the new one, never a mix.
A killed writer may leave a ``.handoff.json.<pid>.tmp`` behind; it is never read.

The store's methods block on a lock and on fsync; async callers run them in a thread.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeGuard

from ateam._fs import DamageLog, Problem, atomic_write, file_key, fsync_dir
from ateam.agent.state.fence import Fenced, unfenced
from ateam.errors import StorageError
from ateam.paths import private_dir

__all__ = [
    "HANDOFF_FILE",
    "HANDOFF_LOCK_FILE",
    "HANDOFF_TTL_S",
    "SCHEMA_VERSION",
    "HandoffStore",
    "Invalid",
    "Validity",
    "canonical_bytes",
    "check",
    "compute_checksum",
    "empty_record",
    "merge",
    "verify_checksum",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
HANDOFF_FILE = "handoff.json"
HANDOFF_LOCK_FILE = "handoff.lock"
HANDOFF_TTL_S = 300.0
"""How long after its timestamp a record stays usable for a switch."""

LOCK_TIMEOUT_S = 10.0
"""A writer waiting longer than this for the lock gives up with ``StorageError``."""

_LOCK_POLL_S = 0.005
# Writes take milliseconds, so a short poll keeps contending writers from idling
# a quarter of a second (portalocker's default) for a lock that is long free.

_CHECKSUM_PREFIX = "sha256:"

_SHAPE: dict[str, type] = {
    "sequence": int,
    "handoff_ready": bool,
    "model": dict,
    "task": dict,
    "context": dict,
    "files_touched": list,
}
"""Top-level fields every record must have, with their JSON types."""


class Invalid(StrEnum):
    """Why a record cannot be used for a switch (:attr:`Validity.reason`)."""

    MISSING = "missing"
    NOT_READY = "not_ready"
    EXPIRED = "expired"
    BAD_CHECKSUM = "bad_checksum"
    MALFORMED = "malformed"


@dataclass(frozen=True)
class Validity:
    """The verdict of :func:`check`."""

    ok: bool
    """The record may be handed to the next model."""
    reason: str | None
    """``None`` when ok, else one of the :class:`Invalid` values."""


# -- the record ---------------------------------------------------------------------------


def canonical_bytes(record: Mapping[str, object]) -> bytes:
    """The bytes the checksum covers: ``record`` without ``checksum``, canonical JSON.

    Raises:
        TypeError: a value is not JSON-serialisable.
    """
    body = {key: value for key, value in record.items() if key != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def compute_checksum(record: Mapping[str, object]) -> str:
    """``"sha256:<hex>"`` of :func:`canonical_bytes`; any existing checksum is ignored."""
    return _CHECKSUM_PREFIX + hashlib.sha256(canonical_bytes(record)).hexdigest()


def verify_checksum(record: Mapping[str, object]) -> bool:
    """Whether ``record["checksum"]`` matches its content; never raises."""
    stated = record.get("checksum")
    if not isinstance(stated, str):
        return False
    try:
        return stated == compute_checksum(record)
    except (TypeError, ValueError):
        return False


def empty_record(*, model: str, project: str) -> dict[str, Any]:
    """A schema-complete record that was never written: sequence 0, not ready, no times.

    Its checksum verifies, so :func:`check` reports it ``not_ready`` rather than corrupt.
    """
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "sequence": 0,
        "timestamp": None,
        "handoff_expires": None,
        "handoff_ready": False,
        "author": None,
        "model": {"current": model, "usage_percent": None, "history": []},
        "task": {"description": "", "status": "idle", "project": project},
        "context": {
            "recent_actions": [],
            "decisions": [],
            "next_steps": [],
            "blockers": [],
            "failures": [],
        },
        "files_touched": [],
    }
    record["checksum"] = compute_checksum(record)
    return record


def check(record: Mapping[str, object] | None, *, now: float | None = None) -> Validity:
    """Whether ``record`` may be used for a switch: ready, unexpired, checksum verified.

    The checksum is tested before anything it covers, so a record altered after it was
    written reports ``bad_checksum`` whatever field changed.

    Args:
        record: a record as read from disk or Redis; ``None`` when there is none.
        now: the time to judge expiry at (epoch seconds); defaults to the clock.
    """
    if record is None:
        return _invalid(Invalid.MISSING)
    if not isinstance(record, Mapping) or not isinstance(record.get("checksum"), str):
        return _invalid(Invalid.MALFORMED)
    if not verify_checksum(record):
        return _invalid(Invalid.BAD_CHECKSUM)
    if not _well_formed(record):
        return _invalid(Invalid.MALFORMED)
    if not record["handoff_ready"]:
        return _invalid(Invalid.NOT_READY)
    expires = _parse_time(record.get("handoff_expires"))
    if expires is None:
        return _invalid(Invalid.MALFORMED)
    if (time.time() if now is None else now) > expires:
        return _invalid(Invalid.EXPIRED)
    return Validity(ok=True, reason=None)


def merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``patch``, as a new dict; neither argument is modified.

    Dicts merge key by key, recursively. Any other patch value (a list, a string, a
    number) replaces the base value whole, so ``{"files_touched": ["a"]}`` sets the list
    rather than appending to it. Keys the patch does not mention are kept.

    A patch value of ``None`` means "no change": it neither deletes the key nor sets it
    to null. This lets callers build patches from optional values without clobbering
    what an earlier writer stored; to empty a field, patch it with ``""`` or ``[]``.
    """
    merged = copy.deepcopy(dict(base))
    for key, value in patch.items():
        if value is None:
            continue
        current = merged.get(key)
        if isinstance(value, Mapping):
            merged[key] = merge(current if isinstance(current, Mapping) else {}, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# -- the store ----------------------------------------------------------------------------


class HandoffStore:
    """``state/handoff.json`` of one agent: read it, merge into it, record switches.

    Safe to share between processes and threads: every write holds an exclusive file
    lock, and a reader sees a whole record because the file is replaced by rename.

    Args:
        state_dir: the agent's ``state/`` directory; created (0700) on the first write.
        model: the model the agent starts with, for a record that does not exist yet.
        project: the project directory, likewise (``task.project``).
        mirror: called with the exact bytes written, after each successful write and
            still under the lock, so copies (the agent's Redis mirror) see writes in
            sequence order. Its exceptions are logged, never raised: the file is the
            record of truth and is already durable by then.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        model: str,
        project: str,
        mirror: Callable[[bytes], None] | None = None,
        lock_timeout_s: float = LOCK_TIMEOUT_S,
        fence: Fenced = unfenced,
        scrub: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self._fence = fence
        self._scrub = scrub
        """Masks secrets in every record before it is written and mirrored."""
        self.lock_timeout_s = lock_timeout_s
        """An agent writes from its event loop, so it waits briefly and skips a write
        rather than stall everything behind a lock someone else holds."""
        self.path = self.state_dir / HANDOFF_FILE
        self.lock_path = self.state_dir / HANDOFF_LOCK_FILE
        self.damage = DamageLog("handoff")
        """A corrupt record found by :meth:`read`: reported once, copied aside first."""
        self.model = model
        self.project = project
        self.mirror = mirror

    def read(self) -> dict[str, Any] | None:
        """The record on disk, or ``None`` if missing, unreadable or not a JSON object.

        The content is not validated; pass it to :func:`check` for that. A record that
        does not parse, or whose checksum fails, is reported through :attr:`damage` once
        per version of the file, copied aside before any write can replace it.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read handoff %s: %s", self.path, exc)
            return None
        try:
            record = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError):
            self._damaged(data, Problem.NOT_JSON, "is not valid JSON")
            return None
        if not isinstance(record, dict):
            self._damaged(data, Problem.WRONG_SHAPE, "is not a JSON object")
            return None
        if not verify_checksum(record):
            self._damaged(data, Problem.BAD_CHECKSUM, "fails its checksum")
        return record

    def _damaged(self, data: bytes, problem: Problem, what: str) -> None:
        key = file_key(self.path)
        if self.damage.already(self.path, key):
            return
        self.damage.report(
            self.path,
            problem,
            f"{HANDOFF_FILE} {what} ({len(data)} bytes); no switch relies on it and the "
            "next write starts a new record",
            key=key,
            data=data,
        )

    def show(self, *, now: float | None = None) -> tuple[dict[str, Any] | None, Validity]:
        """The record on disk and whether a switch could use it now."""
        record = self.read()
        return record, check(record, now=now)

    def update(
        self,
        patch: Mapping[str, Any],
        *,
        author: str,
        ready: bool = True,
        now: float | None = None,
    ) -> dict[str, Any]:
        """Merge ``patch`` into the record and write it durably (see :func:`merge`).

        The bookkeeping fields (``schema_version``, ``sequence``, ``timestamp``,
        ``handoff_expires``, ``handoff_ready``, ``author``, ``checksum``) are set here
        whatever the patch says. The first write starts ``model.history`` with a
        ``"start"`` entry for the current model.

        Args:
            patch: the fields to change; other fields keep their stored values.
            author: the model id writing the record.
            ready: whether the record is complete enough to hand over.
            now: the write time (epoch seconds); defaults to the clock.

        Returns:
            The record as written.

        Raises:
            StorageError: the lock was not granted within 10 s, or the file could not
                be written.
            TypeError: the patch gives a section (``model``, ``task``, ...) a value of the
                wrong type, or holds a value JSON cannot represent; nothing is written.
            ValueError: the patch holds NaN or infinity, which JSON cannot represent.
        """
        return self._write(lambda current: merge(current, patch), author, ready, now)

    def record_switch(
        self,
        *,
        from_model: str,
        to_model: str,
        reason: str,
        usage_percent: float | None,
        now: float | None = None,
    ) -> dict[str, Any]:
        """Note a model switch in ``model.history`` and make ``to_model`` current.

        Closes the open history entry (``until`` = now; its own reason is kept, or set to
        ``reason`` if it had none) and appends ``{model: to_model, from: now, until: None,
        reason}``. ``usage_percent`` is stored as given, ``None`` included, because the
        outgoing model's figure says nothing about the new one.

        The task and context are left as the outgoing model wrote them, so ``author``
        stays ``from_model`` and readiness is carried over: the switch alone does not
        make an incomplete handoff complete. It does renew the timestamp and expiry.

        Raises:
            StorageError: as for :meth:`update`.
        """
        when = time.time() if now is None else now
        stamp = _format_time(when)

        def switch(current: dict[str, Any]) -> dict[str, Any]:
            record = copy.deepcopy(current)
            model = record["model"]
            history = [dict(e) for e in model.get("history") or [] if isinstance(e, Mapping)]
            open_entries = [entry for entry in history if entry.get("until") is None]
            if not open_entries:
                # A switch before any write: the outgoing model's run is still worth a line.
                since = current.get("timestamp") or stamp
                open_entries = [{"model": from_model, "from": since, "until": None}]
                history.extend(open_entries)
            for entry in open_entries:
                entry["until"] = stamp
                entry["reason"] = entry.get("reason") or reason
            history.append({"model": to_model, "from": stamp, "until": None, "reason": reason})
            model.update(current=to_model, usage_percent=usage_percent, history=history)
            return record

        return self._write(switch, from_model, None, when)

    # -- plumbing -------------------------------------------------------------------------

    def _write(
        self,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        author: str,
        ready: bool | None,
        now: float | None,
    ) -> dict[str, Any]:
        """Apply ``change`` to the current record under the lock, stamp it, write it.

        ``ready=None`` keeps the stored readiness.
        """
        when = time.time() if now is None else now
        # Before the lock too: taking it may create its file, and a fenced-off instance
        # writes nothing in state/, not even an empty file.
        self._fence("the handoff")
        with self._locked():
            empty = empty_record(model=self.model, project=self.project)
            current = self._read_current()
            base = empty if current is None else _conform(merge(empty, current), empty)
            record = change(base)
            if self._scrub is not None:
                # Before the checksum: what is signed is what is stored.
                record = self._scrub(record)
            self._stamp(record, base, author=author, ready=ready, when=when)
            data = _encode(record)
            self._fence("the handoff")
            try:
                atomic_write(self.path, data, mode=0o600)
            except OSError as exc:
                raise StorageError(f"cannot write handoff {self.path}: {exc}") from exc
            self._mirror(data)
        return record

    def _stamp(
        self,
        record: dict[str, Any],
        previous: Mapping[str, Any],
        *,
        author: str,
        ready: bool | None,
        when: float,
    ) -> None:
        """Set the fields only the store may write, checksum last.

        Raises:
            TypeError: the patch replaced a section with a value of the wrong type.
        """
        sequence = previous.get("sequence")
        stamp = _format_time(when)
        record["schema_version"] = SCHEMA_VERSION
        record["sequence"] = (sequence if _is_int(sequence) else 0) + 1
        record["timestamp"] = stamp
        record["handoff_expires"] = _format_time(when + HANDOFF_TTL_S)
        record["handoff_ready"] = bool(previous["handoff_ready"]) if ready is None else ready
        record["author"] = author
        model = record.get("model")
        if isinstance(model, dict) and not model.get("history"):
            model["history"] = [
                {"model": model.get("current"), "from": stamp, "until": None, "reason": "start"}
            ]
        if not _well_formed(record):
            raise TypeError("the handoff patch does not fit the record's schema")
        record["checksum"] = compute_checksum(record)

    def _read_current(self) -> dict[str, Any] | None:
        """The stored record to merge into (``_conform`` repairs wrong types).

        :meth:`read` has reported any damage already, and kept the file aside.
        """
        current = self.read()
        if current is not None and not verify_checksum(current):
            # Not merged into: signing the merge would vouch for fields nobody can
            # vouch for (a tampered next step would come out "verified"). The writer
            # rebuilds what it knows; the rest starts empty.
            fresh = empty_record(model=self.model, project=self.project)
            if _is_int(current.get("sequence")):
                fresh["sequence"] = current["sequence"]  # the counter still only goes up
            return fresh
        return current

    def _mirror(self, data: bytes) -> None:
        if self.mirror is None:
            return
        try:
            self.mirror(data)
        except Exception:
            log.warning("mirroring the handoff failed", exc_info=True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold ``handoff.lock`` exclusively, creating ``state/`` and the lock file."""
        try:
            if not self.state_dir.exists():
                private_dir(self.state_dir)
                fsync_dir(self.state_dir.parent)
            # Created here with 0600 because portalocker would create it with the umask.
            os.close(os.open(self.lock_path, os.O_WRONLY | os.O_CREAT, 0o600))
        except OSError as exc:
            raise StorageError(f"cannot create handoff lock {self.lock_path}: {exc}") from exc
        import portalocker  # here: an agent that never hands off never loads it (issue 28)

        lock = portalocker.Lock(
            str(self.lock_path),
            mode="a",
            timeout=self.lock_timeout_s,
            check_interval=_LOCK_POLL_S,
            flags=portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING,
        )
        try:
            lock.acquire()
        except (portalocker.LockException, OSError) as exc:
            raise StorageError(
                f"timed out after {self.lock_timeout_s:g} s waiting for {self.lock_path}"
            ) from exc
        try:
            yield
        finally:
            lock.release()


# -- helpers ------------------------------------------------------------------------------


def _invalid(reason: Invalid) -> Validity:
    return Validity(ok=False, reason=reason)


def _is_int(value: Any) -> TypeGuard[int]:
    # bool is an int subclass, but true is not a sequence number.
    return isinstance(value, int) and not isinstance(value, bool)


def _well_formed(record: Mapping[str, Any]) -> bool:
    if not _is_int(record.get("schema_version")) or record["schema_version"] != SCHEMA_VERSION:
        return False
    for key, kind in _SHAPE.items():
        value = record.get(key)
        if not isinstance(value, kind) or (kind is int and not _is_int(value)):
            return False
    return isinstance(record["model"].get("history"), list)


def _conform(record: dict[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """Reset fields of the wrong type to the template's, so a damaged file can be merged.

    Only fields the template gives a non-null default are checked; others pass through.
    """
    for key, default in template.items():
        value = record.get(key)
        if default is None:
            continue
        if not isinstance(value, type(default)):
            log.warning("handoff field %r has the wrong type; resetting it", key)
            record[key] = copy.deepcopy(default)
        elif isinstance(default, Mapping):
            _conform(value, default)
    return record


def _format_time(when: float) -> str:
    text = datetime.fromtimestamp(when, tz=UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def _parse_time(value: Any) -> float | None:
    """Epoch seconds of an ISO-8601 string; a zoneless one is taken as UTC."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _encode(record: Mapping[str, Any]) -> bytes:
    # Indented for people who open the file; the checksum covers the canonical form, not
    # these bytes. allow_nan=False because NaN would make the file invalid JSON.
    text = json.dumps(record, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")
