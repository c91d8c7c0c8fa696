"""`/context`: where the model's window goes, as one stacked bar and a table of its parts
(the system prompt, tool schemas, pins, summary, exact facts, recent messages, queued messages,
the answer's reserve and the free room). The figures are `ContextMap`'s, the budget's own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from picochat.tui.safe import literal

if TYPE_CHECKING:
    from picochat.context_map import ContextMap

# (the bar's character, its style) per part: readable on the dark, light and high-contrast
# themes, and told apart without colour by the reserve's and the free room's own characters
STYLES = {
    "system": ("█", "#5f87d7"),
    "tools": ("█", "#af5fd7"),
    "pins": ("█", "#d7af00"),
    "summary": ("█", "#00afaf"),
    "facts": ("█", "#5faf5f"),
    "recent": ("█", "#a8a8a8"),
    "queued": ("█", "#d7875f"),
    "counted": ("█", "#d75f5f"),
    "reserve": ("▓", "#875f5f"),
    "free": ("░", "#6c6c6c"),
}
BAR_WIDTH = 94  # the box's width, until it is laid out


def bar(context: "ContextMap", width: int = BAR_WIDTH) -> Text:
    """The stacked bar: each part's share of the window, in order."""
    out = Text()
    for key, cells in context.cells(width):
        char, style = STYLES.get(key, ("█", ""))
        out.append(char * cells, style=style)
    return out


def table(context: "ContextMap") -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column()                 # the swatch
    grid.add_column(style="bold")     # the part
    grid.add_column(justify="right")  # tokens and share
    grid.add_column(style="dim")      # what it is
    for part, (label, figures, note) in zip(context.parts, context.rows()):
        char, style = STYLES.get(part.key, ("█", ""))
        grid.add_row(Text(char * 2, style=style), literal(label), literal(figures),
                     literal(note))
    return grid


class ContextScreen(ModalScreen[None]):
    AUTO_FOCUS = "*"
    DEFAULT_CSS = """
    ContextScreen { align: center middle; }
    ContextScreen > VerticalScroll {
        width: 100; max-width: 96%; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 1 2;
        border-subtitle-color: $text-muted;
    }
    ContextScreen #ctx-bar { margin-bottom: 1; }
    """
    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close", key_display="esc")]

    def __init__(self, context: "ContextMap", title: str) -> None:
        super().__init__()
        self.context = context
        self.title_text = title

    def compose(self) -> ComposeResult:
        with VerticalScroll() as box:
            box.border_title = literal(self.title_text)
            box.border_subtitle = "esc closes"
            yield Static(id="ctx-bar")
            yield Static(table(self.context), id="ctx-table")

    def on_mount(self) -> None:
        self._draw()

    def on_resize(self) -> None:
        self.call_after_refresh(self._draw)  # the box's width is known once laid out

    def _draw(self) -> None:
        found = self.query("#ctx-bar")
        if not found:  # closed before its width was known
            return
        shown = found.first(Static)
        width = shown.content_region.width or BAR_WIDTH
        shown.update(bar(self.context, max(10, width)))

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
