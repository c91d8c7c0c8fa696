"""The checkpoint panel: what has been summarized, where the raw tail begins, and how the
context grew and dropped turn by turn."""

from __future__ import annotations

import datetime as dt

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Label, OptionList, Sparkline, Static
from textual.widgets.option_list import Option

from picochat.ledger import facts_line
from picochat.messages import Checkpoint
from picochat.tui.answer import ProseBlock
from picochat.tui.markdown import Block
from picochat.tui.prompt import forward_typing
from picochat.tui.safe import clean, literal


def checkpoint_lines(cp: Checkpoint, active: bool) -> str:
    created = dt.datetime.fromtimestamp(cp.created_at / 1000, dt.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    return "\n".join([
        f"{'Active' if active else 'Earlier'} checkpoint {cp.id}",
        f"generation {cp.generation} · {cp.trigger_reason}"
        + (" · degraded (turns dropped with their exact facts kept, no summary)" if cp.degraded else ""),
        f"tokens {cp.tokens_before:,} → {cp.tokens_after:,}",
        facts_line(cp.summary),
        f"raw tail from #{cp.first_retained_seq} · covers up to #{cp.source_max_seq}",
        f"created {created}",
    ])


class CheckpointPanel(VerticalScroll):
    DEFAULT_CSS = """
    CheckpointPanel {
        width: 52; display: none;
        border-left: solid $secondary; padding: 0 1; background: $surface;
    }
    CheckpointPanel.open { display: block; }
    CheckpointPanel Label.title { text-style: bold; color: $secondary; margin: 1 0 0 0; }
    CheckpointPanel Sparkline { height: 3; margin: 0 0 1 0; }
    CheckpointPanel OptionList { height: auto; max-height: 8; }
    CheckpointPanel #cp-summary { margin: 1 0 0 0; }
    """
    HELP = ("F2 or /checkpoints toggles this panel; pick an earlier checkpoint to read it; "
            "u undoes the last compaction.")
    BINDINGS = [Binding("u", "app.slash('uncompact')", "Uncompact", key_display="u")]

    def compose(self) -> ComposeResult:
        return iter(())  # built when first opened: the first frame does not wait for it

    def _parts(self) -> ComposeResult:
        yield Label("Context per turn", classes="title")
        yield Sparkline([], id="spark")
        yield Static("", id="cp-meta")
        yield Label("Summary", classes="title")
        yield ProseBlock(Block("text", ""), id="cp-summary")
        yield Label("All checkpoints", classes="title")
        yield OptionList(id="cp-list")

    async def show(self, checkpoints: list[Checkpoint], active_id: str | None,
                   series: list[int], cleared_at: int = 0) -> None:
        if not self.children:
            await self.mount_all(list(self._parts()))
        self.checkpoints = {c.id: c for c in checkpoints}
        self.active_id = active_id
        self.cleared_at = cleared_at
        self.query_one("#spark", Sparkline).data = series or [0]
        options = self.query_one("#cp-list", OptionList)
        options.clear_options()
        for cp in checkpoints:
            mark = "● " if cp.id == active_id else "  "
            options.add_option(Option(literal(f"{mark}gen {cp.generation} · {cp.id} · "
                                              f"{cp.tokens_before:,}→{cp.tokens_after:,}"),
                                      cp.id))
        active = self.checkpoints.get(active_id) if active_id else None
        await self.read(active)

    async def read(self, cp: Checkpoint | None) -> None:
        meta = self.query_one("#cp-meta", Static)
        summary = self.query_one("#cp-summary", ProseBlock)
        if cp is None:
            meta.update(literal(
                f"No active checkpoint: /clear at #{self.cleared_at} started the context "
                "afresh; the model reads only what came after it." if self.cleared_at else
                "No active checkpoint: the model reads the whole raw history."))
            summary.show(Block("text", ""))
            return
        meta.update(literal(checkpoint_lines(cp, cp.id == self.active_id)))
        summary.show(Block("text", clean(cp.summary)))

    async def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        await self.read(self.checkpoints.get(event.option.id or ""))
        self.scroll_home(animate=False)  # the details sit at the top

    def on_key(self, event: events.Key) -> None:
        forward_typing(self, event)
