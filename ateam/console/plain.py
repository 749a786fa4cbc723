"""Plain line mode (SPEC §6): one line per event, input read line by line.

Works over SSH, in a dumb terminal and from scripts: with a non-TTY stdin the console
stops at the first failing command with that command's exit code, waits for every task
it queued before it ends, and exits 5 when one of them failed (:mod:`ateam.console.script`).

When stdin and stdout are both terminals (and ``TERM`` is not ``dumb``) lines are read
with prompt-toolkit instead: history in ``~/.ateam/console/history``, TAB completion
(:mod:`ateam.completion`), output printed above the prompt, and F1 for an
agent palette — it fills in ``/attach `` and opens a menu of agent ids that narrows as
you type; Enter attaches. Ctrl+C and end of input (Ctrl+D) mean what they mean on a
pipe: interrupt when attached, ask before quitting when not, and leave.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from ateam.client import Event, Gap, Target
from ateam.console.commands import command_line, completer
from ateam.console.controller import ConsoleController
from ateam.console.diffs import ansi
from ateam.console.hints import console_line
from ateam.console.render import Chunk, Line, Tone, render, render_gap
from ateam.console.script import ScriptController
from ateam.console.tables import table_lines
from ateam.errors import AteamError
from ateam.exits import cli_exit_code
from ateam.paths import ateam_home, private_dir

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.key_binding import KeyBindings
    from rich.text import Text

    from ateam.completion import CommandCompleter, ShellTab


def prefix(agent: str) -> str:
    return f"[A:{agent}]"


class PlainView:
    """Renders events as lines, joining streamed tokens into whole lines per agent."""

    def __init__(
        self,
        lines: asyncio.Queue[str | None],
        out: TextIO | None = None,
        *,
        color: bool | None = None,
    ) -> None:
        self._lines = lines
        self._out = out or sys.stdout
        self._color = color if color is not None else _isatty(self._out)
        self._partial: dict[str, str] = {}
        self._partial_from: dict[str, int] = {}
        """Offset of the first event whose text is still held in an unprinted line."""
        self.ask_hook: Callable[[str | None], None] | None = None
        """Set by the prompt-toolkit input: shows a question as the prompt, then clears it."""
        self.on_event: Callable[[Event], None] | None = None
        """Told every event shown (a console reading a script learns how its tasks end)."""

    def _print(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()

    def _flush_partial(self, agent: str) -> None:
        self._partial_from.pop(agent, None)
        rest = self._partial.pop(agent, "")
        if rest:
            self._print(f"{prefix(agent)} {rest}")

    def flush(self) -> None:
        """Print every unfinished line (used when the console leaves)."""
        for agent in list(self._partial):
            self._flush_partial(agent)

    def unsettled(self, agent: str) -> int | None:
        """First offset of ``agent`` not yet fully on screen, if a line is half-built.

        The console saves its resume point just before it, so a console killed in the
        middle of a line shows that line whole after a restart instead of losing its
        beginning.
        """
        return self._partial_from.get(agent)

    def _stream_text(self, agent: str, text: str, offset: int) -> None:
        buffered = self._partial.get(agent, "") + text
        *complete, rest = buffered.split("\n")
        for line in complete:
            self._print(f"{prefix(agent)} {line.rstrip(chr(13))}")
        self._partial[agent] = rest
        if not rest:
            self._partial_from.pop(agent, None)
        elif complete or agent not in self._partial_from:
            self._partial_from[agent] = offset

    def event(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)
        shown = render(event)
        if isinstance(shown, Chunk):
            if shown.thinking:
                # Reasoning is not the answer: dimmed on a terminal, left out of a pipe
                # (a script reads answers).
                if self._color:
                    self._stream_text(event.agent, f"\x1b[2m{shown.text}\x1b[22m", event.offset)
                return
            self._stream_text(event.agent, shown.text, event.offset)
        else:
            self._show(event.agent, shown)

    def gap(self, gap: Gap) -> None:
        self._show(gap.agent, (render_gap(gap),))

    def _show(self, agent: str, lines: Sequence[Line]) -> None:
        """Whole lines of ``agent``, after the line it was still writing, if any."""
        if lines:
            self._flush_partial(agent)
        tag = prefix(agent)
        for line in lines:
            lead, mark = _LEADS.get(line.tone, ""), _MARKS.get(line.tone, "")
            self._print(f"{lead}{tag} {mark}{self._paint(line)}")

    def _paint(self, line: Line) -> str:
        colour = _ANSI.get(line.tone) if self._color else None
        return f"\x1b[{colour}m{line.text}\x1b[0m" if colour else line.text

    def info(self, text: str, agent: str | None = None) -> None:
        self._print(f"{prefix(agent)} {text}" if agent else text)

    def banner(self, text: str, *, level: str = "info") -> None:
        # The bell only on a terminal: in a pipe it would be a stray byte in a script's input.
        bell = "\a" if level == "alert" and self._out.isatty() else ""
        self._print(f"{bell}*** {text}")

    def error(self, text: str) -> None:
        self._print(text)

    def page(self, title: str, text: Text) -> None:
        # The title is the text's first line already (ateam.console.diffs): printed once.
        self._print(ansi(text, color=self._color))

    def table(self, rows: Sequence[Mapping[str, object]], columns: list[str]) -> None:
        if not rows:
            self._print("no agents")
            return
        for line in table_lines(rows, columns):
            self._print(line)

    async def ask(self, question: str) -> str:
        if self.ask_hook is not None:
            return await self._ask_at_prompt(question, self.ask_hook)
        self._out.write(question)
        self._out.flush()
        answer = await self._lines.get()
        if answer is None:
            # End of input while asking: no answer, and the main loop must still see it.
            self._lines.put_nowait(None)
        return answer or ""

    async def _ask_at_prompt(self, question: str, hook: Callable[[str | None], None]) -> str:
        # A question printed above a live prompt would sit apart from where the answer
        # is typed, so it becomes the prompt itself until answered.
        hook(question)
        try:
            answer = await self._lines.get()
        finally:
            hook(None)
        if answer is None:
            # End of input answers "no" and must still end the console's main loop.
            self._lines.put_nowait(None)
        return answer or ""


# How plain mode dresses the renderer's tones: ASCII rules for task boundaries, the
# model switch marked like a banner, and colour only where it carries meaning (diffs).
_MARKS: dict[Tone, str] = {Tone.RULE: "--- ", Tone.RULE_FAILED: "--- "}
_LEADS: dict[Tone, str] = {Tone.SWITCH: "*** "}
_ANSI: dict[Tone, str] = {
    Tone.DIFF_FILE: "1",
    Tone.DIFF_HUNK: "36",
    Tone.DIFF_ADD: "32",
    Tone.DIFF_DEL: "31",
}


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def start_stdin_reader(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
    """Read stdin on a daemon thread so a blocked read never holds up shutdown."""

    def pump() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=pump, name="stdin", daemon=True).start()


def prompt_toolkit_wanted(
    stdin: TextIO | None = None, stdout: TextIO | None = None, term: str | None = None
) -> bool:
    """Whether to read lines with prompt-toolkit: both ends a terminal, not a dumb one."""
    term = os.environ.get("TERM", "") if term is None else term
    return _isatty(stdin or sys.stdin) and _isatty(stdout or sys.stdout) and term.lower() != "dumb"


async def run_plain(
    target: Target,
    *,
    interactive: bool,
    tty: bool | None = None,
    first_lines: Sequence[str] = (),
    panes_possible: bool = False,
) -> PlainOutcome:
    """The plain console; returns its exit code, and whether ``/ui panes on`` ended it.

    ``tty`` chooses prompt-toolkit input (None: when :func:`prompt_toolkit_wanted`).
    ``first_lines`` run before any input is read (re-attaching after ``/ui panes off``).
    ``panes_possible`` says whether ``/ui panes on`` may be accepted.
    """
    if tty is None:
        tty = prompt_toolkit_wanted()
    if not tty:
        return await _run_plain(
            target, interactive=interactive, tty=False, first=first_lines, panes=panes_possible
        )
    from prompt_toolkit.patch_stdout import patch_stdout

    # Everything the console prints goes through a proxy that draws it above the
    # prompt; raw, so the colours of diffs and tool output pass through.
    with patch_stdout(raw=True):
        return await _run_plain(
            target, interactive=interactive, tty=True, first=first_lines, panes=panes_possible
        )


async def _run_plain(
    target: Target,
    *,
    interactive: bool,
    tty: bool,
    first: Sequence[str] = (),
    panes: bool = False,
) -> PlainOutcome:
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    for preset in first:
        lines.put_nowait(preset)
    view = PlainView(lines)
    controller = _controller(target, view, script=not interactive)
    controller.announce_waiting = True  # no agent list here: a waiting agent is a banner
    controller.panes_possible = panes
    try:
        await controller.start()
    except AteamError as exc:
        view.error(exc.one_line())
        await controller.aclose()
        return PlainOutcome(cli_exit_code(exc))
    view.banner(f"connected to {target.describe()} as {controller.session}; /help for commands")
    quit_armed = False
    pending: set[asyncio.Future[None]] = set()

    def on_sigint() -> None:
        nonlocal quit_armed
        if controller.attached and not controller.read_only:
            pending.add(asyncio.ensure_future(_quietly(controller.execute("/interrupt"), view)))
        elif interactive and not quit_armed:
            quit_armed = True
            view.banner("not attached: press Ctrl+C again (or /quit) to leave the console")
        else:
            lines.put_nowait("/quit")

    prompt: PromptInput | None = None
    if tty:
        prompt = PromptInput(controller, view, lines, on_interrupt=on_sigint)
        prompt.start()
    else:
        start_stdin_reader(loop, lines)
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    code = 0
    try:
        code = await _read_lines(controller, view, lines, interactive=interactive, tty=tty)
        if isinstance(controller, ScriptController):
            code = await controller.finish(code)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
        if prompt is not None:
            await prompt.stop()
        # Print the line still being streamed first, so the offsets saved on close
        # count it as shown and a restarted console does not repeat it.
        view.flush()
        outcome = PlainOutcome.of(controller, code)
        await controller.aclose()
    return outcome


def _controller(target: Target, view: PlainView, *, script: bool) -> ConsoleController:
    """The console's controller; a ``script``'s (stdin not a terminal) waits for the tasks
    it queues and learns how they end from every event the view shows."""
    if not script:
        return ConsoleController(target, view)
    controller = ScriptController(target, view)
    view.on_event = controller.seen
    return controller


async def _read_lines(
    controller: ConsoleController,
    view: PlainView,
    lines: asyncio.Queue[str | None],
    *,
    interactive: bool,
    tty: bool,
) -> int:
    """Run lines until ``/quit`` or the end of input; the exit code of a script's failure."""
    while not controller.quit_requested:
        line = await lines.get()
        if line is None:
            # A script's end of input waits for its answers; Ctrl+D at a terminal
            # is the user leaving, and the agents keep working without the console.
            if not tty:
                await controller.wait_for_pending()
            return 0
        try:
            await controller.execute(line)
        except AteamError as exc:
            view.error(console_line(exc, line, controller.attached))
            if not interactive:
                return cli_exit_code(exc)
    return 0


@dataclass(frozen=True)
class PlainOutcome:
    """How a plain console ended: its exit code, or a switch to panes (``/ui panes on``)."""

    code: int
    to_panes: bool = False
    first_lines: list[str] = field(default_factory=list)
    """What the panes console runs first: re-attaching to the agent this one had."""

    @classmethod
    def of(cls, controller: ConsoleController, code: int) -> PlainOutcome:
        if controller.switch_to != "panes":
            return cls(code)
        agent = controller.attached if not controller.read_only else None
        first = [command_line("attach", agent)] if agent else []
        return cls(code, to_panes=True, first_lines=first)


class PromptInput:
    """Reads lines with a prompt-toolkit session and puts them on the console's queue.

    The main loop and :meth:`PlainView.ask` read that queue exactly as they read the
    stdin thread's on a pipe; None on the queue still means end of input.
    """

    def __init__(
        self,
        controller: ConsoleController,
        view: PlainView,
        lines: asyncio.Queue[str | None],
        *,
        on_interrupt: Callable[[], None],
    ) -> None:
        self.controller = controller
        self.view = view
        self.lines = lines
        self.on_interrupt = on_interrupt
        self.question: str | None = None
        self.palette = False
        """F1 opened the agent palette: the menu follows typing until the line is sent."""
        # Imported here: scripts on a pipe never pay for loading prompt-toolkit.
        from ateam.completion import ShellTab

        self.completer: CommandCompleter = completer(controller)
        self.tab: ShellTab = ShellTab(self.completer)
        """TAB as in a shell (and as in panes mode): extend, list, then step."""
        self.session = self._session()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def _session(self) -> PromptSession[str]:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.filters import Condition
        from prompt_toolkit.history import FileHistory, History, InMemoryHistory

        from ateam.completion import PromptToolkitCompleter

        class RedactedHistory(FileHistory):
            """Typed lines kept for the arrow keys, secrets masked: a file ateam writes."""

            def __init__(self, path: str, redact: Callable[[str], str]) -> None:
                super().__init__(path)
                self._redact = redact

            def store_string(self, string: str) -> None:
                super().store_string(self._redact(string))

        history: History
        try:
            folder = private_dir(ateam_home() / "console")
            history = RedactedHistory(str(folder / "history"), self.controller.redactor.redact)
        except OSError:
            history = InMemoryHistory()  # a read-only home must not stop the console
        return PromptSession(
            message=self._message,
            history=history,
            completer=PromptToolkitCompleter(
                self.completer, refresh=lambda: self.controller.refresh_agents(announce=False)
            ),
            # TAB asks for completions; only the F1 palette completes while typing.
            complete_while_typing=Condition(lambda: self.palette),
            key_bindings=self._bindings(),
        )

    def _message(self) -> str:
        if self.question is not None:
            return self.question
        agent = self.controller.attached
        if agent is None:
            return "> "
        return f"{agent} (read-only)> " if self.controller.read_only else f"{agent}> "

    def _bindings(self) -> KeyBindings:
        from prompt_toolkit.application import run_in_terminal
        from prompt_toolkit.document import Document
        from prompt_toolkit.filters import Condition
        from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

        from ateam.completion import columns

        bindings = KeyBindings()

        @bindings.add("tab", filter=~Condition(lambda: self.palette))
        def _tab(event: KeyPressEvent) -> None:
            # Bound here, over prompt-toolkit's own TAB (which opens a menu and cycles):
            # the same keys as panes mode and a shell.
            buffer = event.current_buffer
            done = self.tab.press(buffer.text, buffer.cursor_position)
            if done is None:
                event.app.output.bell()
                return
            buffer.document = Document(done.line, done.cursor)
            if done.candidates:
                listing = columns(done.candidates, event.app.output.get_size().columns)
                # Printed above the prompt, which is drawn again under it, as in a shell.
                run_in_terminal(lambda: print("\n".join(listing)))

        @bindings.add("f1")
        def _palette(event: KeyPressEvent) -> None:
            # Plain mode has no overlay, so the palette is the completion menu of
            # "/attach ": it lists every agent and narrows as the user types.
            buffer = event.app.current_buffer
            self.palette = True
            buffer.text = f"{command_line('attach')} "
            buffer.cursor_position = len(buffer.text)
            buffer.start_completion(select_first=False)

        @bindings.add("enter", filter=Condition(lambda: self.palette))
        def _pick(event: KeyPressEvent) -> None:
            # Enter attaches to the highlighted agent, else to the first that matches
            # what was typed. The match is computed here rather than taken from the
            # menu, which may still be loading when a fast typist presses Enter.
            buffer = event.current_buffer
            state = buffer.complete_state
            if state is None or state.current_completion is None:
                text, cursor = buffer.text, buffer.cursor_position
                found = self.completer.complete(text, cursor)
                # An empty word after a full id must not pull in a second agent.
                if found and (found[0].start < cursor or text.strip() == command_line("attach")):
                    buffer.document = Document(*found[0].apply(text, cursor))
            buffer.validate_and_handle()

        return bindings

    def ask(self, question: str | None) -> None:
        self.question = question
        self.session.app.invalidate()

    def start(self) -> None:
        self.view.ask_hook = self.ask
        self._wrap_editor()
        self._task = asyncio.create_task(self._read(), name="console:prompt")
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        # Without its input the console could only hang: say why, and leave.
        if not task.cancelled() and task.exception() is not None:
            self.view.error(f"console input failed: {task.exception()!r}; leaving")
            self.lines.put_nowait(None)

    def _wrap_editor(self) -> None:
        # $EDITOR needs the terminal to itself: the prompt steps aside while it runs.
        from prompt_toolkit.application import in_terminal

        edit = self.controller.edit_text

        async def edit_in_terminal(text: str, *, suffix: str) -> str | None:
            async with in_terminal():
                return await edit(text, suffix=suffix)

        self.controller.edit_text = edit_in_terminal

    async def _read(self) -> None:
        while not self._stopping:
            try:
                line = await self.session.prompt_async(
                    # The console's own SIGINT handler stays in place, and an error in a
                    # background task must not stop the prompt to wait for Enter.
                    handle_sigint=False,
                    set_exception_handler=False,
                )
            except KeyboardInterrupt:
                self.palette = False
                self.on_interrupt()
                continue
            except EOFError:
                self.lines.put_nowait(None)
                return
            self.palette = False
            self.lines.put_nowait(line)

    async def stop(self) -> None:
        """End the prompt (the console is leaving) and give the terminal back."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        app = self.session.app
        if app.is_running and app.future is not None and not app.future.done():
            app.exit(exception=EOFError)
        try:
            async with asyncio.timeout(2.0):
                await task
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        except Exception:  # already reported by _ended; the console is leaving anyway
            pass
        self.view.ask_hook = None


async def _quietly(coro: Any, view: PlainView) -> None:
    try:
        await coro
    except AteamError as exc:
        view.error(exc.one_line())
