"""The slash-command hints above the prompt: which commands what is typed could be, with
their arguments and help, as the user types; Tab, shift+Tab and the arrows walk them.

The prompt keeps focus while the hints are open (typing goes on narrowing them), so the keys
that walk arrive as a message from the prompt (`Prompt.Walk`); the walk itself, what was
typed before it and which command is picked, lives here, and each pick goes up as
`SlashHints.Picked` for the prompt to show."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static

from picochat.tui import slash

ROWS = 12  # commands shown at once


class SlashHints(Static):
    DEFAULT_CSS = """
    SlashHints { height: auto; max-height: 12; color: $text-muted; padding: 0 2;
                 display: none; }
    SlashHints.open { display: block; }
    """
    HELP = ("Tab completes a slash command; Tab again, or up/down, walks the commands it "
            "could be; Esc closes the list.")

    @dataclass
    class Picked(Message):
        """A command picked from the hints, as the prompt should now read."""
        text: str

    is_open: reactive[bool] = reactive(False, init=False)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._typed = ""                  # what the list is for
        self._index: int | None = None    # the command picked while walking
        self._picked: str | None = None   # the prompt text that pick put there

    def watch_is_open(self, is_open: bool) -> None:
        self.set_class(is_open, "open")

    def show_for(self, typed: str) -> None:
        """The commands `typed` could be; closed when it is no command (or has its argument).
        The prompt text a pick put there keeps the list as it was, with the pick marked."""
        if self._picked is not None and typed == self._picked:
            return
        self._typed, self._index, self._picked = typed, None, None
        if not slash.completions(typed):
            self.close()
            return
        self._draw()
        self.is_open = True

    def close(self) -> None:
        self._index = self._picked = None
        self.is_open = False

    def walk(self, step: int) -> None:
        """Tab (+1) first adds what every match shares (`/comp` → `/compact `); when that
        adds nothing (`/`, `/c`), Tab and down pick the next match, shift+Tab and up the
        one before, round the list."""
        matches = slash.completions(self._typed)
        if not self.is_open or not matches:
            return
        if self._index is None and step > 0:
            done = slash.complete(self._typed)
            if done is not None:
                self.post_message(self.Picked(done))  # the list follows the new text
                return
        if self._index is None:
            self._index = 0 if step > 0 else len(matches) - 1
        else:
            self._index = (self._index + step) % len(matches)
        c = matches[self._index]
        self._picked = f"/{c.name}" + (" " if c.args else "")
        self._draw()
        self.post_message(self.Picked(self._picked))

    def _draw(self) -> None:
        matches = slash.completions(self._typed)
        start = 0
        if len(matches) > ROWS:  # the pick stays in view
            start = min(max(0, (self._index or 0) - ROWS + 2), len(matches) - ROWS + 1)
        shown = matches[start:start + ROWS] if len(matches) <= ROWS else \
            matches[start:start + ROWS - 1]
        text = Text()
        for i, c in enumerate(shown, start):
            style = "reverse bold" if i == self._index else "bold"
            text.append(f"/{c.name} {c.args}".ljust(26), style=style)
            text.append(c.help + "\n", style="reverse" if i == self._index else "")
        if start + len(shown) < len(matches):
            text.append(f"… {len(matches) - start - len(shown)} more: keep typing, or Tab",
                        style="italic")
        text.rstrip()
        self.update(text)
