"""The agent's system prompt: base file + overlay file + generated toolbox (SPEC §5.6).

``system_base.md`` belongs to whoever set the agent up; ateam only ever reads it.
``system_overlay.md`` is the user's: the console's ``# text`` appends to it and
``/sys edit`` replaces it, both through :class:`Prompts`, and people may also edit it on
disk, which a reload (SIGHUP, ``/reloadsysprompt``, the 1 s stat poll) picks up.

Both files may hold protected blocks::

    <!-- ateam-protect:start:NAME -->
    ...
    <!-- ateam-protect:end:NAME -->

An overlay edit may add new blocks and move existing ones, but never remove, change,
rename or unbalance a block that the last *accepted* overlay had; such an edit raises
:class:`~ateam.errors.PromptProtectedViolation` naming the block. An on-disk edit that
does so is refused by :meth:`Prompts.reload`: the model keeps getting the last accepted
overlay and the file is left as the user wrote it, so they can fix it.

Markers are matched exactly (``NAME`` is ``[A-Za-z0-9_.-]+``, blanks allowed just inside
the comment delimiters). Blocks may nest if their names differ; a start without an end,
an end without a start, a block nested in itself, a name used twice, crossed blocks and
anything else that begins ``<!-- ateam-protect`` are *malformed*. A new overlay may not
bring malformations the old one did not have. One that was already there (a file that
was broken when the agent started — :meth:`Prompts.load` accepts whatever is on disk and
says so in :attr:`Prompts.last_warning`) does not block further edits, or a broken
start-up file would make ``# text`` unusable until someone fixed it by hand.
"""

from __future__ import annotations

import bisect
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from ateam._fs import atomic_write
from ateam.errors import BadRequest, PromptProtectedViolation

__all__ = [
    "Block",
    "Prompts",
    "ReloadResult",
    "Toolbox",
    "check_edit",
    "find_blocks",
    "render_toolbox",
]

ToolSpecs: TypeAlias = Sequence[Mapping[str, Any]]
Toolbox: TypeAlias = Callable[[], ToolSpecs] | ToolSpecs
"""The tools to describe: ``{"name", "description", "parameters"}`` dicts, or a callable
returning them (asked again at every :meth:`Prompts.effective`, so the section follows
changes to the agent's allowed tools)."""

_MARKER = re.compile(r"<!--[ \t]*ateam-protect:(start|end):([A-Za-z0-9_.-]+)[ \t]*-->")
# Anything that starts like a marker: a typo in one must not silently leave text unprotected.
_MARKER_LIKE = re.compile(r"<!--\s*ateam-protect")
_SNIPPET_CHARS = 60


@dataclass(frozen=True)
class Block:
    """One protected block of a prompt text."""

    name: str
    """The ``NAME`` of its markers."""
    start: int
    """Offset of the first character of the start marker."""
    end: int
    """Offset just past the end marker."""
    text: str
    """The whole block, markers included; an edit must keep it byte for byte."""


@dataclass(frozen=True)
class ReloadResult:
    """What :meth:`Prompts.reload` did."""

    changed: bool
    """The effective prompt is different from before the reload."""
    refused: str | None
    """One line saying why an on-disk overlay edit was rejected, ``None`` if it was not."""


@dataclass(frozen=True)
class _Problem:
    """A malformation; ``kind`` and ``name`` identify it regardless of where it sits."""

    kind: str
    name: str

    def describe(self, source: str) -> str:
        return _PROBLEM_TEXT[self.kind].format(name=self.name, source=source)


_PROBLEM_TEXT: dict[str, str] = {
    "unclosed": "protected block {name!r} in {source} has a start marker but no end marker",
    "stray_end": "protected block {name!r} in {source} has an end marker but no start marker",
    "nested": "protected block {name!r} in {source} is started again inside itself",
    "duplicate": "protected block {name!r} appears more than once in {source}",
    "crossed": "protected block {name!r} in {source} is not closed before an outer block ends",
    "invalid": "malformed protect marker {name!r} in {source}"
    " (expected <!-- ateam-protect:start|end:NAME -->, NAME of letters, digits, _ . -)",
}


def _scan(text: str) -> tuple[dict[str, Block], list[_Problem]]:
    """Every well-formed block of ``text``, and every malformation, without raising."""
    blocks: dict[str, Block] = {}
    problems: list[_Problem] = []
    open_: list[tuple[str, int]] = []  # (name, offset of its start marker), innermost last
    for like in _MARKER_LIKE.finditer(text):
        marker = _MARKER.match(text, like.start())
        if marker is None:
            close = text.find("-->", like.start())
            stop = close + 3 if close != -1 else len(text)
            snippet = text[like.start() : min(stop, like.start() + _SNIPPET_CHARS)]
            problems.append(_Problem("invalid", snippet))
            continue
        kind, name = marker.group(1), marker.group(2)
        if kind == "start":
            if any(open_name == name for open_name, _ in open_):
                problems.append(_Problem("nested", name))
            else:
                open_.append((name, marker.start()))
            continue
        if not any(open_name == name for open_name, _ in open_):
            problems.append(_Problem("stray_end", name))
            continue
        # Blocks opened inside this one and still open were crossed by its end marker.
        while open_[-1][0] != name:
            problems.append(_Problem("crossed", open_.pop()[0]))
        _, begin = open_.pop()
        if name in blocks:
            problems.append(_Problem("duplicate", name))
        else:
            blocks[name] = Block(name, begin, marker.end(), text[begin : marker.end()])
    problems.extend(_Problem("unclosed", name) for name, _ in open_)
    return blocks, problems


def _violation(problem: _Problem, source: str) -> PromptProtectedViolation:
    return PromptProtectedViolation(
        problem.describe(source),
        detail={"block": problem.name, "source": source, "problem": problem.kind},
    )


def find_blocks(text: str, *, source: str = "overlay") -> dict[str, Block]:
    """The protected blocks of ``text`` by name.

    Args:
        text: a prompt file's contents.
        source: what ``text`` is, for messages (a file name, ``"overlay"``).

    Raises:
        PromptProtectedViolation: ``text`` has a malformed marker; the first one is named.
    """
    blocks, problems = _scan(text)
    if problems:
        raise _violation(problems[0], source)
    return blocks


def _body(block: Block) -> str:
    """The block's text between its two markers."""
    first = _MARKER.match(block.text)
    last = list(_MARKER.finditer(block.text))[-1]
    return block.text[first.end() if first else 0 : last.start()]


def check_edit(old: str, new: str, *, source: str = "overlay") -> None:
    """Refuse replacing ``old`` by ``new`` if that touches one of ``old``'s protected blocks.

    Blocks only ``new`` has are fine. Malformations of ``new`` are refused unless ``old``
    already had them (see the module docstring).

    Raises:
        PromptProtectedViolation: naming the first block removed, renamed, changed or
            made malformed.
    """
    old_blocks, old_problems = _scan(old)
    new_blocks, new_problems = _scan(new)
    inherited = Counter(old_problems)
    for problem in new_problems:
        if inherited[problem] > 0:
            inherited[problem] -= 1
            continue
        raise _violation(problem, source)
    for name, block in old_blocks.items():
        kept = new_blocks.get(name)
        if kept is not None and kept.text == block.text:
            continue
        detail: dict[str, Any] = {"block": name, "source": source}
        if kept is not None:
            how, detail["problem"] = "was changed", "changed"
        elif renamed := _renamed_to(block, new_blocks, old_blocks):
            how, detail["problem"], detail["renamed_to"] = (
                f"was renamed to {renamed!r}",
                "renamed",
                renamed,
            )
        else:
            how, detail["problem"] = "was removed", "removed"
        raise PromptProtectedViolation(f"protected block {name!r} {how} in {source}", detail=detail)


def _renamed_to(block: Block, new: Mapping[str, Block], old: Mapping[str, Block]) -> str | None:
    """The name of a block new in ``new`` with ``block``'s body: the likely renaming."""
    body = _body(block)
    return next((b.name for b in new.values() if b.name not in old and _body(b) == body), None)


def render_toolbox(tools: Iterable[Mapping[str, object]]) -> str:
    """The generated toolbox section: one line per tool, empty when there are none.

    Only the name and the first line of the description go in: the full parameter
    schemas travel separately in the provider's tool list, so repeating them here would
    just spend context.
    """
    lines: list[str] = []
    for spec in tools:
        name = str(spec.get("name", "")).strip()
        if not name:
            continue
        described = str(spec.get("description") or "").strip()
        summary = described.splitlines()[0].strip() if described else ""
        lines.append(f"- {name}: {summary}" if summary else f"- {name}")
    if not lines:
        return ""
    return "## Tools\n\nYou can call these tools:\n" + "\n".join(lines)


_Stat = tuple[int, int, int]


def _stat(path: Path) -> _Stat | None:
    """What the poll compares: a change of any of these means the file was rewritten."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass(frozen=True)
class _Read:
    """A prompt file as last read: its stat, its text, or why it could not be read."""

    stat: _Stat | None
    text: str | None
    """``None`` when the file exists but could not be read (the caller keeps what it had)."""
    error: str | None = None


def _read(path: Path) -> _Read:
    # Stat before reading: if the file changes in between, the next poll sees a newer
    # stat and reads again, whereas stat-after could hide the newer contents for good.
    stat = _stat(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return _Read(None, "")
    except OSError as exc:
        return _Read(stat, None, f"cannot read {path}: {exc.strerror or exc}")
    return _Read(stat, data.decode("utf-8", errors="replace"))


_RULE = "───"


class Prompts:
    """The base and overlay files of one agent and the effective prompt built from them.

    Synchronous on purpose: the files are small and every write is one atomic rename.

    Args:
        base_path: ``system_base.md``; read, never written.
        overlay_path: ``system_overlay.md``; written atomically (mode kept, 0600 if new).
        agent_id: named in the default prompt used when both files are empty.
        toolbox: the tools to list (see :data:`Toolbox`).
    """

    def __init__(
        self,
        base_path: Path,
        overlay_path: Path,
        *,
        agent_id: str,
        toolbox: Toolbox = list,
    ) -> None:
        self.base_path = base_path
        self.overlay_path = overlay_path
        self.agent_id = agent_id
        self._toolbox = toolbox
        self.last_warning: str | None = None
        """What the last :meth:`load` or :meth:`reload` found wrong (unreadable file,
        malformed markers, refused overlay), ``"; "``-joined; ``None`` when all was well."""
        self._loaded = False
        self._base = ""
        self._overlay = ""  # the last accepted overlay: what the model sees
        self._base_stat: _Stat | None = None
        self._overlay_stat: _Stat | None = None
        self._refusal: str | None = None  # the on-disk overlay we are ignoring, and why
        self._effective = ""
        self._version = 0

    # reading ----------------------------------------------------------------------------

    def load(self) -> None:
        """Read both files and accept them as they are.

        Nothing is refused at start-up because there is no earlier accepted overlay to
        protect. Problems (an unreadable file, malformed markers) are put in
        :attr:`last_warning` for the agent to emit; the text is used anyway.
        """
        self.last_warning = None
        base, overlay = _read(self.base_path), _read(self.overlay_path)
        self._base = self._take(base, self._base)
        self._overlay = self._take(overlay, self._overlay)
        self._base_stat, self._overlay_stat = base.stat, overlay.stat
        self._refusal = None
        self._loaded = True
        self._warn_malformed(self._base, self.base_path)
        self._warn_malformed(self._overlay, self.overlay_path)
        self._refresh()

    def changed_on_disk(self) -> bool:
        """Whether either file's (mtime, size, inode) differs from when it was last read.

        Cheap enough for a 1 s poll: two ``stat`` calls and no reading. True before the
        first :meth:`load`.
        """
        if not self._loaded:
            return True
        return (
            _stat(self.base_path) != self._base_stat
            or _stat(self.overlay_path) != self._overlay_stat
        )

    def reload(self) -> ReloadResult:
        """Read both files again; refuse an overlay that breaks a protected block.

        The base is taken as it is (it is not the console's to police). An overlay that
        fails :func:`check_edit` against the last accepted one is not used: the result's
        ``refused`` (and :attr:`last_warning`) says why, naming the block. Its stat is
        recorded all the same, so the poll does not refuse the same file every second; an
        explicit reload reports it again, and fixing the file clears it.
        """
        if not self._loaded:
            self.load()
            return ReloadResult(changed=True, refused=None)
        self.last_warning = None
        base, overlay = _read(self.base_path), _read(self.overlay_path)
        self._base = self._take(base, self._base)
        self._base_stat = base.stat
        self._warn_malformed(self._base, self.base_path)
        refused: str | None = None
        candidate = self._take(overlay, self._overlay)
        try:
            check_edit(self._overlay, candidate, source=self.overlay_path.name)
        except PromptProtectedViolation as exc:
            refused = f"on-disk edit refused: {exc.message}; still using the last accepted overlay"
            self._warn(refused)
        else:
            self._overlay = candidate
        self._refusal = refused
        self._overlay_stat = overlay.stat
        return ReloadResult(changed=self._refresh(), refused=refused)

    # the prompt ------------------------------------------------------------------------

    def effective(self) -> str:
        """The system prompt to send: base, overlay and toolbox, joined by blank lines."""
        self._refresh()
        return self._effective

    @property
    def version(self) -> int:
        """Goes up by one each time :meth:`effective` would return something new."""
        self._refresh()
        return self._version

    def overlay_text(self) -> str:
        """The last accepted overlay, exactly as written (what ``/sys edit`` starts from)."""
        self._ensure_loaded()
        return self._overlay

    def show(self) -> str:
        """The effective prompt for people (``/sys show``): where each part comes from,
        with protected blocks framed by ``┌ protected: NAME`` … ``└ end: NAME`` and a
        ``│`` gutter, which reads in any terminal and does not hide the markers."""
        self._refresh()
        base, overlay = self._base.strip(), self._overlay.strip()
        out: list[str] = []
        if base or overlay:
            out += [f"{_RULE} base: {self.base_path} {_RULE}", _mark(base) or "(empty)"]
        else:
            out += [
                f"{_RULE} base: {self.base_path} (missing or empty: default used) {_RULE}",
                self._default(),
            ]
        out += ["", f"{_RULE} overlay: {self.overlay_path} {_RULE}"]
        if self._refusal:
            out.append(f"(!) {self._refusal}")
        out.append(_mark(overlay) or "(empty)")
        tools = self._toolbox_text()
        out += ["", f"{_RULE} toolbox (generated) {_RULE}", tools or "(no tools)"]
        return "\n".join(out)

    # writing ---------------------------------------------------------------------------

    def append_overlay(self, line: str) -> None:
        """The console's ``# text``: add ``line`` (the text after ``#``) to the overlay.

        It is appended to the file as it is on disk now, so an outside edit that no
        reload has picked up yet is not overwritten; that edit must pass
        :func:`check_edit` too, and the result applies from the next :meth:`effective`.

        Raises:
            BadRequest: ``line`` is empty or spans several lines.
            PromptProtectedViolation: the overlay on disk breaks a protected block.
        """
        self._ensure_loaded()
        text = line.strip()
        if not text:
            raise BadRequest("nothing to add to the overlay")
        if len(text.splitlines()) > 1:
            raise BadRequest("'#' adds a single line to the overlay; use /sys edit for more")
        on_disk = self._take(_read(self.overlay_path), self._overlay)
        if on_disk != self._overlay:
            try:
                check_edit(self._overlay, on_disk, source=self.overlay_path.name)
            except PromptProtectedViolation as exc:
                raise PromptProtectedViolation(
                    f"the overlay on disk was edited outside ateam ({exc.message});"
                    " fix the file, then add the line again",
                    detail=exc.detail,
                ) from exc
        separator = "\n" if on_disk and not on_disk.endswith("\n") else ""
        self._write_overlay(f"{on_disk}{separator}{text}\n")

    def set_overlay(self, text: str) -> None:
        """``/sys edit`` saved: replace the overlay with ``text`` if it passes
        :func:`check_edit` against the last accepted one.

        Raises:
            PromptProtectedViolation: naming the block; nothing is written.
        """
        self._ensure_loaded()
        self._write_overlay(text)

    # internals --------------------------------------------------------------------------

    def _write_overlay(self, text: str) -> None:
        check_edit(self._overlay, text, source=self.overlay_path.name)
        # Write through a symlinked overlay (a file shared between agents, say) instead of
        # replacing the link with a regular file.
        target = self.overlay_path.resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, text.encode("utf-8"))
        self._overlay = text
        self._refusal = None
        # Our own write must not look like someone else's to the poll.
        self._overlay_stat = _stat(self.overlay_path)
        self._refresh()

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.load()

    def _take(self, read: _Read, previous: str) -> str:
        """The text of a read, or ``previous`` when the file could not be read."""
        if read.text is None:
            self._warn(read.error)
            return previous
        return read.text

    def _warn_malformed(self, text: str, path: Path) -> None:
        _, problems = _scan(text)
        if problems:
            self._warn(problems[0].describe(str(path)))

    def _warn(self, message: str | None) -> None:
        if message:
            self.last_warning = f"{self.last_warning}; {message}" if self.last_warning else message

    def _default(self) -> str:
        return f"You are {self.agent_id}, a coding agent."

    def _toolbox_text(self) -> str:
        tools = self._toolbox() if callable(self._toolbox) else self._toolbox
        return render_toolbox(tools)

    def _refresh(self) -> bool:
        """Rebuild the effective prompt; bump the version if it differs. True if it did."""
        self._ensure_loaded()
        base, overlay = self._base.strip(), self._overlay.strip()
        if not base and not overlay:
            base = self._default()
        text = "\n\n".join(part for part in (base, overlay, self._toolbox_text()) if part)
        if text == self._effective:
            return False
        self._effective = text
        self._version += 1
        return True


def _mark(text: str) -> str:
    """``text`` with every protected block framed and indented by a ``│`` gutter."""
    blocks, _ = _scan(text)
    if not blocks:
        return text
    lines = text.split("\n")
    starts = _line_starts(lines)
    spans = sorted(
        ((_line_of(starts, b.start), _line_of(starts, b.end - 1), b) for b in blocks.values()),
        key=lambda span: span[2].start,
    )
    out: list[str] = []
    depth = 0
    for index, line in enumerate(lines):
        for first, _, block in spans:
            if first == index:
                out.append(f"{'│ ' * depth}┌ protected: {block.name}")
                depth += 1
        out.append(f"{'│ ' * depth}{line}")
        closing = sorted((s for s in spans if s[1] == index), key=lambda s: -s[2].start)
        for _, _, block in closing:
            depth -= 1
            out.append(f"{'│ ' * depth}└ end: {block.name}")
    return "\n".join(out)


def _line_starts(lines: Sequence[str]) -> list[int]:
    starts, offset = [], 0
    for line in lines:
        starts.append(offset)
        offset += len(line) + 1
    return starts


def _line_of(starts: Sequence[int], offset: int) -> int:
    """The index of the line holding ``offset`` (``starts`` is ascending, from 0)."""
    return bisect.bisect_right(starts, offset) - 1
