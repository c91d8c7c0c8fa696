"""The prompt: multi-line, Enter sends, ctrl+j adds a newline, up/down recall earlier prompts;
up in an empty prompt while messages wait in the queue takes the newest back to edit."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from picochat.tui.safe import clean, literal
from picochat.tui.slash import completions


class Prompt(TextArea):
    DEFAULT_CSS = """
    Prompt {
        height: auto;
        min-height: 3;
        max-height: 10;
        border: round $primary 60%;
        padding: 0 1;
    }
    Prompt:focus { border: round $primary; }
    """
    HELP = ("Enter sends. ctrl+j adds a newline. Up/down on the first/last line recall "
            "prompts; while messages are queued, up in the empty prompt takes the newest back "
            "to edit (again: the one before it). Tab completes a slash command; Tab or up/down "
            "then walk the list. PageUp/PageDown scroll the transcript a page, ctrl+home and "
            "ctrl+end to its start and its newest message.")
    # alt+enter only where the terminal reports it as such (kitty's protocol); most send it as
    # ESC and Enter, which arrives as a plain enter: the help names ctrl+j
    NEWLINE_KEYS = ("ctrl+j", "shift+enter", "alt+enter")

    @dataclass
    class Submitted(Message):
        text: str
        rewind: int | None = None  # sent in place of this earlier message: a new branch

    EDITING = "editing message {seq}: enter sends it as a new branch from there · esc cancels"

    @dataclass
    class Walk(Message):
        """A key that walks the slash-command hints (they own the walk): +1 next, -1 back.
        `typed`: the prompt's text when the key came, for a Tab typed in the same burst as
        the command's first letters, before the hints had opened for them."""
        step: int
        typed: str = ""

    # while the hints show: Tab completes, then walks with the arrows; up/down recall earlier
    # prompts only when no hints show (or a recall is under way)
    WALK_KEYS = {"tab": 1, "down": 1, "shift+tab": -1, "up": -1}

    class TakeBack(Message):
        """Up in the empty prompt while `takeable`: the app takes the newest queued message
        back (its turn cancelled, it leaves the transcript) and calls `take_back`."""

    @dataclass
    class Scroll(Message):
        """A key that scrolls the transcript from the prompt (the prompt is a few lines: a
        page of it is not what PageUp means here): -1/+1 a page, "start" or "end"."""
        where: int | str

    SCROLL_KEYS: dict[str, int | str] = {"pageup": -1, "pagedown": 1, "shift+pageup": -1,
                                         "shift+pagedown": 1, "ctrl+home": "start",
                                         "ctrl+end": "end", "shift+home": "start",
                                         "shift+end": "end"}

    def __init__(self, prompts: list[str] | None = None, **kwargs) -> None:
        """`prompts`: earlier prompts, oldest first (`SessionCatalog.user_prompts`); up starts from
        the last. A prompt sent twice in a row is recalled once, as `remember` keeps it."""
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus",
                         **kwargs)
        self.prompts: list[str] = []
        self._recall: int | None = None   # index into history while recalling
        for text in prompts or ():
            self.remember(text)
        self._draft = ""
        self.hints_open = False  # set by the app: the slash-command hints show above
        self.takeable = 0       # queued messages that can still be taken back (the app sets it)
        self._taking = False    # the text holds messages taken back from the queue
        self.editing: int | None = None  # the earlier message of the user's being edited
        self._before_edit = ""  # what was typed when the edit began: back on esc

    async def _on_key(self, event: events.Key) -> None:
        # Handled here, not by a binding: a binding runs after the key bubbles, so text typed
        # right after it (a paste-fast burst) would land before the newline.
        if event.key in self.NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        where = self.SCROLL_KEYS.get(event.key)
        if where is not None:
            event.stop()
            event.prevent_default()
            self.post_message(self.Scroll(where))
            return
        step = self.WALK_KEYS.get(event.key)
        completing = event.key in ("tab", "shift+tab") and bool(completions(self.text))
        if step is not None and (self.hints_open or completing) and self._recall is None:
            event.stop()
            event.prevent_default()
            self.post_message(self.Walk(step, self.text))
            return
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text
            if text.strip():
                self.remember(text)
                rewind = self.editing
                self.end_edit()
                self.clear()
                self._taking = False
                self.post_message(self.Submitted(text, rewind))
            return
        if event.key == "escape" and self.editing is not None:
            event.stop()
            event.prevent_default()
            self.put(self.end_edit())
            return
        if (event.key == "up" and self.takeable and self.cursor_at_first_line
                and (self._taking or not self.text.strip())):
            event.stop()
            event.prevent_default()
            self.post_message(self.TakeBack())
            return
        if event.key == "up" and self.cursor_at_first_line and self.prompts:
            event.stop()
            event.prevent_default()
            self._step(-1)
            return
        if event.key == "down" and self.cursor_at_last_line and self._recall is not None:
            event.stop()
            event.prevent_default()
            self._step(1)
            return
        await super()._on_key(event)

    def put(self, text: str) -> None:
        """`text` in place of what was typed (a command picked in the hints, one from the
        palette), the cursor after it."""
        self.load_text(text)
        self.move_cursor(self.document.end)

    def begin_edit(self, seq: int, text: str) -> None:
        """An earlier message of the user's to edit (e on it): its text in place of what was
        typed (kept, and back on esc); sending it starts a new branch there."""
        if self.editing is None:
            self._before_edit = self.text
        self.editing = seq
        self.border_title = literal(self.EDITING.format(seq=seq))
        self.put(text)
        self._recall = None

    def end_edit(self) -> str:
        """No edit under way any more; what was typed before it began."""
        before, self._before_edit = self._before_edit, ""
        self.editing = None
        self.border_title = ""
        return before

    def put_ahead(self, text: str, between: str = "\n") -> None:
        """`text` ahead of anything typed since (a message that went back), so nothing
        typed is lost; the cursor at the end."""
        typed = self.text
        self.put(f"{text}{between}{typed}" if typed.strip() else text)

    def take_back(self, text: str) -> None:
        """A queued message taken back: in the prompt, the cursor at its end. Each further
        up takes back the one queued before it and puts it in front, a blank line between:
        the prompt then reads as the messages were written and would have been sent, and
        Enter sends them as one message; nothing taken back is ever dropped or overwritten."""
        self.put_ahead(text, "\n\n")
        self._recall = None
        self._taking = True

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        if not self.text.strip():  # emptied: what comes next is a new message
            self._taking = False

    def recall_earlier(self, prompts: list[str]) -> None:
        """Earlier prompts read after the first frame (`SessionCatalog.user_prompts`): they go
        before any sent since."""
        sent, self.prompts = self.prompts, []
        for text in [*prompts, *sent]:
            self.remember(text)

    def remember(self, text: str) -> None:
        if not self.prompts or self.prompts[-1] != text:
            self.prompts.append(text)
        self._recall = None

    def _step(self, delta: int) -> None:
        self._taking = False
        if self._recall is None:
            self._draft = self.text
            index = len(self.prompts) - 1
        else:
            index = self._recall + delta
        if index >= len(self.prompts):
            self._recall = None
            self.load_text(self._draft)
        else:
            self._recall = max(0, index)
            # an earlier prompt may come from any client (`ask` reads a pipe): an editable
            # field takes no Text, so it gets the cleaned string and never an escape
            self.load_text(clean(self.prompts[self._recall]))
        self.move_cursor(self.document.end)


TAKES_NO_TEXT = "takes-no-text"
"""The class of a view that takes no text (the transcript, the panel): typing there goes to
the prompt (`typing_target`)."""


def typing_target(screen, event: events.Key | events.Paste) -> "Prompt | None":
    """The prompt, when `event` (a key as it reaches the app, or a paste) lands where focus is
    on a view that takes no text and means nothing there: a printable key no binding takes,
    or a paste. The app moves the focus to the prompt before it forwards the event, in its own
    task, where keys come in order: a view's task moving it instead let the keys typed next
    overtake the one that moved it ("seocnd", or a message sent without its last letter, the
    letter left in the prompt)."""
    focused = screen.focused
    if focused is None or isinstance(focused, Prompt):
        return None
    if not any(node.has_class(TAKES_NO_TEXT) for node in focused.ancestors_with_self):
        return None
    if isinstance(event, events.Key) and not (
            event.is_printable and event.character
            and event.key not in screen.active_bindings):
        return None
    prompts = screen.query(Prompt)
    return prompts.first() if prompts else None


def forward_typing(node, event: events.Key) -> None:
    """A key that reached a view that takes no text after the focus had moved to the prompt
    (Enter on a selected message, then typing fast) follows it there, Enter included; the app
    sends typing to the prompt first (`typing_target`), so nothing else comes here."""
    screen = node.screen
    prompts = screen.query(Prompt)
    if prompts and screen.focused is prompts.first():
        event.stop()
        event.prevent_default()
        prompts.first().post_message(events.Key(event.key, event.character))
