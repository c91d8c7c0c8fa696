"""The checkpoint panel: the summaries written so far (the list first, ready to pick), what
the one picked covers and saved, how the context grew and dropped turn by turn, and the
summary itself. Said in the user's words: summaries are numbered from the first, ranges are
message numbers; a checkpoint's id shows only in its details, when opened."""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING

from textual import events
from textual.message import Message
from textual.reactive import reactive
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Collapsible, Label, OptionList, Static
from textual.widgets.option_list import Option

from picochat.tui.answer import ProseBlock
from picochat.tui.context_chart import ContextChart
from picochat.tui.markdown import Block
from picochat.tui.prompt import TAKES_NO_TEXT, forward_typing
from picochat.tui.safe import clean, literal

if TYPE_CHECKING:  # the panel's data comes with the figures, after the first frame
    from picochat.context_usage import RefusedSummary
    from picochat.messages import Checkpoint

UNDO_KEY = "ctrl+z"  # not a letter: a letter typed after F2 is the start of a message


def use_line(cp: Checkpoint, active: Checkpoint | None, by_id: dict[str, Checkpoint],
             numbers: dict[str, int]) -> str:
    """Whether the model reads `cp` now, and if not, why not."""
    if active is None:
        return "Not in use: undone, or a /clear came after it"
    if cp.id == active.id:
        return f"In use · messages {cp.first_retained_seq} onward are sent as they are"
    parent = by_id.get(active.parent_checkpoint_id or "")
    while parent is not None:
        if parent.id == cp.id:
            return f"Not in use: Summary {numbers[active.id]}, in use, includes it"
        parent = by_id.get(parent.parent_checkpoint_id or "")
    return "Not in use: undone, or a /clear came after it"


def checkpoint_lines(cp: Checkpoint, number: int, use: str, cleared_at: int = 0) -> str:
    from picochat.compaction.report import DEGRADED_NOTE, POINTERS_NOTE, headline
    from picochat.ledger import facts_line  # the ledger loads when a summary is shown

    created = dt.datetime.fromtimestamp(cp.created_at / 1000, dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    lines = [headline(cp, number, cleared_at), use,
             f"context {cp.tokens_before:,} → {cp.tokens_after:,} tokens"]
    if cp.degraded:
        lines.append(DEGRADED_NOTE)
    elif cp.pointers:
        lines.append(POINTERS_NOTE)
    lines += [facts_line(cp.ledger), f"made {created}"]
    return "\n".join(lines)


def summary_source(cp: Checkpoint) -> str:
    """The Markdown the panel renders for a checkpoint's text. Tier one's turns, kept word for
    word, go in a fence: as Markdown their lines would run together into one paragraph, and
    what they hold (headings, tables) would be rendered as if it were the summary's."""
    from picochat.ledger import FACTS_HEADING

    text = clean(cp.summary)
    if not cp.pointers:
        return text
    facts = f"\n\n## {FACTS_HEADING}\n"
    words, sep, ledger = text.rpartition(facts)
    if not sep:
        words, ledger = text, ""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", words)), default=0))
    return f"{fence}text\n{words}\n{fence}" + (f"{facts}{ledger}" if sep else "")


def undo_question(cp: Checkpoint, number: int, parent: Checkpoint | None,
                  parent_number: int | None, cleared_at: int) -> str:
    """What undoing the summary in use changes, for the confirm dialog."""
    from picochat.compaction.report import covered

    if parent is not None:
        after = (f"Summary {parent_number} and messages {parent.first_retained_seq} onward "
                 "as they are")
    else:
        after = (f"messages {cleared_at + 1} onward as they are, with no summary"
                 if cleared_at else "the whole conversation as it is, with no summary")
    return (f"Undo Summary {number} ({cp.trigger_reason}, covers {covered(cp, cleared_at)})?\n"
            f"The model will read {after}.\n"
            "Nothing is deleted: /compact can summarize these messages again.")


class CheckpointPanel(VerticalScroll):
    DEFAULT_CLASSES = TAKES_NO_TEXT  # typing here goes to the prompt
    DEFAULT_CSS = """
    CheckpointPanel {
        width: 42%; min-width: 34; max-width: 72; display: none;
        border-left: solid $secondary; padding: 0 1; background: $surface;
        scrollbar-size-vertical: 1;
    }
    CheckpointPanel.open { display: block; }
    CheckpointPanel .title { text-style: bold; color: $secondary; margin: 1 0 0 0; }
    CheckpointPanel .first { margin: 0; }
    CheckpointPanel OptionList { height: auto; max-height: 8; padding: 0; border: none; }
    CheckpointPanel OptionList:focus { border: none; }
    CheckpointPanel #cp-hint { color: $text-muted; }
    CheckpointPanel #cp-refused-title { color: $text-warning; }
    CheckpointPanel #cp-meta { margin: 1 0 0 0; }
    CheckpointPanel Collapsible { padding: 0; border: none; background: $surface; }
    CheckpointPanel Collapsible Contents { padding: 0 0 0 2; }
    """
    HELP = ("F2 or /checkpoints toggles this panel; pick a summary to read it; "
            "ctrl+z undoes the newest compaction, after asking.")
    BINDINGS = [Binding(UNDO_KEY, "undo", "Undo summary", key_display="^z")]

    class Opened(Message):
        """The panel was opened: its owner fills it (`show`) and hands it the focus."""

    is_open: reactive[bool] = reactive(False, init=False)
    # the summary whose details and text are shown (None: what the model reads with none)
    reading: reactive[str | None] = reactive(None, init=False, always_update=True)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.ordered: list[Checkpoint] = []           # newest first
        self.checkpoints: dict[str, Checkpoint] = {}
        self.numbers: dict[str, int] = {}
        self.active_id: str | None = None
        self.cleared_at = 0

    def watch_is_open(self, is_open: bool) -> None:
        self.set_class(is_open, "open")
        if is_open:
            self.post_message(self.Opened())

    async def watch_reading(self, checkpoint_id: str | None) -> None:
        await self.read(self.checkpoints.get(checkpoint_id or ""))

    def compose(self) -> ComposeResult:
        return iter(())  # built when first opened: the first frame does not wait for it

    def _parts(self) -> ComposeResult:
        yield Label("Summaries", classes="title first")
        yield OptionList(id="cp-list")
        yield Static("", id="cp-hint")
        yield Label("Last summary refused", classes="title", id="cp-refused-title")
        yield Static("", id="cp-refused")
        yield Collapsible(Static("", id="cp-refused-text"), title="What the model wrote",
                          id="cp-refused-details")
        yield Static("", id="cp-meta")
        yield Collapsible(Static("", id="cp-ids"), title="Details", id="cp-details")
        yield Label("Pinned", classes="title")
        yield Static("", id="cp-pins")
        yield Label("Branches", classes="title", id="cp-branches-title")
        yield Static("", id="cp-branches")
        yield Label("Context per turn (tokens)", classes="title")
        yield ContextChart(id="cp-chart")
        yield Static("", classes="title", id="cp-summary-title")
        yield ProseBlock(Block("text", ""), id="cp-summary")

    async def show(self, checkpoints: list[Checkpoint], active_id: str | None,
                   series: list[int], cleared_at: int = 0,
                   pins: list[str] | None = None, refused: RefusedSummary | None = None,
                   branches: list[str] | None = None) -> None:
        from picochat.compaction.report import covered, numbers  # with the panel's first data

        if not self.children:
            await self.mount_all(list(self._parts()))
        self.show_refused(refused)
        for part in ("#cp-branches-title", "#cp-branches"):  # once the session has two
            self.query_one(part).display = bool(branches)
        self.query_one("#cp-branches", Static).update(literal(
            "\n".join(branches or []) + "\nctrl+b switches; e on a message of yours starts one"))
        self.ordered = list(checkpoints)
        self.checkpoints = {c.id: c for c in checkpoints}
        self.numbers = numbers(self.ordered)
        self.active_id = active_id
        self.cleared_at = cleared_at
        self.refresh_bindings()
        self.query_one("#cp-chart", ContextChart).show(series)
        self.query_one("#cp-pins", Static).update(literal("\n".join(pins or ["None."])))
        options = self.query_one("#cp-list", OptionList)
        options.clear_options()
        for cp in checkpoints:
            mark = "● " if cp.id == active_id else "  "
            options.add_option(Option(literal(f"{mark}Summary {self.numbers[cp.id]} · "
                                              f"{covered(cp, cleared_at)}"), cp.id))
        if checkpoints:  # the cursor starts on the one in use (the newest if none is)
            ids = [cp.id for cp in checkpoints]
            options.highlighted = ids.index(active_id) if active_id in ids else 0
        self.query_one("#cp-hint", Static).update(literal(
            "None yet: one is written when the context nears the window, or by /compact."
            if not checkpoints else "● in use · ctrl+z undoes it · enter reads one"
            if active_id else "none in use · enter reads one"))
        self.reading = active_id

    def show_refused(self, refused: RefusedSummary | None) -> None:
        """The last summary the gate refused (since the last it passed): why, and what the
        model wrote, folded; so a user can see the reason and act on it."""
        for part in ("#cp-refused-title", "#cp-refused", "#cp-refused-details"):
            self.query_one(part).display = refused is not None
        if refused is None:
            return
        reason = refused.reason[:1].upper() + refused.reason[1:]
        self.query_one("#cp-refused", Static).update(literal(
            f"{reason}. Written by {refused.by}; not used, the context is unchanged. "
            "/compact tries again; [context_compaction] summary_model sets another model."))
        self.query_one("#cp-refused-text", Static).update(literal(clean(refused.text)))

    async def read(self, cp: Checkpoint | None) -> None:
        from picochat.compaction.report import covered

        meta = self.query_one("#cp-meta", Static)
        summary = self.query_one("#cp-summary", ProseBlock)
        title = self.query_one("#cp-summary-title", Static)
        details = self.query_one("#cp-details", Collapsible)
        if cp is None:
            meta.update(literal(
                f"No summary in use: /clear after message {self.cleared_at} started afresh; "
                "the model reads only what came after it." if self.cleared_at else
                "No summary in use: the model reads the whole conversation as it is."))
            details.display = title.display = False
            summary.show(Block("text", ""))
            return
        number = self.numbers.get(cp.id, 0)
        active = self.checkpoints.get(self.active_id or "")
        use = use_line(cp, active, self.checkpoints, self.numbers)
        meta.update(literal(checkpoint_lines(cp, number, use, self.cleared_at)))
        details.display = title.display = True
        self.query_one("#cp-ids", Static).update(literal(
            f"checkpoint {cp.id}\nwritten by {cp.model} ({cp.provider_kind})"))
        title.update(literal(f"Summary {number}: what the model reads instead of "
                             f"{covered(cp, self.cleared_at)}"))
        summary.show(Block("text", summary_source(cp)))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.reading = event.option.id
        self.scroll_home(animate=False)  # the list and the details below it stay in view

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """ctrl+z shows in the footer only while there is a summary in use to undo."""
        if action == "undo":
            return self.active_id is not None
        return True

    def action_undo(self) -> None:
        """Ask first: undoing moves what the model reads, and the key may have been a slip."""
        cp = self.checkpoints.get(self.active_id or "") if self.active_id else None
        if cp is None:  # the key shows only while one is (check_action)
            return
        parent = self.checkpoints.get(cp.parent_checkpoint_id or "")
        question = undo_question(cp, self.numbers[cp.id], parent,
                                 self.numbers.get(parent.id) if parent else None,
                                 self.cleared_at)

        async def answered(yes: bool | None) -> None:
            if yes:
                await self.app.run_action("slash('uncompact')")

        from picochat.tui.screens import ConfirmScreen

        self.app.push_screen(ConfirmScreen(question), answered)

    def on_key(self, event: events.Key) -> None:
        forward_typing(self, event)
