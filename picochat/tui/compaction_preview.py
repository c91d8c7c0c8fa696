"""The compaction preview (`/compact --preview`, and every automatic compaction when
`[context_compaction] preview = true`) and its summary editor.

The preview shows what the compaction folds, tokens before → after, the quality gate's verdict,
the facts it adds and drops, and the summary; Enter commits exactly that, `e` edits the summary,
Esc drops it. The editor puts an edit through the same gate (ctrl+s): a refused edit stays in
the editor with the gate's reason; a passing one goes back to the preview, to be committed.
Everything shown came from a model or the conversation: plain text (`literal`), never markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static, TextArea

from picochat.compaction.report import fact_changes, preview_rows
from picochat.tui.safe import clean, literal

if TYPE_CHECKING:
    from picochat.compaction.preview import CompactionPreview

FACT_LINES = 12  # the fact changes listed before "… and N more"
COMMIT_HINT = "enter commits · e edits the summary · esc drops"
REFUSED_HINT = "e edits the summary · esc drops"
EDITOR_HINT = ("ctrl+s checks it with the quality gate · ctrl+r starts from picochat's extract "
               "· esc cancels")


class PreviewScreen(ModalScreen["CompactionPreview | None"]):
    """Dismissed with the preview to commit (the one shown, or its edit), or None: dropped."""

    AUTO_FOCUS = "#pv-box"
    DEFAULT_CSS = """
    PreviewScreen { align: center middle; }
    PreviewScreen > #pv-box {
        width: 100; max-width: 96%; height: auto; max-height: 92%;
        border: round $primary; background: $surface; padding: 0 1;
        border-subtitle-color: $text-muted;
    }
    PreviewScreen #pv-facts { color: $text-muted; margin-top: 1; }
    PreviewScreen #pv-summary-title { text-style: bold; margin-top: 1; }
    PreviewScreen #pv-summary { margin-bottom: 1; }
    """
    BINDINGS = [
        Binding("enter", "commit", "Commit"),
        Binding("e", "edit", "Edit summary"),
        Binding("escape", "drop", "Drop", key_display="esc"),
    ]

    def __init__(self, preview: "CompactionPreview", title: str = "Compaction preview") -> None:
        super().__init__()
        self.preview = preview
        self.title_text = title

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="pv-box") as box:
            box.border_title = literal(f"{self.title_text} · nothing written yet")
            yield Static(id="pv-rows")
            yield Static(id="pv-facts")
            yield Static("Summary", id="pv-summary-title")
            yield Static(id="pv-summary")
        yield Footer()  # its own keys, over the chat's

    def on_mount(self) -> None:
        self.show(self.preview)

    def show(self, preview: "CompactionPreview") -> None:
        self.preview = preview
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        for label, value in preview_rows(preview):
            style = ("bold red" if preview.verdict else "green") if label == "Gate" else ""
            table.add_row(label, literal(value, style))
        self.query_one("#pv-rows", Static).update(table)
        changes = fact_changes(preview)
        shown = changes[:FACT_LINES]
        if len(changes) > FACT_LINES:
            shown.append(f"… and {len(changes) - FACT_LINES} more")
        facts = self.query_one("#pv-facts", Static)
        facts.update(literal("\n".join(shown)))
        facts.display = bool(shown)
        self.query_one("#pv-summary-title", Static).update(
            "Summary" + ("" if preview.committable else ", refused, as written")
            + (" (your edit)" if preview.edited else ""))
        self.query_one("#pv-summary", Static).update(literal(preview.summary))
        box = self.query_one("#pv-box", VerticalScroll)
        box.border_subtitle = literal(COMMIT_HINT if preview.committable else REFUSED_HINT)

    def action_commit(self) -> None:
        if self.preview.committable:
            self.dismiss(self.preview)
            return
        self.notify(literal("The gate refused this summary: e edits it, esc drops it"),  # type: ignore[arg-type]
                    severity="warning")

    def action_edit(self) -> None:
        if not self.preview.editable:
            self.notify(literal("This compaction has no summary to edit: the older turns "  # type: ignore[arg-type]
                                "stay word for word"), severity="warning")
            return

        def edited(preview: "CompactionPreview | None") -> None:
            if preview is not None:
                self.show(preview)

        self.app.push_screen(SummaryEditor(self.preview), edited)

    def action_drop(self) -> None:
        self.dismiss(None)


class SummaryEditor(ModalScreen["CompactionPreview | None"]):
    """The summary in an editor. ctrl+s puts it through the gate: dismissed with the passing
    preview, or kept open with the reason it was refused. Esc leaves the preview as it was."""

    AUTO_FOCUS = "#ed-text"
    DEFAULT_CSS = """
    SummaryEditor { align: center middle; }
    SummaryEditor > #ed-box {
        width: 100; max-width: 96%; height: 92%;
        border: round $primary; background: $surface; padding: 0 1;
        border-subtitle-color: $text-muted;
    }
    SummaryEditor #ed-help { color: $text-muted; }
    SummaryEditor #ed-text { height: 1fr; }
    SummaryEditor #ed-verdict { color: $text-muted; height: auto; }
    SummaryEditor #ed-verdict.refused { color: $error; text-style: bold; }
    """
    BINDINGS = [
        Binding("ctrl+s", "check", "Check and keep", key_display="ctrl+s", priority=True),
        Binding("ctrl+r", "extract", "Start from picochat's extract", key_display="ctrl+r",
                priority=True),
        Binding("escape", "cancel", "Cancel", key_display="esc"),
    ]

    def __init__(self, preview: "CompactionPreview") -> None:
        super().__init__()
        self.preview = preview

    def compose(self) -> ComposeResult:
        with Vertical(id="ed-box") as box:
            box.border_title = "Edit the summary"
            box.border_subtitle = EDITOR_HINT
            yield Static(Text("The model reads this in place of the older turns: the nine "
                              "headings, each with what matters. The exact facts are "
                              "picochat's: they are added under it, whatever it says."),
                         id="ed-help")
            yield TextArea(clean(self.preview.text), id="ed-text", soft_wrap=True,
                           show_line_numbers=False)
            verdict = Static(id="ed-verdict")
            if self.preview.verdict is not None:
                verdict.update(refusal(self.preview))
                verdict.add_class("refused")
            yield verdict
        yield Footer()  # its own keys, over the chat's

    def action_check(self) -> None:
        text = self.query_one("#ed-text", TextArea).text
        checked = self.preview.edit(text)
        if checked.committable:
            self.dismiss(checked)
            return
        verdict = self.query_one("#ed-verdict", Static)
        verdict.update(refusal(checked))
        verdict.add_class("refused")

    def action_extract(self) -> None:
        """Replace the text with picochat's extractive summary of the same turns."""
        self.query_one("#ed-text", TextArea).load_text(self.preview.extract())
        verdict = self.query_one("#ed-verdict", Static)
        verdict.update(literal("picochat's own extract of these turns (no model): edit it, "
                               "then ctrl+s"))
        verdict.remove_class("refused")

    def action_cancel(self) -> None:
        self.dismiss(None)


def refusal(preview: "CompactionPreview") -> Text:
    """"Refused: the reason. What to do." (the gate's own hints are about asking again)"""
    error = preview.verdict
    assert error is not None
    return literal(f"Refused: {error.message}. Fix it and press ctrl+s; ctrl+r starts from "
                   "picochat's own extract of these turns; esc goes back.")
