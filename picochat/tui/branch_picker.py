"""The branch picker (ctrl+b, `/branches`): a session's branches, where each left the one
before it, how many turns it holds, when it was last written and how it began; Enter makes
the one highlighted current, Esc closes. First lines are the user's: shown as plain text."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from picochat.session import Branch
from picochat.tui.safe import literal
from picochat.tui.session_picker import first_line, when


def branch_label(branch: Branch) -> Text:
    out = Text("● " if branch.current else "  ", style="bold")
    out.append(f"branch {branch.id}", style="bold")
    out.append(f"  ·  {branch.where}  ·  {branch.size}  ·  {when(branch.last_at)}",
               style="dim")
    if branch.first:
        out.append("\n    ")
        out.append_text(literal(first_line(branch.first), "italic"))
    return out


class BranchPicker(ModalScreen["int | None"]):
    """Dismissed with the picked branch's number, or None."""

    AUTO_FOCUS = "#bp-list"
    DEFAULT_CSS = """
    BranchPicker { align: center middle; }
    BranchPicker > Vertical {
        width: 100; max-width: 96%; height: auto; max-height: 85%;
        border: round $primary; background: $surface; padding: 0 1;
        border-subtitle-color: $text-muted;
    }
    BranchPicker OptionList {
        height: auto; max-height: 30; border: none;
        text-wrap: nowrap; text-overflow: ellipsis;
    }
    BranchPicker #bp-note { color: $text-muted; margin-bottom: 1; }
    """
    BINDINGS = [Binding("escape", "cancel", "Close", key_display="esc")]

    def __init__(self, branches: list[Branch]) -> None:
        super().__init__()
        self.branches = branches

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Branches"
            box.border_subtitle = "↑↓ choose · enter switches · esc closes"
            yield Static("Each branch keeps its own context and summaries; the one you "
                         "switch to is what the model reads next.", id="bp-note")
            yield OptionList(*[Option(branch_label(b), id=str(b.id)) for b in self.branches],
                             id="bp-list")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        current = next((i for i, b in enumerate(self.branches) if b.current), 0)
        options.highlighted = current

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id or 0))

    def action_cancel(self) -> None:
        self.dismiss(None)
