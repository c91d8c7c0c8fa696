"""A reasoning model's thinking on screen: a collapsible block above its answer.

While the model thinks, the block is open and shows the newest few lines, and its title counts
seconds and characters, so a long silence before the answer is explained. Once the answer
starts (or the turn ends) it collapses to one line, "thought for N s", which opens on a click or
enter to show all of it; c copies it. An answer's thinking is not saved: an answer read back
from the database has no block.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.text import Text
from textual.binding import Binding
from textual.timer import Timer
from textual.widgets import Collapsible, Static

from picochat.textsafe import StreamCleaner, clean
from picochat.tui.preview import preview
from picochat.tui.copyable import copy_shown

OPEN_ROWS = 6            # lines of thinking in view while it streams
OPEN_TAIL_CHARS = 4_000  # the most text wrapped to find them
REDRAW_S = 0.1           # the open block follows the stream at most 10 times a second


def newest_lines(text: str, width: int, rows: int = OPEN_ROWS,
                 console: Console | None = None) -> Text:
    """The last `rows` lines `text` takes when wrapped at `width` (only its tail is wrapped)."""
    tail = text[-OPEN_TAIL_CHARS:].strip("\n")
    lines = Text(clean(tail)).wrap(console or Console(width=width), max(1, width))
    shown = list(lines)[-rows:]
    return Text("\n").join(shown)


def title(seconds: float, chars: int, done: bool) -> str:
    size = f"{chars:,} characters"
    if done:
        return f"thought for {duration(seconds)} ({size})"
    return f"thinking… {seconds:.0f} s, {size}"


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 0.5 else "<1 s"


class ThinkingBlock(Collapsible):
    BINDINGS = [Binding("c", "copy", "Copy thinking", key_display="c")]
    DEFAULT_CSS = """
    ThinkingBlock {
        margin: 1 0 0 1;
        border: none;
        padding: 0;
        background: transparent;
    }
    ThinkingBlock CollapsibleTitle { color: $text-muted; text-style: italic; padding: 0 1 0 0; }
    ThinkingBlock Contents { padding: 0 0 0 2; }
    ThinkingBlock .thought { color: $text-muted; border-left: outer $foreground 20%; padding: 0 1; }
    """

    def __init__(self) -> None:
        self._thought = Static("", classes="thought")
        super().__init__(self._thought, title=title(0, 0, done=False), collapsed=False)
        self.parts: list[str] = []
        self.chars = 0
        self.done = False
        self._since = time.monotonic()
        self._seconds = 0.0
        self._cleaner = StreamCleaner()
        self._redraw: Timer | None = None
        self._clock: Timer | None = None

    def on_mount(self) -> None:
        if not self.done:
            self._clock = self.set_interval(1.0, self._tick)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add_text(self, fragment: str) -> None:
        fragment = self._cleaner.feed(fragment)
        if not fragment or self.done:
            return
        self.parts.append(fragment)
        self.chars += len(fragment)
        if self._redraw is None and self.is_mounted:
            self._redraw = self.set_timer(REDRAW_S, self._draw)

    def action_copy(self) -> None:
        copy_shown(self, self.text, "the thinking")

    def _tick(self) -> None:
        self.title = title(time.monotonic() - self._since, self.chars, done=False)

    def _draw(self) -> None:
        self._redraw = None
        width = self._thought.content_region.width or max(20, self.size.width - 6)
        self._thought.update(newest_lines(self.text, width, console=self.app.console))
        self._tick()

    def finish(self) -> None:
        """The answer started, or the turn ended: collapse to one line; all of it on opening."""
        if self.done:
            return
        self.done = True
        self._seconds = time.monotonic() - self._since
        for timer in (self._redraw, self._clock):
            if timer is not None:
                timer.stop()
        self._redraw = self._clock = None
        rest = self._cleaner.flush()
        if rest:
            self.parts.append(rest)
            self.chars += len(rest)
        self.title = title(self._seconds, self.chars, done=True)
        self._thought.update(Text(preview(self.text.strip("\n"))))
        self.collapsed = True
