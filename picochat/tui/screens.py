"""Modal screens: the `/info` card, the help list of keys and commands, a pick list (/sessions,
/search) and a yes/no question. Titles, rows and options show text from outside picochat
(session names, search snippets) through `literal`: never markup, never an escape."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from picochat.tui.safe import literal


class CardScreen(ModalScreen[None]):
    AUTO_FOCUS = "*"  # the app's own points at its prompt
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
            table.add_row(literal(label), literal(value))
        with VerticalScroll() as box:
            box.border_title = literal(self.title_text)
            box.border_subtitle = "esc closes"
            yield Static(table, id="card")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


class PickScreen(ModalScreen["str | None"]):
    """Pick one of `choices` ((id, label) pairs); dismisses with the id, or None on Esc."""
    AUTO_FOCUS = "*"  # the app's own points at its prompt

    DEFAULT_CSS = """
    PickScreen { align: center middle; }
    PickScreen > OptionList {
        width: 90; max-width: 95%; height: auto; max-height: 80%;
        border: round $primary; background: $surface;
    }
    """
    BINDINGS = [Binding("escape", "cancel", "Close", key_display="esc")]

    def __init__(self, title: str, choices: list[tuple[str, str]]) -> None:
        super().__init__()
        self.title_text = title
        self.choices = choices

    def compose(self) -> ComposeResult:
        from textual.widgets import OptionList
        from textual.widgets.option_list import Option

        options = OptionList(*(Option(literal(label), id=key) for key, label in self.choices))
        options.border_title = literal(self.title_text)
        options.border_subtitle = "enter picks · esc closes"
        yield options

    def on_option_list_option_selected(self, event) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    AUTO_FOCUS = "*"  # the app's own points at its prompt
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Static {
        width: 70; max-width: 95%; height: auto; border: round $warning; background: $surface;
        padding: 1 2;
    }
    """
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Static(literal(f"{self.question}\n\ny: yes    n / esc: no"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
