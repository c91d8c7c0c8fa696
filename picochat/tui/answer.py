"""An assistant answer on screen: prose runs and code fences, a few widgets however long.

While an answer streams, fragments are kept at once (`parts`) but the screen catches up at
most every FLUSH_S: only the still-open tail (the last prose run or fence, a few thousand
characters) is parsed and re-rendered, and finished blocks are never touched again.
"""

from __future__ import annotations

from dataclasses import replace

from rich.theme import Theme
from textual.app import ComposeResult
from textual.binding import Binding
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Label

from picochat.tui.copyable import COPY, PIN, Copyable, Pinnable
from picochat.tui.markdown import Block, Prose, markdown_theme, split_blocks
from picochat.tui.preview import preview
from picochat.textsafe import StreamCleaner, clean


SEGMENT_CHARS = 3_000   # a streaming prose run is closed at the next block past this size
FLUSH_S = 0.05          # the screen follows a stream at most 20 times a second,
CALM_TAIL_CHARS = 6_000  # less often once the open tail outgrows this: one huge table or
                         # fence is parsed and drawn whole each time, so redraws are spaced
                         # in step with its size and the keys still get through
INTERRUPTED_NOTE = "interrupted: the answer stopped here"

_THEMES: dict[str, Theme] = {}


def _prose_theme(widget: Widget) -> Theme:
    name = widget.app.theme
    theme = _THEMES.get(name)
    if theme is None:
        theme = _THEMES[name] = markdown_theme(widget.app.theme_variables)
    return theme


class ProseBlock(Widget):
    """A run of Markdown prose: one widget, rendered by Rich, re-rendered only on change."""

    DEFAULT_CSS = """
    ProseBlock { height: auto; }
    """
    kind = "text"

    def __init__(self, block: Block, id: str | None = None) -> None:
        super().__init__(id=id)
        self.source = block.source
        self._key: tuple[str, str] | None = None
        self._prose: Prose | None = None

    def show(self, block: Block) -> None:
        if block.source != self.source:
            self.source = block.source
            self.refresh(layout=True)

    def render(self) -> Prose:
        key = (self.source, self.app.theme)
        if self._prose is None or key != self._key:
            self._key = key
            self._prose = Prose(self.source, _prose_theme(self), self.app.current_theme.dark)
        return self._prose


class CodeFence(Copyable, Widget):
    """A top-level code block: highlighted as Textual highlights code, scrolled sideways
    rather than wrapped (a line wider than the transcript is code, and a wrap would change
    what it reads as), and selectable on its own: c copies just the code, ←/→ scroll a wide
    block, home/end go to its left and right edges. A thin bar under a wide block says there
    is more to the side (shift+wheel scrolls it too)."""

    BINDINGS = [Binding("c", "copy", "Copy code", key_display="c"),
                Binding("right", "sideways(1)", "Scroll", key_display="←→"),
                Binding("left", "sideways(-1)", "Scroll", show=False),
                Binding("end", "edge(1)", show=False),
                Binding("home", "edge(-1)", show=False)]
    DEFAULT_CSS = """
    CodeFence {
        height: auto;
        overflow-x: auto;
        overflow-y: hidden;
        scrollbar-size-horizontal: 1;
        scrollbar-size-vertical: 0;
        color: rgb(210,210,210);
        background: black 10%;
        border-left: blank;  /* room for the focus mark */
        &:light { background: white 30%; }
        & > Label { padding: 1 1; }
    }
    CodeFence:focus { border-left: thick $success; }
    """
    kind = "code"
    STEP = 0.5  # ←/→ move half the block's width: the line read last stays in view

    def __init__(self, block: Block) -> None:
        super().__init__()
        self.code, self.lang = block.code, block.lang
        self._look = self._current_look()
        self._label = Label(self._highlighted(), expand=True)
        # a fence with nothing in it (a model's stray ``` at the end of an answer) is not a
        # few blank rows of background: it shows once code comes
        self.display = bool(self.code.strip())

    def _current_look(self) -> tuple[bool, bool]:
        return self.app.native_ansi_color, self.app.current_theme.dark

    def _highlighted(self):  # type: ignore[no-untyped-def]
        """As Textual's own Markdown highlights a fence (imported on first use: pygments is
        not needed for the first frame)."""
        from textual import highlight

        ansi, dark = self._look
        theme = (highlight.HighlightTheme if not ansi else highlight.ANSIDarkHighlightTheme
                 if dark else highlight.ANSILightHighlightTheme)
        return highlight.highlight(self.code, language=self.lang or None, theme=theme)

    @property
    def allow_horizontal_scroll(self) -> bool:
        return True

    def compose(self) -> ComposeResult:
        yield self._label

    def show(self, block: Block) -> None:
        if (block.code, block.lang) != (self.code, self.lang):
            self.code, self.lang = block.code, block.lang
            self._label.update(self._highlighted())
            self.display = bool(self.code.strip())

    def notify_style_update(self) -> None:
        """A switch between dark and light themes re-highlights; nothing else does."""
        super().notify_style_update()
        if self.is_mounted and self._current_look() != self._look:
            self._look = self._current_look()
            self._label.update(self._highlighted())

    def copy_text(self) -> str:
        return self.code

    @property
    def wide(self) -> bool:
        """A line is wider than the block: there is something to the side to scroll to."""
        return self.max_scroll_x > 0

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # the arrows and home/end mean something here only for a wide block: a narrow one
        # lets them go on to the transcript (↑/↓ walk it; ←/→ do nothing there either)
        if action in ("sideways", "edge") and not self.wide:
            return False
        return True

    def action_sideways(self, direction: int) -> None:
        step = max(4, int(self.scrollable_content_region.width * self.STEP))
        self.scroll_to(x=self.scroll_x + direction * step, animate=False)

    def action_edge(self, direction: int) -> None:
        self.scroll_to(x=0 if direction < 0 else self.max_scroll_x, animate=False)

    def on_resize(self) -> None:
        self.refresh_bindings()  # the footer offers ←→ only while the block is wide


def flush_delay(tail_chars: int) -> float:
    """Seconds until the screen shows what streamed in, for an open tail this long."""
    return FLUSH_S * max(1.0, tail_chars / CALM_TAIL_CHARS)


def part_widget(block: Block, after: bool) -> ProseBlock | CodeFence:
    """The widget for `block`; `after` when a part comes before it (a blank line between)."""
    widget = CodeFence(block) if block.kind == "code" else ProseBlock(block)
    mark_gap(widget, block, after)
    return widget


def mark_gap(widget: Widget, block: Block, after: bool) -> None:
    """A blank line above a part that follows another, unless it goes on the same list."""
    widget.set_class(after and not block.joined, "after")


class AssistantMessage(Pinnable, Widget):
    """One answer. Selecting it and pressing c copies the whole answer; alt+p pins it."""

    BINDINGS = [COPY, PIN]
    DEFAULT_CSS = """
    AssistantMessage { height: auto; layout: vertical; margin: 1 0 0 0; padding: 0 1; }
    AssistantMessage > .after { margin-top: 1; }  /* a class, not :first-child, which
        would restyle every part (and re-highlight every fence) on each mount */
    AssistantMessage.interrupted { border-left: thick $warning; border-bottom: dashed $warning; }
    AssistantMessage.retracted {
        color: $text-disabled;
        border-left: thick $foreground 30%;
        border-bottom: dashed $foreground 30%;
    }
    AssistantMessage:focus { outline-left: thick $success; background: $boost; }
    """

    def __init__(self, text: str = "", seq: int | None = None, interrupted: bool = False,
                 retracted: bool = False) -> None:
        classes = " ".join(c for c, on in (("interrupted", interrupted),
                                           ("retracted", retracted)) if on)
        super().__init__(classes=classes)
        self.seq = seq
        self.parts: list[str] = []        # the fragments as they streamed in
        self._settled: list[str] = []     # sources of blocks whose widgets are final
        whole = clean(text)
        shown = preview(whole, markdown=True)  # a huge answer: its head and tail
        self._whole = whole if shown is not whole else None
        self._tail = shown                # text not yet in a final widget
        self._live: list[ProseBlock | CodeFence] = []  # the tail's widgets, still changing
        self._tail_joined = False         # the tail starts with the next item of a list
        self._timer: Timer | None = None
        self._cleaner = StreamCleaner()   # an escape sequence may be split between fragments
        if interrupted:
            self.border_subtitle = INTERRUPTED_NOTE
        elif retracted:
            self.border_subtitle = "undone: not in the context"

    @property
    def text(self) -> str:
        if self._whole is not None:
            return self._whole
        return "".join(self._settled) + self._tail

    source = text

    @property
    def rendered(self) -> bool:
        """Whether the widgets show every character received so far (no redraw is due)."""
        return self._timer is None

    def compose(self) -> ComposeResult:
        blocks = split_blocks(self._tail)
        self._settled, self._tail = [b.source for b in blocks], ""
        for i, block in enumerate(blocks):
            yield part_widget(block, after=i > 0)

    def copy_text(self) -> str:
        return self.text

    def add_text(self, fragment: str) -> None:
        """Keep `fragment` now; the screen catches up within FLUSH_S."""
        fragment = self._cleaner.feed(fragment)
        if not fragment:
            return
        self.parts.append(fragment)
        self._tail += fragment
        if self._timer is None:
            self._timer = self.set_timer(flush_delay(len(self._tail)), self._flush)

    def _flush(self) -> None:
        self._timer = None
        self._draw(final=False)

    def _draw(self, final: bool) -> None:
        """Re-parse the open tail and show each of its blocks; those that can no longer change
        leave the tail (all of them when `final`)."""
        blocks = split_blocks(self._tail, SEGMENT_CHARS)
        if blocks and self._tail_joined:  # the tail goes on a list cut between its items
            blocks[0] = replace(blocks[0], joined=True)
        settled = len(blocks) if final else self._final_blocks(blocks)
        self._show(blocks)
        self._settled.extend(b.source for b in blocks[:settled])
        del self._live[:settled]
        self._tail = self._tail[sum(len(b.source) for b in blocks[:settled]):]
        if 0 < settled < len(blocks):
            self._tail_joined = blocks[settled].joined

    def _final_blocks(self, blocks: list[Block]) -> int:
        """How many leading blocks are final: a block is, once the block after it starts on a
        finished line. A half-received line can look like a new block ("#" of "#include",
        "```" of "```foo` inline") and stop being one when it completes."""
        finished = self._tail.rfind("\n")  # the text after it is a line still arriving
        count, start = 0, 0
        for block in blocks[:-1]:
            start += len(block.source)
            if start > finished:
                break
            count += 1
        return count

    def _show(self, blocks: list[Block]) -> None:
        """The live widgets show `blocks`, reused in place where the kind still matches (a
        prose run that turned out to open a fence is replaced)."""
        if not self.is_attached:  # the app is quitting: a draw still due has nowhere to go
            return
        live = self._live
        for i, block in enumerate(blocks):
            after = bool(self._settled) or i > 0
            if i < len(live) and live[i].kind == block.kind:
                live[i].show(block)
                mark_gap(live[i], block, after)
                continue
            for old in live[i:]:
                old.remove()
            del live[i:]
            widget = part_widget(block, after)
            self.mount(widget)
            live.append(widget)
        for old in live[len(blocks):]:
            old.remove()
        del live[len(blocks):]

    async def finish(self, seq: int | None = None, interrupted: bool = False) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        rest = self._cleaner.flush()
        if rest:
            self.parts.append(rest)
            self._tail += rest
        self._draw(final=True)
        self.seq = seq
        if interrupted:
            self.add_class("interrupted")
            self.border_subtitle = INTERRUPTED_NOTE
