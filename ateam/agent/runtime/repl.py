"""The agent's local REPL (SPEC §5.7): a small prompt on the agent's own terminal.

When ``ateam agent`` runs with stdin a TTY (and without ``--no-repl``) it reads lines
with prompt-toolkit while the agent keeps working. A line is either a REPL command
(``status``, ``queue``, ``queue clear``, ``history tail [N]``, ``sys show``,
``sys reload``, ``kb ingest PATH…``, ``inbox scan``, ``help``) or plain text, which is
queued as a task with source ``local``. The REPL has no console commands: it can never
attach or detach a console, and it never stops the agent.

Keys: Ctrl+C clears the line and, while a task runs, interrupts it (on a TTY in raw
mode Ctrl+C is a key, not SIGINT, so the REPL forwards it to the agent's ``interrupt``);
Ctrl+D closes the REPL only, the agent keeps running (its signals work again then);
F1 toggles the info panel (state, ctx %, queue length, last error); TAB completes
command names and paths.

The command logic (:meth:`AgentRepl.handle`, :func:`scan_inbox`) needs no terminal:
output goes through an ``out`` callable and questions through an async ``ask``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prompt_toolkit.completion import CompleteEvent, Completer
from prompt_toolkit.completion import Completion as PtCompletion
from prompt_toolkit.document import Document

from ateam.agent.runtime.port import ServicePort
from ateam.agent.runtime.service import MAX_HISTORY_TAIL, AgentService
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.rpc import Call
from ateam.completion import CommandCompleter, Completion
from ateam.errors import AteamError
from ateam.redact import Scrubbed
from ateam.wire.results import R

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.input import Input
    from prompt_toolkit.key_binding import KeyPressEvent
    from prompt_toolkit.output import Output

Out = Callable[[str], None]
"""Where the REPL writes one block of text (``print`` on the terminal)."""
Ask = Callable[[str], Awaitable[str]]
"""Ask a question and return the typed answer."""

INBOX_MAX_BYTES = 256 * 1024
"""Larger inbox files are skipped: a task that size would not fit a context anyway."""
INBOX_PREVIEW_LINES = 5
"""How many lines of an inbox file ``inbox scan`` shows before asking."""
UNKNOWN_COMMAND = "repl.unknown_command"
"""Stable code of a ``/word`` the REPL does not know."""
YES = frozenset({"y", "yes"})


@dataclass(frozen=True)
class _Command:
    """One REPL command: its usage line (read by the completer too) and help text."""

    usage: str
    help: str


COMMANDS: dict[str, _Command] = {
    "status": _Command("status", "state, model, ctx %, queue length, last error"),
    "queue": _Command("queue [clear]", "list the current and pending items; clear asks first"),
    "history": _Command(
        "history tail [N]", f"the newest N turns (default 10, max {MAX_HISTORY_TAIL})"
    ),
    "sys": _Command("sys show|reload", "show the effective system prompt, or reload its files"),
    "kb": _Command("kb ingest [--scope agent|project|user] PATH…", "add files to a knowledge base"),
    "inbox": _Command("inbox scan", "offer each inbox file as a task, one question each"),
    "help": _Command("help", "this list"),
}
"""The command words; any other line is a task for the agent."""


def _one_line(code: str, message: str, hint: str = "") -> str:
    """The REPL's one-line error, in the same shape as :meth:`AteamError.one_line`."""
    return f"error [{code}]: {message}" + (f" — {hint}" if hint else "")


# --- inbox -----------------------------------------------------------------------------


def _free_name(folder: Path, name: str) -> Path:
    """``folder/name``, or ``stem-1.ext``, ``stem-2.ext``… if that is taken."""
    candidate = folder / name
    stem, suffix = os.path.splitext(name)
    n = 0
    while candidate.exists():
        n += 1
        candidate = folder / f"{stem}-{n}{suffix}"
    return candidate


def _read_text(path: Path) -> tuple[str | None, str]:
    """The file's text, or None and why it is skipped (too large, binary, unreadable)."""
    try:
        size = path.stat().st_size
        if size > INBOX_MAX_BYTES:
            return None, f"larger than {INBOX_MAX_BYTES // 1024} KiB ({size} bytes)"
        data = path.read_bytes()
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    if len(data) > INBOX_MAX_BYTES:  # grew between stat and read
        return None, f"larger than {INBOX_MAX_BYTES // 1024} KiB"
    if b"\0" in data:
        return None, "binary"
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "not UTF-8 text"


async def scan_inbox(port: ServicePort, ask: Ask, out: Out) -> list[QueueItem]:
    """Offer each file of the agent's ``inbox/`` as a task; returns the items queued.

    Files are taken in name order. Each one is shown (name and first lines) and queued
    only on an explicit ``y``; its text goes in with source ``inbox``, prefixed with the
    file name, and the file then moves to ``inbox/processed/`` (an existing file of the
    same name there is never overwritten: the newcomer gets a ``-N`` suffix). Anything
    else leaves the file where it is. Binary files and files over 256 KiB are skipped.
    """
    inbox = port.config.dir / "inbox"
    try:
        files = sorted(p for p in inbox.iterdir() if p.is_file())
    except FileNotFoundError:
        out(f"inbox: {inbox} does not exist")
        return []
    except OSError as exc:
        out(f"inbox: cannot read {inbox}: {exc.strerror}")
        return []
    if not files:
        out(f"inbox: no files in {inbox}")
        return []
    queued: list[QueueItem] = []
    for path in files:
        text, why = _read_text(path)
        if text is None:
            out(f"inbox: skipped {path.name}: {why}")
            continue
        lines = text.splitlines()
        preview = "\n".join(f"  │ {line}" for line in lines[:INBOX_PREVIEW_LINES])
        more = len(lines) - INBOX_PREVIEW_LINES
        out(
            f"── {path.name} ({len(text)} chars)\n{preview}"
            + (f"\n  │ … {more} more lines" if more > 0 else "")
        )
        answer = (await ask(f"enqueue {path.name}? [y/N] ")).strip().lower()
        if answer not in YES:
            out(f"inbox: left {path.name}")
            continue
        # Queue first, then move: a failed move offers the file again next time, which
        # is better than a moved file that never reached the queue.
        entry = port.intake.enqueue(f"[inbox file: {path.name}]\n{text}", source="inbox")
        queued.append(entry.item)
        if entry.redacted:
            out(_secrets_notice(entry.redacted))
        processed = inbox / "processed"
        try:
            processed.mkdir(exist_ok=True)
            # Only this REPL moves files into processed/, so picking the name and then
            # renaming cannot race with another writer of that folder.
            destination = _free_name(processed, path.name)
            os.replace(path, destination)
        except OSError as exc:
            out(f"inbox: queued {entry.item.id} but could not move {path.name}: {exc.strerror}")
            continue
        out(f"inbox: queued {entry.item.id}; moved to processed/{destination.name}")
    return queued


# --- completion -------------------------------------------------------------------------


class ReplCompleter(Completer):
    """TAB completion for REPL lines: command words, their literal arguments, paths.

    The console's :class:`CommandCompleter` does the work; REPL commands have no ``/``,
    so the line is completed as if it had one and the slash is taken off again.
    """

    def __init__(self, cwd: str | os.PathLike[str] | None = None) -> None:
        self.commands = CommandCompleter(lambda: COMMANDS, lambda: (), cwd=cwd)

    def complete(self, line: str, cursor: int | None = None) -> list[Completion]:
        """Completions for the word before ``cursor`` (the end of the line by default)."""
        end = len(line) if cursor is None else cursor
        found: list[Completion] = []
        for item in self.commands.complete("/" + line, end + 1):
            if item.start == 0:  # a command name: "/queue " → "queue "
                found.append(Completion(item.text[1:], 0, item.display.lstrip("/")))
            else:
                found.append(Completion(item.text, item.start - 1, item.display))
        return found

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[PtCompletion]:
        cursor = document.cursor_position
        for item in self.complete(document.text, cursor):
            yield PtCompletion(item.text, start_position=item.start - cursor, display=item.display)

    async def get_completions_async(
        self, document: Document, complete_event: CompleteEvent
    ) -> AsyncGenerator[PtCompletion, None]:
        for item in self.get_completions(document, complete_event):
            yield item


# --- the REPL ---------------------------------------------------------------------------


class AgentRepl:
    """The local REPL of one agent.

    Args:
        port: the running agent (in-process; the REPL calls it directly, no RPC).
        out: where output goes; ``print`` (inside ``patch_stdout``) by default.
        ask: how questions are asked; a one-off prompt on the terminal by default.
    """

    def __init__(
        self, port: ServicePort, *, out: Out | None = None, ask: Ask | None = None
    ) -> None:
        self.port = port
        self.service = AgentService(port)
        self.out: Out = out or print
        self.ask: Ask = ask or self._ask_terminal
        self.panel = False
        """Whether the F1 info panel is shown."""
        self._session: PromptSession[str] | None = None
        self._io: tuple[Input | None, Output | None] = (None, None)
        self._handlers: dict[str, Callable[[list[str]], Awaitable[None]]] = {
            "status": self._status,
            "queue": self._queue,
            "history": self._history,
            "sys": self._sys,
            "kb": self._kb,
            "inbox": self._inbox,
            "help": self._help,
        }

    # commands -----------------------------------------------------------------------

    async def handle(self, line: str) -> None:
        """Run one line: a command, or plain text queued as a task (source ``local``)."""
        text = line.strip()
        if not text:
            return
        word = text.split(maxsplit=1)[0]
        if word.startswith("/"):
            self.out(
                _one_line(
                    UNKNOWN_COMMAND,
                    f"unknown command {word}",
                    "REPL commands have no slash; type help",
                )
            )
            return
        handler = self._handlers.get(word)
        if handler is None:
            try:
                entry = self.port.intake.enqueue(text, source="local")
            except AteamError as exc:  # storage.full: refused, and the REPL stays up
                self.out(exc.one_line())
                return
            self.out(f"queued {entry.item.id} ({len(self.port.intake.queue)} waiting)")
            if entry.redacted:
                self.out(_secrets_notice(entry.redacted))
            return
        try:
            args = shlex.split(text)[1:]
        except ValueError as exc:
            self.out(_one_line("bad_request", f"cannot parse the line: {exc}"))
            return
        try:
            await handler(args)
        except AteamError as exc:
            self.out(exc.one_line())

    def _usage(self, word: str) -> None:
        self.out(_one_line("bad_request", f"usage: {COMMANDS[word].usage}", "type help"))

    async def _call(
        self, handler: Callable[[Call], Awaitable[R]], method: str, **params: object
    ) -> R:
        """Run an RPC handler in-process, so the REPL and the console agree."""
        return await handler(Call("local", method, params, "local", 0.0))

    async def _status(self, args: list[str]) -> None:
        if args:
            return self._usage("status")
        s = await self._call(self.service.status, "status")
        lines = [
            f"{s.id}  state {s.state}  model {s.model}  ctx {s.ctx_pct}%",
            f"queue {s.queue_len}  current {s.current_task or '-'}  "
            f"owner {s.owner or '-'}  bus {'up' if s.bus_connected else 'down'}",
        ]
        if s.last_error:
            lines.append(f"last error: {s.last_error}")
        self.out("\n".join(lines))

    async def _queue(self, args: list[str]) -> None:
        if args == ["clear"]:
            waiting = len(self.port.intake.queue)
            if not waiting:
                self.out("queue: nothing pending")
                return
            answer = await self.ask(f"drop {waiting} pending item(s)? type yes to confirm: ")
            if answer.strip().lower() != "yes":
                self.out("queue: not cleared")
                return
            await self._call(self.service.queue_clear, "queue_clear", confirm=True)
            self.out(f"queue: cleared {waiting} item(s)")
            return
        if args:
            return self._usage("queue")
        listing = await self._call(self.service.queue_list, "queue_list")
        current, pending = listing.current, listing.pending
        lines = [f"current  {current.id}  {_short(current.text)}" if current else "idle"]
        lines += [f"{p.id}  [{p.source}]  {_short(p.text)}" for p in pending]
        if listing.dead:
            lines.append(f"dead-lettered: {len(listing.dead)}")
        lines.append(f"{len(pending)} pending")
        self.out("\n".join(lines))

    async def _history(self, args: list[str]) -> None:
        if not args or args[0] != "tail" or len(args) > 2:
            return self._usage("history")
        n = 10
        if len(args) == 2:
            if not args[1].isdigit() or not 0 < int(args[1]) <= MAX_HISTORY_TAIL:
                return self._usage("history")
            n = int(args[1])
        turns = (await self._call(self.service.history_tail, "history_tail", n=n)).turns
        if not turns:
            self.out("history: empty")
            return
        self.out("\n".join(_turn_line(turn) for turn in turns))

    async def _sys(self, args: list[str]) -> None:
        if args == ["show"]:
            self.out((await self._call(self.service.prompt_show, "prompt_show")).marked)
        elif args == ["reload"]:
            reply = await self._call(self.service.prompt_reload, "prompt_reload")
            self.out(
                f"system prompt reloaded (version {reply.version})"
                if reply.applied
                else "system prompt reload deferred until the current task ends"
            )
        else:
            self._usage("sys")

    async def _kb(self, args: list[str]) -> None:
        scope = "agent"
        if args[1:3] and args[1] == "--scope":
            scope, args = args[2], [args[0], *args[3:]]
        if len(args) < 2 or args[0] != "ingest":
            return self._usage("kb")
        try:
            report = await self._call(
                self.service.kb_ingest, "kb_ingest", scope=scope, paths=args[1:]
            )
        except AteamError as exc:
            self.out(exc.one_line())
            return
        lines = [
            f"kb {scope}: {len(report.ingested)} document(s) ingested, "
            f"{report.chunks} chunk(s), {len(report.skipped)} skipped"
        ]
        lines += [f"  + {d.doc_id} {d.path}" for d in report.ingested]
        lines += [f"  - {d.path}: {d.reason}" for d in report.skipped]
        self.out("\n".join(lines))

    async def _inbox(self, args: list[str]) -> None:
        if args != ["scan"]:
            return self._usage("inbox")
        items = await scan_inbox(self.port, self.ask, self.out)
        self.out(f"inbox: {len(items)} file(s) queued")

    async def _help(self, args: list[str]) -> None:
        lines = [f"  {c.usage:<20} {c.help}" for c in COMMANDS.values()]
        lines += [
            "  anything else        queued as a task for the agent (source local)",
            "keys: TAB completes · F1 info panel · Ctrl+C clears the line / interrupts the "
            "task · Ctrl+D closes the REPL (the agent keeps running)",
        ]
        self.out("\n".join(lines))

    # the terminal ---------------------------------------------------------------------

    def prompt_text(self) -> str:
        """``proj/zeus [idle]> ``: the agent and its state, redrawn as it changes."""
        return f"{self.port.id} [{self.port.reports.state.value}]> "

    def panel_text(self) -> str:
        """The F1 info panel: state, ctx %, queue length and last error."""
        status = self.port.reports.status()
        error = status.last_error or "-"
        return (
            f" {self.port.id}  state {self.port.reports.state.value}  ctx {status.ctx_pct}%  "
            f"queue {len(self.port.intake.queue)}  last error: {_short(error, 60)}  (F1 hides)"
        )

    def toggle_panel(self) -> None:
        """F1: show or hide the info panel."""
        self.panel = not self.panel
        if self._session is not None:
            self._session.bottom_toolbar = self.panel_text if self.panel else None

    async def _ask_terminal(self, question: str) -> str:
        from prompt_toolkit import PromptSession

        try:
            session = PromptSession[str](input=self._io[0], output=self._io[1])
            return await session.prompt_async(
                question, handle_sigint=False, set_exception_handler=False
            )
        except (EOFError, KeyboardInterrupt):
            return ""

    def _interrupt(self) -> None:
        task = self.port.intake.interrupt()
        if task is not None:
            self.out(f"interrupting {task}")

    async def run(self, *, input: Input | None = None, output: Output | None = None) -> None:
        """Read and run lines until Ctrl+D (or until the task is cancelled).

        ``input`` and ``output`` default to the terminal; tests pass a pipe.
        """
        from prompt_toolkit import PromptSession
        from prompt_toolkit.key_binding import KeyBindings
        from prompt_toolkit.patch_stdout import patch_stdout

        bindings = KeyBindings()

        @bindings.add("f1")
        def _f1(event: KeyPressEvent) -> None:
            self.toggle_panel()
            event.app.invalidate()

        self._session = PromptSession(
            self.prompt_text,
            completer=ReplCompleter(self.port.config.cwd),
            key_bindings=bindings,
            refresh_interval=0.5,  # the prompt shows the state; redraw as it changes
            input=input,
            output=output,
        )
        self._io = (input, output)
        with patch_stdout(), _logs_through_patched_stderr():
            self.out(f"ateam agent {self.port.id}: REPL ready — type help; F1 info; Ctrl+D closes")
            while True:
                try:
                    # handle_sigint=False: prompt-toolkit would take SIGINT from the agent's
                    # handler and, on return, leave none behind.
                    line = await self._session.prompt_async(
                        handle_sigint=False, set_exception_handler=False
                    )
                except KeyboardInterrupt:
                    # Raw-mode terminal: Ctrl+C is a key, so the agent's SIGINT handler
                    # never sees it; do what it would do.
                    self._interrupt()
                    continue
                except EOFError:
                    self.out(
                        "REPL closed; the agent keeps running "
                        "(Ctrl+C interrupts a task, SIGTERM stops the agent)"
                    )
                    return
                await self.handle(line)


@contextlib.contextmanager
def _logs_through_patched_stderr() -> Iterator[None]:
    """Point stderr log handlers at the patched ``sys.stderr`` while the prompt is up.

    ``logging.basicConfig`` kept the real stderr; writing to it directly would tear
    through the prompt line instead of printing above it.
    """
    moved: list[tuple[logging.StreamHandler[Any], Any]] = []
    for handler in _stream_handlers(logging.getLogger().handlers):
        if handler.stream in (sys.__stderr__, sys.__stdout__):
            moved.append((handler, handler.setStream(sys.stderr)))
    try:
        yield
    finally:
        for handler, stream in moved:
            handler.setStream(stream)


def _stream_handlers(handlers: Iterable[logging.Handler]) -> Iterator[logging.StreamHandler[Any]]:
    for handler in handlers:
        if type(handler) is logging.StreamHandler:
            yield handler


def _short(text: str, width: int = 70) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _turn_line(turn: dict[str, Any]) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(float(turn.get("ts") or 0)))
    return f"{stamp}  {turn.get('role', '?'):<9} {_short(str(turn.get('content') or ''), 90)}"


def _secrets_notice(count: int) -> str:
    """The line a sender reads when its text held secrets (see :class:`Scrubbed`)."""
    return Scrubbed("", count).notice() or ""
