"""PicochatApp: the chat screen over one SessionWorker.

Messages up, method calls down: the prompt posts `Submitted`, the app hands a message to the
`Conversation` (which owns the running turn and renders it) and a command to its handler in
`tui.commands`; the conversation says what changed, and the app tells the StatusBar and
CheckpointPanel. Every figure shown comes from the worker's `info()`, the value `/info` and
auto compaction use. The app reads and writes nothing itself: the worker and the
`SessionCatalog` do, off its event loop.

The app itself keeps the layout, themes, warm-up, the worker's lifecycle and session
switching, keys and the palette. It draws its first frame before the engine is imported: the
CLI's app (`PicochatApp.opening`) opens the store, the session and its model in a thread
right after that frame, and whatever the user does meanwhile waits for them (`opened`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, TypeVar

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, OptionList, TextArea
from textual.worker import Worker, WorkerState

from picochat.config import Config
from picochat.errors import PicochatError
from picochat.logs import Reporter, report_log_off_to, where_details
from picochat.tui import slash, status
from picochat.tui.chat import ChatView, EditRequested
from picochat.tui.conversation import Conversation, as_typed
from picochat.tui.copyable import PinRequested
from picochat.tui.hints import SlashHints
from picochat.tui.idle_gc import IdleCollector
from picochat.tui.keys import help_rows
from picochat.tui.panel import CheckpointPanel
from picochat.tui.prompt import Prompt, typing_target
from picochat.tui.safe import clean, literal
from picochat.tui.signals import QuitSignals
from picochat.tui.welcome import Welcome
from picochat.tui.themes import bundled_dir, install_themes, save_theme
from picochat.tui.status import StatusBar, shown_name

if TYPE_CHECKING:  # the engine: opened after the first frame, in a thread (`open_transcript`)
    from picochat.catalog import ChatStart, SessionCatalog
    from picochat.compaction.preview import CompactionPreview
    from picochat.first_screen import FirstLook, FirstScreen
    from picochat.messages import Session
    from picochat.models import ResolvedModel
    from picochat.paths import Paths
    from picochat.providers.base import Provider
    from picochat.session import SessionWorker
    from picochat.storage.store import Store


log = logging.getLogger("picochat.tui")
T = TypeVar("T")


class OneLine(Exception):
    """A PicochatError as Textual prints an error that ended the app: Textual renders
    anything with `__rich__` that way, instead of a traceback. Plain text, not markup."""

    def __init__(self, error: PicochatError) -> None:
        super().__init__(error.user_line())
        self.error = error

    def __rich__(self) -> Text:
        return literal(f"picochat: {self.error.user_line()}")


class KeysFooter(Footer):
    """Textual's footer, with its keys in the first frame. Textual's composes empty until the
    screen's first bindings refresh (after the focus moves), which put the keys in a later
    frame, behind the transcript's mounting (0.15-0.3 s later here); the app's keys are known
    from the start. A later refresh recomposes them only if they changed: Textual's footer
    recomposes at every refresh of the bindings, twice after the first frame, ~20 ms of the
    event loop's time while the session opens, for the same keys."""

    _drawn: tuple[object, ...] | None = None  # the keys composed last (`_keys`)

    def compose(self) -> ComposeResult:
        self._bindings_ready = True
        self._drawn = self._keys()
        return super().compose()

    def _keys(self) -> tuple[object, ...]:
        """What `compose` draws from: each shown binding as the footer shows it."""
        shown = tuple((b.key, b.key_display, b.description, b.action, b.group, enabled, tip)
                      for _, b, enabled, tip in self.screen.active_bindings.values() if b.show)
        return self.compact, self.show_command_palette, shown

    def bindings_changed(self, screen: Screen) -> None:
        if screen is self.screen and self._drawn is not None and self._keys() == self._drawn:
            return
        super().bindings_changed(screen)


PANEL_BESIDE_CHAT_FROM = 76  # columns
FULL_FOOTER_FROM = 100       # columns
DATABASE_GONE = ("The database file {path} was deleted or replaced while picochat ran: what "
                 "you send now would be saved where no one will look. Quit (ctrl+q) and start "
                 "picochat again; nothing is sent until then")
# A pause this long in the user's typing starts loading what the send will run on (the encoding
# and a turn's modules, 0.3 s, holding the GIL for 0.1 s of it): in a pause no key waits for it.
TYPING_PAUSE_S = 0.3
CONFIG_WAIT_SAID_S = 2.0     # a saved config file waiting longer than this says why
SHUTDOWN_WAIT_S = 1.0        # quitting waits this long at most for another picochat's lock
                             # (under signals.EXIT_WITHIN_S, so what it could not save is kept)


class PicochatApp(App[None]):
    TITLE = "picochat"
    AUTO_FOCUS = "#prompt"  # straight to the prompt: focusing the chat first restyled it all
    CSS = """
    #body { height: 1fr; }
    Screen.-narrow #body.-panel-open Conversation { display: none; }
    Screen.-narrow CheckpointPanel { width: 1fr; min-width: 0; max-width: 100%; border-left: none; }
    """
    # Below this width the panel does not fit beside a usable chat (34 + 40 columns): it takes
    # the whole width while open, and a message sent from the prompt brings the chat back.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (PANEL_BESIDE_CHAT_FROM, "-wide")]
    BINDINGS = [
        Binding("escape", "stop", "Stop", key_display="esc", show=True),
        Binding("escape", "close_hints", "Close hints", key_display="esc", show=True),
        # priority: acted on before the keys typed after them are handed to the focused widget
        Binding("f1", "help", "Help", key_display="F1", priority=True),
        Binding("f2", "checkpoints", "Checkpoints", key_display="F2", priority=True),
        Binding("f3", "info", "Info", key_display="F3", priority=True),
        Binding("alt+up", "select_messages", "Select", key_display="alt+↑"),
        # priority: the prompt (a TextArea) would take it as "delete to the end of the line"
        Binding("ctrl+k", "compact_now", "Compact now", key_display="ctrl+k", priority=True,
                show=False),
        Binding("ctrl+b", "branches", "Branches: list and switch", key_display="ctrl+b",
                priority=True,
                show=False),
        Binding("ctrl+q", "quit", "Quit", key_display="ctrl+q", priority=True),
    ]

    # set once the session is open (`_start`): nothing reads them before (`opened`)
    sessions: SessionCatalog
    session: Session
    worker: SessionWorker

    def __init__(self, store: Store, session: Session, model: ResolvedModel,
                 provider: Provider, config: Config, paths: Paths | None = None,
                 quit_on_signals: bool = False, first: FirstScreen | None = None) -> None:
        """An app on a session opened already (`first`: what the first screen shows, read
        beforehand; without it, the app reads it right after its first frame). The CLI uses
        `opening`, which opens all of it after the first frame."""
        from picochat.catalog import ChatStart

        self._setup(config, paths, quit_on_signals)
        self._read_counts()
        self._start(ChatStart(store, session, model, provider, first))

    @classmethod
    def opening(cls, open_chat: Callable[[], ChatStart], config: Config, paths: Paths,
                quit_on_signals: bool = False,
                look: Callable[[], FirstLook | None] | None = None) -> "PicochatApp":
        """An app that draws its screen first, then opens its database, session and model
        with `open_chat`, in a thread: the first frame waits for none of the engine's modules.
        `look` reads the session's newest messages with the store alone: they are drawn
        before `open_chat` loads the rest. What either raises ends the app: `open_error`, for
        the CLI to say."""
        app = cls.__new__(cls)
        app._setup(config, paths, quit_on_signals)
        app._open_chat, app._look = open_chat, look
        return app

    def _setup(self, config: Config, paths: Paths | None, quit_on_signals: bool) -> None:
        super().__init__()
        # SIGTERM, SIGHUP: the CLI's app, not a test's
        self.signals = QuitSignals(lambda code: self.exit(return_code=code)) \
            if quit_on_signals else None
        self.config = config
        self.paths = paths
        self.opened = False  # the session and its worker are open (`_start`)
        self._open_chat: Callable[[], ChatStart] | None = None
        self._look: Callable[[], FirstLook | None] | None = None
        self._drawn_early: FirstLook | None = None  # drawn from `look`, before the opening
        self.open_error: Exception | None = None  # opening failed: the CLI says it
        self._first: FirstScreen | None = None
        self._config_stamp = self._config_file_stamp()  # what /reload would read, as read
        self._config_waits_told = False  # a saved config file waits for a turn: said once
        self._config_seen_at: float | None = None  # when a save that waits was first seen
        self._counting = True   # no figures yet: the transcript, or the encoding, comes first
        self._loading_tokens = False
        self._preparing = False  # what a send runs on is loading, or loaded
        self._typed_chars = 0    # the prompt's length at its last change
        self._warned = False     # the compaction warning was given for this crossing
        self._typing_pause: Timer | None = None
        self._bar: StatusBar | None = None
        self._conversation: Conversation | None = None
        self.transcript_ready = asyncio.Event()  # the transcript is on screen
        self._gc = IdleCollector()
        self._theme_notes = self.load_themes()
        self.saved_theme = self.theme  # what the config file says now
        self.exit_note: str | None = None  # the CLI prints it once the screen is restored
        self._typed_at_exit: str | None = None  # the prompt's text when the quit began
        self.database_gone = False   # the database file was deleted or replaced meanwhile
        self._outside_pending = False  # another process wrote: shown once nothing runs here
        self._watching = False
        self._reloading = asyncio.Lock()
        self._log_reporter: Reporter | None = None  # whoever reported a log failure before

    def _read_counts(self) -> None:
        """Counts an earlier run kept: the figures need no encoding."""
        from picochat import token_counts

        if self.paths is not None:
            token_counts.read(self.paths.data_dir)

    def _start(self, start: ChatStart) -> None:
        """The session and its worker (not started)."""
        self.sessions = start.catalog()
        self.session = start.session
        self._first = start.first
        self.worker = self.sessions.worker(start.session, start.model, start.provider,
                                           self.config)
        if self._conversation is not None:
            self._conversation.worker = self.worker
        self.opened = True

    # --- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        self._bar = StatusBar()  # held: the 0.5 s tick must not walk the DOM to find it
        yield self._bar
        with Horizontal(id="body"):
            self._conversation = Conversation(self.transcript_ready, self, id="conversation")
            if self.opened:
                self._conversation.worker = self.worker
            yield self._conversation
            yield CheckpointPanel(id="panel")
        yield SlashHints(id="hints")
        yield Prompt(id="prompt")  # earlier prompts, for up, are read after the first frame
        yield KeysFooter()

    def on_resize(self, event: events.Resize) -> None:
        """Under FULL_FOOTER_FROM columns the footer drops its spacing and the palette item
        (ctrl+p still opens it, F1 lists it), so every key fits instead of the last being cut."""
        footer, narrow = self.query_one(Footer), event.size.width < FULL_FOOTER_FROM
        if footer.compact != narrow:
            footer.compact, footer.show_command_palette = narrow, not narrow
            footer.refresh(recompose=True)  # the palette item is composed, not reactive
        chat = self.query_one(ChatView)
        if (event.size.width < PANEL_BESIDE_CHAT_FROM and self.query_one(CheckpointPanel).is_open
                and self.focused is not None and chat in self.focused.ancestors_with_self):
            self.query_one(Prompt).focus()  # the chat is about to be hidden under the panel

    def on_mount(self) -> None:
        """The first frame shows the bar, the prompt and the keys at once; all else comes
        right after it (`open_transcript`): the worker's start (a read on the store's thread),
        the notices, the transcript, and the figures, from counts an earlier run kept (else
        once tiktoken's encoding has loaded in a thread, 0.3-0.8 s)."""
        if self.signals is not None:
            self.signals.on_loop()
        prompt = self.query_one(Prompt)
        def hints_open(is_open: bool) -> None:
            prompt.hints_open = is_open
            self.refresh_bindings()  # the footer's esc: "Close hints" while they show
        self.watch(self.query_one(SlashHints), "is_open", hints_open)
        body = self.query_one("#body")

        def panel_open(is_open: bool) -> None:
            body.set_class(is_open, "-panel-open")
        self.watch(self.query_one(CheckpointPanel), "is_open", panel_open)
        self.refresh_status()
        self.call_after_refresh(self.open_transcript)
        self.set_interval(0.5, self._tick)

    @work(group="open", exit_on_error=False)
    async def open_transcript(self) -> None:
        if not self.opened and not await self._open():
            return
        first, self._first = self._first, None
        self._gc.start()  # collection back on: start-up's objects were not garbage
        for note in self._theme_notes:
            self.notify(literal(note), severity="warning", timeout=10)
        # a log that cannot be written is a notice, never Python's traceback behind Textual
        self._log_reporter = report_log_off_to(self._log_off_notice)
        try:
            self._listen_to(self.worker)
            await self.worker.start()  # answers a killed picochat was writing are saved first
            for note in self.worker.recovered_notes():
                self.notify(literal(note), severity="warning", timeout=10)
            if self.worker.reads_files and not self.worker.file_access.on:
                self.notify(literal(self.worker.file_access.off_reason or ""), timeout=10)
            recovered = any(m.session_id == self.session.id for m in self.worker.recovered)
            early, self._drawn_early = self._drawn_early, None
            if (early is not None and first is not None and not recovered
                    and (early.newest, early.checkpoint) == (first.newest, first.checkpoint)):
                await self.refresh_panel()  # on screen as read, and nothing changed since
            else:  # `first` was read before the recovery wrote its answer: read again
                await self.reload(first=None if recovered else first)
                await self._next_frame()  # drawn before the figures and the warm-up compete
            self.query_one(Prompt).recall_earlier(
                first.prompts if first else await self.sessions.user_prompts())
            self.restore_unsent()
        except PicochatError as exc:  # a damaged database, found opening the screen: the
            self._handle_exception(exc)  # CLI's one line and exit 1, as from compose
        finally:
            self.transcript_ready.set()  # turns and commands typed meanwhile go on from here
            self.refresh_status()  # the figures, or "counting…" while the encoding loads
            # then litellm, in a thread: started earlier, its import held the GIL while the
            # transcript mounted (a turn sent meanwhile waits for it anyway)
            self.warm_up()

    async def _open(self) -> bool:
        """The database, the session and its model, opened in a thread while the screen
        takes keys (the engine's modules load with them, ~0.1 s). What fails there ends the
        app before anything was written; the CLI says it (`open_error`) with the exit status
        any command gives it. A quit meanwhile wins: the opening is left behind, never waited
        for (a database locked by another picochat can hold it for seconds)."""
        open_chat = self._open_chat
        assert open_chat is not None, "an app made by `opening`"

        def opened() -> ChatStart:  # the counts' file too: no read on the event loop
            start = open_chat()
            self._read_counts()
            return start

        try:
            if self._look is not None:
                seen = await in_daemon_thread(self._look)
                if self._exit:
                    return False
                if seen is not None:
                    await self._draw_early(seen)
            start = await in_daemon_thread(opened)
            if self._exit:  # quitting: no session to start, and nothing to say
                return False
            self._start(start)
        except Exception as exc:  # noqa: BLE001 - a bug as well: the CLI's "internal error"
            if not self._exit:
                self.open_error = exc
                self.exit(return_code=exc.exit_status if isinstance(exc, PicochatError) else 1)
            return False
        self.refresh_status()
        if self._typed_chars and not self._preparing:  # typed and paused while it opened
            self.prepare_to_send()
        return True

    async def _draw_early(self, first: FirstLook) -> None:
        """A session's newest messages, read with the store alone, drawn while the rest of
        the session opens. That rest goes on once they are on screen: its imports would hold
        up their frame. `open_transcript` draws them again only if the opening reads them
        otherwise (another picochat wrote meanwhile, or an answer was recovered)."""
        await self.conversation.show_first(first)
        self._drawn_early = first
        await self._next_frame()

    async def _next_frame(self) -> None:
        """Until what was just mounted is on screen."""
        drawn = asyncio.Event()
        self.call_after_refresh(drawn.set)
        await drawn.wait()

    def load_tokens(self) -> None:
        """Load in a thread what the figures need counted (a text no earlier run counted):
        the rank table first (10 ms, 5 MiB), which counts any short text; the whole encoding
        (~50 MiB) only if a text is too long for it. Else they load when the user starts
        typing (`prepare_to_send`). Never while the app sits idle on figures an earlier run
        counted."""
        from picochat import tokens

        if self._loading_tokens or tokens.loaded():
            return
        self._loading_tokens = True
        self._load_tokens()

    @work(group="tokens", thread=True, exit_on_error=False)
    def _load_tokens(self) -> None:
        from picochat import tokens

        try:
            if tokens.table_loaded():  # and still a text to count: a long one
                tokens.load()
            else:
                tokens.load_table()
        finally:
            self.call_from_thread(self._tokens_loaded)

    def _tokens_loaded(self) -> None:
        self._loading_tokens = False
        self.refresh_status()  # counted now; else the next step loads

    def prepare_to_send(self) -> None:
        """A message is coming (the user typed, then paused): in a thread, once, what its send
        runs on, a turn's modules and what counts the message (session.ready_for_turns: the
        rank table, or the whole encoding for a long message), so that Enter waits for
        neither. Started on a pause, not the first key: the imports hold the GIL in bursts,
        and a key typed meanwhile would wait. A message sent with no pause loads them on its
        way."""
        if self._preparing or not self.opened:  # opening: it loads them; then this runs
            return
        self._preparing = self._loading_tokens = True
        self._prepare_to_send(self._typed_chars)

    @work(group="tokens", thread=True, exit_on_error=False)
    def _prepare_to_send(self, message_chars: int) -> None:
        from picochat.session import ready_for_turns

        try:
            ready_for_turns(message_chars)
        finally:
            self.call_from_thread(self._tokens_loaded)

    @property
    def ready(self) -> bool:
        """The transcript is on screen and the figures are counted."""
        return self.transcript_ready.is_set() and not self._counting

    def load_themes(self) -> list[str]:
        folders = [bundled_dir()] + ([self.paths.user_themes_dir] if self.paths else [])
        return install_themes(self, folders, self.config.ui.theme)

    @property
    def theme_names(self) -> list[str]:
        return sorted(self.available_themes)

    def set_theme(self, name: str) -> str:
        """`/theme NAME`: applied and saved; what became of the saving, to end the line."""
        self.saved_theme = name  # saved here: watch_theme need not save it again
        self.theme = name
        if self.paths is None:
            return ""
        problem = save_theme(self.paths, name)
        self.config_loaded()  # our own write: not a change to tell the user about
        return f"; not saved ({problem})" if problem else f"; saved to {self.paths.config_file}"

    def watch_theme(self, name: str) -> None:
        """A theme picked anywhere (the palette's "Change theme" as well as /theme) is
        remembered in the config file, as /theme always did."""
        if getattr(self, "saved_theme", name) == name or self.paths is None:
            return  # loading the configured theme, or saved already
        self.saved_theme = name
        problem = save_theme(self.paths, name)
        self.config_loaded()  # our own write: not a change to tell the user about
        if problem:
            self.notify(literal(f"theme {name} not saved: {problem}"), severity="warning")

    @work(group="warm-up", exit_on_error=False)
    async def warm_up(self) -> None:
        """Import litellm in the background: the first frame never waits for it."""
        await self.worker.provider.warm_up()
        self._gc.freeze_when_idle()  # litellm's modules and the first screen: never garbage

    def _handle_exception(self, error: Exception) -> None:
        """A PicochatError that escapes the app (a damaged database found while building the
        screen) ends it with the CLI's one line, never Textual's traceback with locals."""
        super()._handle_exception(OneLine(error) if isinstance(error, PicochatError) else error)

    @property
    def signalled(self) -> int | None:
        """The quit signal that came, if one did (the CLI's exit status follows it)."""
        return self.signals.signalled if self.signals is not None else None

    def release_signals(self) -> None:
        if self.signals is not None:
            self.signals.release()

    def _log_off_notice(self, line: str) -> None:
        """The log stopped being written (any thread may find out: `notify` posts a message)."""
        self.notify(literal(line), severity="warning", timeout=10)

    async def on_unmount(self) -> None:
        from picochat import crashpoints, token_counts
        from picochat.unsent import Unsent, keep_at_quit

        crashpoints.reached("quitting")
        report_log_off_to(self._log_reporter)  # the screen is going: say it as before
        if self.paths is not None and self.opened:  # counted this run: the next start
            token_counts.write(self.paths.data_dir)  # needs no encoding
        self._gc.stop()
        unsaved = await self.worker.close(within_s=SHUTDOWN_WAIT_S) if self.opened else ()
        # messages sent before the session was open and shown never reached it: kept as typed
        waiting = self._conversation.waiting_to_send if self._conversation is not None else []
        typed = "\n\n".join(t for t in [*waiting, self._typed_at_exit or ""] if t.strip())
        if typed.strip() and not self.opened:  # no session to give it back to at the next
            self.exit_note = ("nothing was sent: the session had not opened; what you typed: "
                              + typed)  # start: the terminal keeps the words themselves
        elif typed.strip() and self.paths is not None:
            unsaved += (Unsent(self.session.id, "typed", typed, role="typed"),)
        if unsaved:
            self.exit_note = keep_at_quit(self.paths.data_dir if self.paths else None,
                                          unsaved)
        if self.signals is not None:
            self.signals.loop_ends()

    def exit(self, result: Any = None, return_code: int = 0, message: Any = None) -> None:
        """Every way out (ctrl+q, /quit, a quit signal) comes here: what the prompt holds
        then, messages put back there by the last open above all, is kept for the next."""
        if self._typed_at_exit is None:
            try:
                self._typed_at_exit = self.query_one(Prompt).text
            except Exception:  # noqa: BLE001 - not mounted yet, or any more
                self._typed_at_exit = ""
        super().exit(result, return_code, message)

    def restore_unsent(self) -> None:
        """Messages of this session kept at a quit that could not save them: back in the
        prompt, oldest first, ahead of anything typed, so Enter sends them again."""
        if self.paths is None:
            return
        from picochat.unsent import restored_note, take

        back = take(self.paths.data_dir, self.session.id)
        if not back:
            return
        prompt = self.query_one(Prompt)
        for message in reversed(back):
            prompt.put_ahead(as_typed(message.text), "\n\n")
        self.notify(literal(restored_note(back)), title="Not lost", timeout=10)

    # --- what is shown --------------------------------------------------------------------------

    def notify(self, message: str | Text, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """A `literal(...)` notice is shown as its plain text, never read as markup: Textual
        parses a notice's str, where a `[@click=...]` from a provider error became an action."""
        if isinstance(message, Text):
            message, markup = message.plain, False
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def copy_to_clipboard(self, text: str) -> None:
        """Every copy leaves through here (c on an item, /copy, Textual's own copy of
        selected text or of the prompt): the clipboard gets `text` as the screen shows it,
        never an escape sequence or invisible character that the screen dropped or named.
        An answer hiding `rm -rf` in a link's target must not paste it into a shell."""
        super().copy_to_clipboard(clean(text))

    @property
    def conversation(self) -> Conversation:
        """Held, not queried: the 0.5 s tick and a quit read it after the DOM may be gone."""
        assert self._conversation is not None, "composed in compose()"
        return self._conversation

    @property
    def chat(self) -> ChatView:
        return self.query_one(ChatView)

    @property
    def state(self) -> str:
        """What runs now (status.*), "" when nothing does: the conversation's."""
        return self._conversation.state if self._conversation is not None else ""

    def usage(self):
        return self.worker.info()

    def refresh_status(self) -> None:
        """The bar's figures, names and queue from the worker (values down; the bar lays
        itself out and ticks its own clock)."""
        bar = self._bar
        if bar is None or not bar.is_attached:  # not yet mounted, or the app shuts down
            return
        if not self.opened:
            bar.show_activity(status.OPENING, False, None)
            return
        if bar.activity == status.OPENING:
            bar.show_activity(self.state, False, None)
        bar.queued = self.worker.queued
        # the figures once the transcript is up, and only if counting them needs no wait for
        # tiktoken's encoding (else it loads in a thread, and this runs again)
        usage = self.worker.info_if_counted() if self.transcript_ready.is_set() else None
        self._counting = usage is None
        if usage is None:  # everything but the figures
            bar.session_name = shown_name(self.session)
            bar.set_model(self.worker.model)
            bar.used = None
            if self.transcript_ready.is_set():
                self.load_tokens()
        else:
            bar.set_usage(usage)
            self._warn_once(usage)

    def _warn_once(self, usage: Any) -> None:
        """Compaction coming (past the soft point, budget.SOFT_SHARE): one notice per crossing;
        back under it (a compaction, /clear), the next crossing says it again."""
        forecast = usage.forecast
        if forecast is None:
            self._warned = False
            return
        if self._warned:
            return
        self._warned = True
        log.info("compaction_warning session=%s in_turns=%s auto=%s", self.session.id,
                 forecast.in_turns, forecast.auto)
        self.notify(literal(f"{usage.warning.capitalize()}: ctrl+k compacts now, "
                            "/compact FOCUS steers what the summary keeps, /compact "
                            "--preview shows it before anything is written"),
                    title="Context", severity="warning", timeout=10)

    def _queue_changed(self) -> None:
        """The worker's queue grew or shrank: the bar shows the count (told, not polled)."""
        bar = self._bar
        if bar is not None and bar.is_attached:
            bar.queued = self.worker.queued

    def _tick(self) -> None:
        if not self.opened:
            return
        # not while the transcript is still being mounted either: that is start-up work too
        self._gc.tick(busy=self.worker.busy or bool(self.state)
                      or not self.transcript_ready.is_set())
        if not self._watching and self.transcript_ready.is_set():
            self._watching = True
            self.watch_outside()

    @work(group="outside", exit_on_error=False)
    async def watch_outside(self) -> None:
        """Another picochat (`ask`, `compact --undo`) wrote to the database: the transcript,
        the panel and the bar follow, once nothing runs here. The database file deleted or
        replaced: said once, and nothing more is sent (it would be saved where no one looks)."""
        try:
            replaced, wrote = await self.sessions.outside_changes()
            if replaced and not self.database_gone:
                self.database_gone = True
                self.conversation.sends_refused = True
                log.warning("database_replaced session=%s", self.session.id)
                self.notify(literal(DATABASE_GONE.format(path=self.sessions.path)),
                            title="Database gone", severity="error", timeout=3600)
            self._outside_pending = self._outside_pending or wrote
            quiet = (not self.worker.busy and not self.worker.queued and not self.state
                     and len(self.screen_stack) == 1)  # not under a question (ConfirmScreen)
            if self._outside_pending and not self.database_gone and quiet:
                self._outside_pending = False
                log.info("outside_write session=%s", self.session.id)
                self.refresh_status()  # the figures first: they read the store, not the screen
                await self.reload(from_elsewhere=True)
            await self._apply_saved_config(quiet)
        except PicochatError as exc:
            log.warning("outside_check_failed kind=%s", exc.kind)
        finally:
            self._watching = False

    # --- what the conversation tells (tui.conversation.Around) -----------------------------------

    def show_activity(self, activity: str, stoppable: bool, retry_in: float | None) -> None:
        if not self._on_screen:  # quitting: no bar or footer to tell
            return
        bar = self._bar
        if bar is not None and bar.is_attached:
            bar.show_activity(activity, stoppable, retry_in)
        self.refresh_bindings()  # the footer's Esc follows
        self.refresh_status()

    async def context_changed(self) -> None:
        if not self._on_screen:
            return
        await self.refresh_panel()
        self.refresh_status()

    def back_to_prompt(self, text: str) -> None:
        """As it was typed, ahead of anything typed since, so nothing is lost and Enter sends
        it again (never as a command)."""
        if self._on_screen:  # quitting: the worker keeps what was not sent
            self.query_one(Prompt).put_ahead(as_typed(text))

    def queue_changed(self, takeable: int) -> None:
        if self._on_screen:
            self.query_one(Prompt).takeable = takeable

    @property
    def _on_screen(self) -> bool:
        """The chat screen is up: a conversation's message that arrives while the app quits
        finds no bar, panel or prompt to tell."""
        return not self._exit and bool(self.screen_stack)

    async def reload(self, from_elsewhere: bool = False,
                     first: FirstScreen | None = None) -> None:
        """The transcript and the panel from the database, the source of truth
        (`from_elsewhere`: after another picochat wrote; `first`: read by the CLI)."""
        async with self._reloading:  # a refresh and a command's reload never interleave
            await self.conversation.reload(from_elsewhere, first)
        await self.refresh_panel()

    async def refresh_panel(self) -> None:
        """Only while the panel is open (opening it refreshes): the sparkline reads the whole
        log, which a closed panel must not cost every turn."""
        panel = self.query_one(CheckpointPanel)
        if not panel.is_open or not self.opened:  # opening: it refreshes once open
            return
        shown = await self.worker.panel()
        await panel.show(list(shown.checkpoints), shown.active_id, list(shown.series),
                         shown.floor_seq, list(shown.pins), shown.refused, list(shown.branches))

    async def context_moved(self) -> None:
        """The checkpoint in force changed: the conversation moves its divider and tells
        `context_changed`, which refreshes the panel and the figures (once)."""
        await self.conversation.context_moved()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A UI task that failed says so (and the log keeps its frames); the app goes on."""
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        if not self.is_running:
            return
        log.error("ui_task_failed name=%s kind=%s\n%s", event.worker.name,
                  type(error).__name__,
                  "".join(traceback.format_tb(error.__traceback__ if error else None)))
        self.conversation.set_activity("")
        self.notify(literal(f"internal error in {event.worker.name} ({type(error).__name__}); "
                            f"{where_details()}"), severity="error")

    # --- input ----------------------------------------------------------------------------------

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        text = event.text_area.text
        self.query_one(SlashHints).show_for(text)
        self._typed_chars = len(text)  # how long the coming message is, for prepare_to_send
        if text and not self._preparing:  # a message is coming: at the next pause
            if self._typing_pause is None:
                self._typing_pause = self.set_timer(TYPING_PAUSE_S, self.prepare_to_send)
            else:
                self._typing_pause.reset()

    def on_prompt_walk(self, event: Prompt.Walk) -> None:
        hints = self.query_one(SlashHints)
        if event.typed and not hints.is_open:  # the Tab came in the burst that typed it
            hints.show_for(event.typed)
        hints.walk(event.step)

    def on_slash_hints_picked(self, event: SlashHints.Picked) -> None:
        self.query_one(Prompt).put(event.text)

    def _config_file_stamp(self) -> tuple[int, int] | None:
        """The config file's modification time and size, or None (no file, or none used)."""
        paths = getattr(self, "paths", None)
        if paths is None:
            return None
        try:
            info = paths.config_file.stat()
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size

    def config_loaded(self) -> None:
        """The config file was read (or written by the app itself): it is the config in force."""
        self._config_stamp = self._config_file_stamp()
        self._config_waits_told = False

    async def _apply_saved_config(self, quiet: bool) -> None:
        """The config file saved since it was read (an editor in another pane) applies unasked,
        each change said, once nothing runs here and no window is open over the chat; a wait
        of more than CONFIG_WAIT_SAID_S is said once, with what it waits for."""
        if self._config_file_stamp() == self._config_stamp:
            self._config_seen_at = None
            return
        if not quiet:
            now = asyncio.get_running_loop().time()
            self._config_seen_at = self._config_seen_at or now
            if not self._config_waits_told and now - self._config_seen_at >= CONFIG_WAIT_SAID_S:
                self._config_waits_told = True
                until = ("the running answer ends" if self.worker.busy or self.worker.queued
                         or self.state else "this window closes")
                self.notify(literal(f"The config file changed: it applies once {until}"),
                            title="Config", timeout=10)
            return
        self._config_seen_at = None
        from picochat.tui.commands import reload_config

        log.info("config_saved session=%s", self.session.id)
        await reload_config(self, saved=True)

    async def on_prompt_submitted(self, event: Prompt.Submitted) -> None:
        text = event.text
        self.query_one(SlashHints).close()
        if text.split(maxsplit=1)[0].lower() != "/checkpoints":  # that one toggles the panel
            self._show_chat()  # where the answer, or the command's outcome, will be
        if slash.is_command(text):
            self.command(text)
            return
        if text.startswith("//"):
            text = text[1:]
        if event.rewind is not None:
            self.rewind_and_send(event.rewind, text)
            return
        self.conversation.run_turn(text)

    # --- branches --------------------------------------------------------------------------------

    def on_edit_requested(self, event: EditRequested) -> None:
        """e on an earlier message of the user's: its text in the prompt, to edit and send as
        a new branch from there (Esc gives back what was typed). On a transcript drawn while
        the session opens, once it has."""
        event.stop()
        if not self.transcript_ready.is_set():
            self._once_open(lambda: self.on_edit_requested(event))
            return
        if self.worker.busy or self.worker.queued:
            self.notify(literal("An answer is running: edit an earlier message once it ends "
                                "(esc stops it)"), severity="warning")
            return
        prompt = self.query_one(Prompt)
        prompt.begin_edit(event.seq, as_typed(event.text))
        prompt.focus()

    @work(group="turns", exit_on_error=False)
    async def rewind_and_send(self, seq: int, text: str) -> None:
        """The edited message sent: a new branch starts before message `seq` (the rows after it
        stay on the branch left), the transcript shows the new branch, and `text` is sent."""
        await self.transcript_ready.wait()
        try:
            done = await self.worker.rewind(seq)
        except PicochatError as exc:
            await self.chat.add_notice(f"Not sent: {exc.user_line()}. It is back in the prompt",
                                       "error")
            self.back_to_prompt(text)
            return
        self.session = done.session
        await self.reload()
        later = (f"{done.later} turn{'s' if done.later != 1 else ''} from there on stay"
                 if done.later else "nothing after it is lost: the branch")
        await self.chat.add_notice(
            f"Branch {done.session.branch} starts here, before message {seq}; {later} on "
            f"branch {done.left}, and ctrl+b switches back")
        await self.conversation.send(text)

    def action_branches(self) -> None:
        self.command("/branches")

    async def switch_branch(self, branch: int) -> None:
        """Another branch in use: the transcript, the panel and the bar show it."""
        try:
            session = await self.worker.switch_branch(branch)
        except PicochatError as exc:
            await self.chat.add_notice(exc.user_line(), "error")
            return
        self.session = session
        await self.reload()
        self.refresh_status()
        await self.chat.add_notice(f"On branch {branch}: the model reads this branch's "
                                   "context from the next message on; ctrl+b switches again")

    def _show_chat(self) -> None:
        """Where the panel hides the chat (a narrow terminal), close it."""
        if self.screen.has_class("-narrow") and self.query_one(CheckpointPanel).is_open:
            self.action_checkpoints()

    @work(group="commands", exit_on_error=False)
    async def command(self, text: str) -> None:
        """Off the message loop: a command queued behind a turn must not freeze the keys."""
        await self.transcript_ready.wait()
        await self.run_command(text)

    async def run_command(self, text: str) -> None:
        from picochat.tui import commands  # with the first command: not before the frame

        await commands.run(self, text)

    async def on_event(self, event: events.Event) -> None:
        """Typing or a paste where the focus is on the transcript or the panel goes to the
        prompt: the focus moves here, before the event is forwarded, so keys keep their order."""
        if isinstance(event, (events.Key, events.Paste)) and not event.is_forwarded:
            prompt = typing_target(self.screen, event)
            if prompt is not None:
                self.screen.set_focus(prompt)
        await super().on_event(event)

    def on_prompt_scroll(self, event: Prompt.Scroll) -> None:
        self.query_one(ChatView).page(event.where)

    async def on_prompt_take_back(self, event: Prompt.TakeBack) -> None:
        """Up in the empty prompt while messages are queued: the newest comes back to edit."""
        text = await self.conversation.take_back()
        if text is None:
            self.notify(literal("Nothing to take back: the queued messages have begun"))
            return
        self.query_one(Prompt).take_back(as_typed(text))

    # --- sessions ------------------------------------------------------------------------------

    def _listen_to(self, worker: SessionWorker) -> None:
        """What the app hears from a session's worker: its queue, and (with
        `[context_compaction] preview`) each automatic compaction, to approve first."""
        worker.on_queue_change(self._queue_changed)
        if self.config.context_compaction.preview:
            worker.reviewer = self._review

    async def _review(self, preview: "CompactionPreview") -> "CompactionPreview | None":
        from picochat.tui.commands import choose

        return await choose(self, preview, "Automatic compaction")

    async def open_session(self, session: Session,
                           opened: tuple[ResolvedModel, Provider] | None = None) -> None:
        """Switch the app to `session` (with its own model unless one is given, opened)."""
        if opened is not None:
            model, provider = opened
        else:
            from picochat.opening import open_model

            try:
                model, provider = open_model(self.config, session)
            except PicochatError as exc:
                await self.query_one(ChatView).add_notice(exc.user_line(), "error")
                return
        # the same session reopened (/reload, /model): the transcript on screen stays, with
        # the notices it holds, unless it is the welcome, which names the model and window
        same = session.id == self.session.id and not self.chat.query(Welcome)
        await self.worker.close()
        self.session = session
        self.worker = self.sessions.worker(session, model, provider, self.config)
        self.conversation.worker = self.worker
        self._listen_to(self.worker)
        await self.worker.start()
        await self.worker.opened()  # the next start reopens it, even after a kill
        self.warm_up()
        if same:
            await self.refresh_panel()
        else:
            await self.reload()
        self.restore_unsent()
        self.refresh_status()

    # --- actions (keys and the command palette) -------------------------------------------------

    def action_stop(self) -> None:
        """Esc: stops the running answer; else closes the slash-command hints."""
        if not self.conversation.stop():
            self.query_one(SlashHints).close()

    def action_close_hints(self) -> None:
        self.query_one(SlashHints).close()

    def action_help_quit(self) -> None:
        """ctrl+c: stops a running answer, as Esc does (the reflex of every terminal user);
        with none running, Textual's hint that ctrl+q quits."""
        if not self.conversation.stop():
            super().action_help_quit()

    def action_select_messages(self) -> None:
        """From the prompt to the newest message: up/down move, c copies, enter comes back."""
        self._show_chat()  # a selection in a hidden chat would move and copy unseen
        if not self.query_one(ChatView).select_last():
            self.notify(literal("Nothing to select yet"))

    def action_compact_now(self) -> None:
        """ctrl+k: /compact, as if typed (queued behind a running turn)."""
        self._show_chat()
        self.command("/compact")

    def action_info(self) -> None:
        if not self.transcript_ready.is_set():  # pressed while the session opens
            self._once_open(self.action_info)
            return
        from picochat.tui.screens import CardScreen

        self.push_screen(CardScreen("Context (/info)", self.usage().rows()))

    def action_checkpoints(self) -> None:
        panel = self.query_one(CheckpointPanel)
        if not panel.is_open:
            panel.is_open = True  # filled and focused when it says it opened
            return
        # the prompt takes focus now, before the list is hidden: a hidden focused widget
        # hands focus on to its neighbour (the chat), which took the Enter typed next
        self.screen.set_focus(self.query_one(Prompt))
        panel.is_open = False

    async def on_pin_requested(self, event: PinRequested) -> None:
        """alt+p on a selected message: pinned as /pin would, said in the transcript (on a
        transcript drawn while the session opens, once it has)."""
        event.stop()  # queued behind a running turn: never awaited here, or keys would wait
        from picochat.tui import commands

        if not self.transcript_ready.is_set():
            self._once_open(lambda: commands.pin(self, seq=event.seq))
            return
        self.run_worker(commands.pin(self, seq=event.seq), group="commands",
                        exit_on_error=False)

    async def on_checkpoint_panel_opened(self, event: CheckpointPanel.Opened) -> None:
        if not self.transcript_ready.is_set():  # opened while the session opens
            self._once_open(self._fill_panel)
            return
        await self._fill_panel()

    async def _fill_panel(self) -> None:
        panel = self.query_one(CheckpointPanel)
        if not panel.is_open:  # closed again meanwhile
            return
        await self.refresh_panel()
        # the list of checkpoints, ready to pick; the details at the top stay in view
        panel.query_one(OptionList).focus(scroll_visible=False)

    def _once_open(self, then: Callable[[], Awaitable[None] | None]) -> None:
        """`then`, once the session is open and on screen (a key pressed in the first frame's
        moment: it waits, as a message sent then does)."""
        async def wait() -> None:
            await self.transcript_ready.wait()
            if self.opened and (later := then()) is not None:
                await later
        self.run_worker(wait(), group="open", exit_on_error=False)

    def action_slash(self, name: str) -> None:
        """A key that runs a slash command (the panel's u runs /uncompact)."""
        self.command(f"/{name}")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Esc stops an answer while one runs, else closes the slash-command hints while they
        are open; the footer offers whichever it does (False hides a binding), never "Stop"
        with nothing running."""
        if action in ("stop", "close_hints"):
            running = bool(self._conversation is not None and self._conversation.running)
            return running if action == "stop" else (
                not running and self.query_one(SlashHints).is_open)
        if action == "compact_now":  # not over a preview, its editor or a question
            return len(self.screen_stack) == 1
        return True

    def action_help(self) -> None:
        from picochat.tui.screens import CardScreen

        self.push_screen(CardScreen("Keys and commands", help_rows(self.BINDINGS)))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for c in slash.COMMANDS:
            yield SystemCommand(f"/{c.name}", c.help, _runner(self, c))


def _runner(app: PicochatApp, command: slash.Command):
    """From the palette: a command that needs its argument (NAME, TEXT) is put in the prompt
    to finish typing; the others run at once."""
    async def run() -> None:
        if command.args and not command.args.startswith("["):
            prompt = app.query_one(Prompt)
            prompt.put(f"/{command.name} ")
            prompt.focus()
            return
        if not app.transcript_ready.is_set():  # the session is opening: the command waits
            app.command(f"/{command.name}")   # for it off the message queue, as typed ones do
            return
        await app.run_command(f"/{command.name}")
    return run


async def in_daemon_thread(fn: Callable[[], T]) -> T:
    """`fn()` in a daemon thread: unlike `asyncio.to_thread`, which `asyncio.run` joins at
    the end, an app that quits meanwhile ends without waiting for it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            result, error = fn(), None
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop has closed: the app quit, and nobody awaits it
            pass

    threading.Thread(target=run, name="picochat-open", daemon=True).start()
    return await done
