"""The session picker (`/sessions`): every session with its last activity, size, model and how
it began, most recently active first; typing filters it (by name, model or first words), Enter
opens the one highlighted, Esc closes. Names and first lines are the user's and the models':
plain text (`literal`), never markup."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from picochat.messages import Session
from picochat import textsafe
from picochat.tui.safe import literal

FIRST_CHARS = 70
ZONE: dt.tzinfo | None = None  # the local time zone (a test fixes it, and the clock)


def clock() -> dt.datetime:
    return dt.datetime.now(ZONE)


@dataclass(frozen=True)
class Row:
    session: Session
    first: str   # how it began: the first user message's first line
    model: str = ""  # the model it opens with (its own, else the config's default)
    fork_of: str = ""  # a fork: the name of the session it was forked from

    def haystack(self) -> str:
        return " ".join((self.session.name, self.model, self.fork_of, self.first)).casefold()


def when(ms: int, now: dt.datetime | None = None) -> str:
    """"14:05" today, "Dec 3 14:05" this year, else "2025-11-30"."""
    now = now or clock()
    at = dt.datetime.fromtimestamp(ms / 1000, now.tzinfo)
    if at.date() == now.date():
        return at.strftime("%H:%M")
    if at.year == now.year:
        return f"{at.strftime('%b')} {at.day} {at.strftime('%H:%M')}"
    return at.strftime("%Y-%m-%d")


def first_line(text: str) -> str:
    return textsafe.first_line(text, FIRST_CHARS)


def label(row: Row, current: bool, now: dt.datetime | None = None) -> Text:
    s = row.session
    out = Text("● " if current else "  ", style="bold")
    out.append_text(literal(s.name, "bold"))
    count = s.message_count
    out.append(f"  ·  {when(s.updated_at, now)}  ·  {count:,} message{'s' if count != 1 else ''}",
               style="dim")
    if row.model:
        out.append("  ·  ", style="dim")
        out.append_text(literal(row.model, "dim"))
    first = first_line(row.first)  # "" for none, or none visible
    if first or row.fork_of:
        out.append("\n    ")
    if row.fork_of:  # it begins as its source did: say which first, or the rows look twins
        out.append_text(literal(f"fork of {row.fork_of}", "dim"))  # (the first line keeps
        out.append(" · " if first else "", style="dim")            # it at 80 columns)
    if first:
        out.append_text(literal(first, "italic"))
    return out


def matching(rows: list[Row], query: str) -> list[Row]:
    """The rows holding every word of `query` (case-insensitive, in any order)."""
    words = query.casefold().split()
    return [r for r in rows if all(w in r.haystack() for w in words)]


class SessionPicker(ModalScreen["str | None"]):
    """Dismissed with the picked session's id, or None."""

    AUTO_FOCUS = "#sp-filter"
    DEFAULT_CSS = """
    SessionPicker { align: center middle; }
    SessionPicker > Vertical {
        width: 100; max-width: 96%; height: auto; max-height: 85%;
        border: round $primary; background: $surface; padding: 0 1;
        border-subtitle-color: $text-muted;
    }
    SessionPicker #sp-filter { margin-bottom: 1; }
    SessionPicker OptionList {
        height: auto; max-height: 30; border: none;
        /* each row's two lines cut to the list's width, never wrapped under the next name */
        text-wrap: nowrap; text-overflow: ellipsis;
    }
    SessionPicker #sp-count { color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Close", key_display="esc"),
        Binding("down", "move(1)", show=False),
        Binding("up", "move(-1)", show=False),
        Binding("enter", "pick", "Open", show=False),
    ]

    def __init__(self, rows: list[Row], current: str) -> None:
        super().__init__()
        self.rows = rows
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Sessions"
            box.border_subtitle = "type to filter · ↑↓ choose · enter opens · esc closes"
            yield Input(placeholder="filter by name, model or first words", id="sp-filter")
            yield Static(id="sp-count")
            yield OptionList(id="sp-list")

    def on_mount(self) -> None:
        self._show("")

    @on(Input.Changed, "#sp-filter")
    def _filter(self, event: Input.Changed) -> None:
        self._show(event.value)

    def _show(self, query: str) -> None:
        shown = matching(self.rows, query)
        options = self.query_one("#sp-list", OptionList)
        options.clear_options()
        options.add_options([Option(label(r, r.session.id == self.current), id=r.session.id)
                             for r in shown])
        if shown:
            options.highlighted = 0
        total = len(self.rows)
        self.query_one("#sp-count", Static).update(
            f"{len(shown):,} of {total:,} sessions" if query.strip() else
            f"{total:,} session{'s' if total != 1 else ''}, the most recently active first")

    def action_move(self, step: int) -> None:
        options = self.query_one("#sp-list", OptionList)
        if options.option_count:
            at = (options.highlighted or 0) + step
            options.highlighted = max(0, min(options.option_count - 1, at))

    def action_pick(self) -> None:
        options = self.query_one("#sp-list", OptionList)
        if options.highlighted is None or not options.option_count:
            return
        self.dismiss(options.get_option_at_index(options.highlighted).id)

    @on(Input.Submitted, "#sp-filter")
    def _submitted(self) -> None:
        self.action_pick()

    @on(OptionList.OptionSelected, "#sp-list")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
