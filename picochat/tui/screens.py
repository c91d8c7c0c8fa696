"""Modal screens: the `/info` card and the help list of keys and commands."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class CardScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    CardScreen { align: center middle; }
    CardScreen > VerticalScroll {
        width: 90; max-width: 95%; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 1 2;
    }
    """
    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close", key_display="esc")]

    def __init__(self, title: str, rows: list[tuple[str, str]]) -> None:
        super().__init__()
        self.title_text = title
        self.rows = rows

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        for label, value in self.rows:
            table.add_row(Text(label), Text(value))
        with VerticalScroll() as box:
            box.border_title = self.title_text
            box.border_subtitle = "esc closes"
            yield Static(table, id="card")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
