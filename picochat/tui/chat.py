"""The transcript: what the user sees is the raw history, always; a divider marks where the
active checkpoint's summary ends and the raw tail the model still reads begins."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message as UiMessage
from textual.await_remove import AwaitRemove
from textual.containers import VerticalScroll
from textual.widget import AwaitMount, Widget
from textual.widgets import Collapsible, Static

from picochat.tui.answer import AssistantMessage
from picochat.tui.thinking import ThinkingBlock
from picochat.tui.copyable import COPY, PIN, Pinnable, copy_shown
from picochat.tui.preview import Fold, fold, preview
from picochat.tui.prompt import TAKES_NO_TEXT, forward_typing
from picochat.tui.safe import literal

if TYPE_CHECKING:  # the session's rows come after the first frame, and their module with them
    from picochat.messages import Checkpoint, Message

PAGE = 40                     # messages read per page, at open and on scrolling to the top
SCREENS_AT_OPEN = 2           # of the first page, only the newest that fill about two screens
TOOL_PREVIEW_CHARS = 4_000


QUEUED = "queued · ↑ edits · sends after this answer"  # our words: no literal()


class EditRequested(UiMessage):
    """e on a saved message of the user's: its owner (the app) puts it in the prompt, and
    sending it starts a new branch there (storage/branches.py)."""

    def __init__(self, seq: int, text: str) -> None:
        super().__init__()
        self.seq, self.text = seq, text


class UserMessage(Pinnable, Static):
    """The user's message; a long one (a paste) folded to its first and last lines and a
    note: selected, Enter expands it (a huge one still to its head and tail) and folds it
    back; c copies all of it either way; alt+p pins it; e edits it and sends it again as a
    new branch from there."""

    BINDINGS = [
        COPY,
        PIN,
        Binding("e", "edit", "Edit from here", key_display="e"),
        # only on a long message: on the others Enter goes back to the prompt (ChatView)
        Binding("enter", "expand", "Expand", key_display="enter"),
        Binding("enter", "fold", "Fold", key_display="enter"),
    ]
    DEFAULT_CSS = """
    UserMessage {
        margin: 1 0 0 0;
        padding: 0 1;
        border-left: thick $accent;
        background: $boost;
    }
    UserMessage.queued {
        color: $text-muted;
        border-left: thick $accent 40%;
        border-bottom: dashed $accent 40%;  /* carries the "queued" label */
    }
    UserMessage.retracted {
        color: $text-disabled;
        border-left: thick $foreground 30%;
        border-bottom: dashed $foreground 30%;
    }
    UserMessage:focus { border-left: thick $success; background: $boost 200%; }
    """

    def __init__(self, text: str, seq: int | None = None, queued: bool = False,
                 retracted: bool = False) -> None:
        classes = "queued" if queued else "retracted" if retracted else ""
        self.folding = fold(text)
        super().__init__(folded_text(text, self.folding), classes=classes)
        self.seq = seq
        self.text = text
        if queued:
            self.border_subtitle = QUEUED
        elif retracted:
            self.border_subtitle = "undone: not in the context"

    @property
    def folded(self) -> bool:
        return self.folding is not None and not self.has_class("expanded")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "edit":  # saved and in the context: neither queued nor undone
            return (self.seq is not None and not self.has_class("queued")
                    and not self.has_class("retracted"))
        if action == "expand":
            return self.folded
        if action == "fold":
            return self.folding is not None and not self.folded
        return True

    def action_expand(self) -> None:
        self.add_class("expanded")
        self.update(literal(preview(self.text)))
        self._after_resize()

    def action_fold(self) -> None:
        self.remove_class("expanded")
        self.update(folded_text(self.text, self.folding))
        self._after_resize()

    def _after_resize(self) -> None:
        """Its top stays in view, where reading it starts; the transcript stops following
        the bottom while the reader is here."""
        self.refresh_bindings()
        if isinstance(self.parent, Widget):
            self.parent.release_anchor()
        self.call_after_refresh(self.scroll_visible, top=True, animate=False)

    def copy_text(self) -> str:
        return self.text

    def action_edit(self) -> None:
        if self.seq is not None:
            self.post_message(EditRequested(self.seq, self.text))

    def started(self, seq: int) -> None:
        self.seq = seq
        self.remove_class("queued")
        self.border_subtitle = ""


def folded_text(text: str, folding: Fold | None) -> Text:
    """What a user message shows: all of it (a huge one: head and tail), or folded."""
    if folding is None:
        return literal(preview(text))
    shown = literal(folding.head)
    shown.append("\n")
    shown.append_text(literal(folding.note, style="italic"))
    if folding.tail:
        shown.append("\n")
        shown.append_text(literal(folding.tail))
    return shown


class ToolBlock(Collapsible):
    BINDINGS = [Binding("c", "copy", "Copy result", key_display="c")]
    DEFAULT_CSS = """
    ToolBlock { margin: 0 0 0 2; border: none; padding: 0; background: transparent; }
    ToolBlock.error CollapsibleTitle { color: $error; }
    """

    def __init__(self, name: str, status: str | None, result: str, seq: int | None,
                 detail: str = "") -> None:
        from picochat.tools.registry import tool_label

        shown = literal(preview(result, head=TOOL_PREVIEW_CHARS, tail=0))
        what = f"{tool_label(name)} {detail}" if detail else tool_label(name)
        title = literal(f"⚙ {what} ({status or 'done'})")  # the model names tools and args
        super().__init__(Static(shown), title=title, collapsed=True,  # type: ignore[arg-type]
                         classes="error" if status == "error" else "")
        self.seq = seq
        self.result = result

    def action_copy(self) -> None:
        copy_shown(self, self.result, "the tool result")


class Notice(Static):
    DEFAULT_CSS = """
    Notice { margin: 1 0 0 0; padding: 0 1; color: $text-muted; }
    Notice.error { color: $error; border-left: thick $error; }
    Notice.warning { color: $warning; border-left: thick $warning; }
    Notice.info { color: $text-muted; }
    Notice.card { border: round $primary 50%; color: $text; }
    """

    def __init__(self, text: str, kind: str = "info") -> None:
        super().__init__(literal(text), classes=kind)
        self.said, self.kind = text, kind  # kept across a refresh (`ChatView.trailing_notices`)


class CheckpointDivider(Static):
    DEFAULT_CSS = """
    CheckpointDivider {
        margin: 1 0 0 0;
        color: $secondary;
        text-style: italic;
        border-top: dashed $secondary;
        border-bottom: dashed $secondary;
        text-align: center;
    }
    """

    def __init__(self, checkpoint: Checkpoint) -> None:
        super().__init__(literal(divider_text(checkpoint)))
        self.checkpoint_id = checkpoint.id


def divider_text(cp: Checkpoint) -> str:
    """Where the summary in use ends, in the reader's words (F2 has the details)."""
    saved = cp.tokens_before - cp.tokens_after
    above = ("▲ above: left out, no summary (their exact facts kept)" if cp.degraded else
             f"▲ above: tool results as pointers · {cp.trigger_reason} · saved {saved:,} tokens"
             if cp.pointers else
             f"▲ above: summarized · {cp.trigger_reason} · saved {saved:,} tokens")
    return f"{above} · ▼ below: messages {cp.first_retained_seq} onward, sent as they are"


class NewBelow(Static):
    """Shown while something new landed below what the reader is looking at (they scrolled
    up): a click, or scrolling down to it, follows the bottom again."""

    DEFAULT_CSS = """
    NewBelow { dock: bottom; width: auto; margin: 0 0 0 2; padding: 0 1;
               background: $accent; color: $text; text-style: bold; }
    """

    def __init__(self) -> None:
        super().__init__("▼ new below · click, or scroll down")

    def on_click(self) -> None:
        chat = self.parent
        if isinstance(chat, ChatView):
            chat.follow()


SELECTABLE = ("UserMessage, AssistantMessage, CodeFence, ToolBlock > CollapsibleTitle, "
              "ThinkingBlock > CollapsibleTitle")


class ChatView(VerticalScroll):
    """The transcript, and its one write path: every widget mounted, moved or removed in it
    goes through `add`, `put`, `move_to_end` and `take` (the running turn's owner,
    tui/conversation.py, and the slash commands write through them), so a write that lands
    out of view is always announced. A selected item (focused) moves with up/down; enter goes
    back to the prompt (on a long message of the user's it expands or folds it: UserMessage)."""
    DEFAULT_CLASSES = TAKES_NO_TEXT  # typing here goes to the prompt

    BINDINGS = [
        Binding("up", "select(-1)", "Previous", key_display="↑", show=False),
        Binding("down", "select(1)", "Next", key_display="↓", show=False),
        Binding("enter", "app.focus('prompt')", "Back to prompt", key_display="enter"),
    ]

    DEFAULT_CSS = """
    ChatView { padding: 0 1 1 1; scrollbar-size-vertical: 1; }
    ChatView > .older { color: $text-muted; text-align: center; }
    /* where a /search jump landed, whatever the message's kind, until the next jump or the
       next message sent: a tint and a bar in a colour no other mark uses (your messages'
       bar is $accent, focus $success, an interrupted answer $warning); $text-primary and
       $text are Textual's variants legible on the theme's background */
    ChatView > .found { background: $primary 15%; outline-left: thick $text-primary;
                        color: $text; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._older_lock = asyncio.Lock()  # older pages go in one at a time
        self._read_to = 0  # the newest seq read from the database (has_shown)
        self._readings = 0  # show_history calls: an older page read across one is dropped
        self._elsewhere: set[int] = set()  # rows another picochat wrote, shown by a refresh

    def on_mount(self) -> None:
        self.anchor()

    async def show_history(self, newest: list[Message], checkpoint: Checkpoint | None,
                           older: Callable[[int, int], Awaitable[list[Message]]] | None = None,
                           from_elsewhere: bool = False) -> None:
        """Mount the newest messages; older ones are read from the database in pages as the
        user scrolls to the top (`older(before_seq, n)`): the database is the source of truth,
        the screen holds what was looked at. `from_elsewhere`: a refresh after another
        picochat wrote; the rows it brings stay "written elsewhere" (`has_shown`)."""
        known = ({seq for w in self.children if (seq := getattr(w, "seq", None)) is not None}
                 | {m.seq for m in newest if m.seq <= self._read_to}) - self._elsewhere
        self._elsewhere = ({m.seq for m in newest} - known) | self._elsewhere \
            if from_elsewhere else set()
        self._readings += 1
        with self.app.batch_update():  # one frame, at the end: never the top of the page first
            await self.remove_children()
            self._read_to = newest[-1].seq if newest else 0
            if self.size.height:  # laid out: mount what is looked at, not a whole page
                newest = newest_filling(newest, max(20, self.size.width - 4),
                                        SCREENS_AT_OPEN * self.size.height)
            self._fetch = older
            self._first_seq = newest[0].seq if newest else 1
            self._checkpoint = checkpoint
            widgets = message_widgets(newest)
            if self.has_older:
                widgets.insert(0, Static(literal(self._older_text()), classes="older"))
            await self.mount_all(widgets)
            await self.set_checkpoint(checkpoint)
            self.scroll_end(animate=False, immediate=True)
            self.anchor()
        self.call_after_refresh(self._fill)  # a page too short to scroll: no key could ask

    @property
    def has_older(self) -> bool:
        """Seqs run 1, 2, 3…: anything below the first one shown is still in the database."""
        return getattr(self, "_fetch", None) is not None and self._first_seq > 1

    def _older_text(self) -> str:
        return f"… {self._first_seq - 1:,} earlier messages: scroll up to load them"

    async def load_older(self) -> int:
        """Mount the next page of older messages above the ones shown; how many were added.
        One page at a time: a second page mounted while the first is still going in would
        land below it, out of order."""
        async with self._older_lock:
            return await self._load_older_page()

    def want_older(self) -> None:
        """The reader asks for what is above (reached the top, or scrolls up there): the next
        page, unless one is already on its way (a page is never cut off halfway)."""
        if self.has_older and not self._older_lock.locked():
            self.run_worker(self._older_then_fill(), group="older")

    async def _older_then_fill(self) -> None:
        await self.load_older()
        self.call_after_refresh(self._fill)

    async def _load_older_page(self) -> int:
        if not self.has_older:
            return 0
        follows = self._follows
        bottom = self.is_anchored and not self._anchor_released  # following the newest
        reading = self._readings
        page = await self._fetch(self._first_seq, PAGE)  # type: ignore[misc]
        if reading != self._readings:  # the transcript was read again meanwhile (the session
            return 0                   # opened, another picochat wrote): this page was above
        self._first_seq = page[0].seq if page else 1  # what it replaced, and would leave a gap
        marker = self.query(".older").first(Static)
        widgets = message_widgets(page)
        first = next((w for w in self.children if w is not marker), None)
        offset = first.virtual_region.y - self.scroll_y if first is not None else 0
        if first is not None:
            await self.mount_all(widgets, before=first)
        else:
            await self.mount_all(widgets)
        if self.has_older:
            marker.update(literal(self._older_text()))
        else:
            await marker.remove()
        await self.set_checkpoint(self._checkpoint)

        def stay() -> None:  # the page went in above: keep what the reader was looking at,
            if bottom:  # the newest message, when that is what was in view (a page loaded
                self.scroll_end(animate=False, immediate=True)  # while the transcript opens)
            elif first is not None and follows == self._follows:  # unless they went back down
                self.scroll_to(y=max(0, first.virtual_region.y - offset), animate=False,
                               immediate=True)
        self.call_after_refresh(stay)
        return len(page)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if new >= self.max_scroll_y - 1:  # the reader reached what was new
            self.query(NewBelow).remove()
        if new <= 0 and old > 0:
            self.want_older()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if self.scroll_y <= 0:  # already at the top: no scroll change would say so
            self.want_older()

    def on_resize(self, event: events.Resize) -> None:
        self.call_after_refresh(self._fill)

    def _fill(self) -> None:
        """Grown taller than what is shown: with nothing to scroll, reaching the top could
        never ask for more, so older pages load until there is (or none is left)."""
        if self.max_scroll_y <= 0:
            self.want_older()

    async def set_checkpoint(self, checkpoint: Checkpoint | None) -> None:
        """Move the divider to where the active checkpoint's raw tail begins."""
        self._checkpoint = checkpoint
        for old in self.query(CheckpointDivider):
            await old.remove()
        if checkpoint is None:
            return
        divider = CheckpointDivider(checkpoint)
        after = [w for w in self.children if (seq := getattr(w, "seq", None)) is not None
                 and seq >= checkpoint.first_retained_seq]
        if after:
            await self.mount(divider, before=after[0])
        else:
            await self.mount(divider)

    async def reveal(self, seq: int) -> bool:
        """Scroll to message `seq` (loading older pages until it is mounted) and mark it."""
        while True:
            target = next((w for w in self.children if getattr(w, "seq", None) == seq), None)
            if target is not None or not await self.load_older():
                break
        self.unmark()
        if target is None:
            return False
        self.release_anchor()
        target.add_class("found")
        if isinstance(target, ToolBlock):  # the match is in the result: show it
            target.collapsed = False
        self.call_after_refresh(self.scroll_to_widget, target, animate=False, top=True)
        return True

    def has_shown(self, seqs: Iterable[int]) -> bool:
        """Whether the transcript has shown any of the rows `seqs`: read when it was last
        read from the database (on screen, or a scroll away), or this window's own turn.
        Another picochat's rows (`picochat ask` on this session) appear only when it is read
        again: until then the reader has not seen them, and nothing may be done to them as if
        they had."""
        wanted = set(seqs)
        if wanted & self._elsewhere:  # on screen since a refresh, but not written here
            return False
        if any(seq <= self._read_to for seq in wanted):
            return True
        return any(getattr(w, "seq", None) in wanted for w in self.children)

    async def last_answer(self) -> AssistantMessage | None:
        """The newest saved answer the transcript shows (one still streaming has no seq yet),
        loading older pages until one is mounted: never one another picochat wrote since."""
        while True:
            done = [a for a in self.query(AssistantMessage) if a.seq is not None]
            if done or not await self.load_older():
                return done[-1] if done else None

    def unmark(self) -> None:
        """The last jump's target is no longer marked."""
        for old in self.query(".found"):
            old.remove_class("found")

    _follows = 0  # times the view went back to following the bottom

    def page(self, where: int | str) -> None:
        """From the keyboard, wherever the focus is: a page up (-1) or down (1), the start
        ("start": older pages load as it is reached) or the newest message ("end", following
        it again). Going up lets go of the newest text; reaching the bottom follows it."""
        if where == "end":
            self.follow()
            return
        if where == "start" or (where == -1 and self.scroll_y <= 0):
            self.release_anchor()
            if self.scroll_y <= 0:  # already there: no scroll change would ask for more
                self.want_older()
            self.scroll_home(animate=False, immediate=True)
            return
        if where == -1:
            self.release_anchor()
        step = max(1, self.scrollable_content_region.height - 2)  # a line or two stay in view
        self.scroll_to(y=self.scroll_y + int(where) * step, animate=False, immediate=True)

    def follow(self) -> None:
        """Back to the bottom, following new text (sending a message does this); where the
        last jump landed is no longer marked."""
        self._follows += 1
        self.unmark()
        self.query(NewBelow).remove()
        self.scroll_end(animate=False, immediate=True)
        self.anchor()

    def on_key(self, event: events.Key) -> None:
        forward_typing(self, event)

    def _selectable(self) -> list[Widget]:
        """What alt+↑ and ↑/↓ walk: shown items only (an empty code fence is hidden)."""
        return [w for w in self.query(SELECTABLE) if w.display]

    def select_last(self) -> bool:
        items = self._selectable()
        if items:
            items[-1].focus()
        return bool(items)

    def action_select(self, step: int) -> None:
        items = self._selectable()
        focused = self.screen.focused
        if not items:
            return
        if focused not in items:
            items[-1 if step < 0 else 0].focus()
            return
        index = items.index(focused) + step
        if 0 <= index < len(items):
            items[index].focus()
        elif index < 0:
            self.want_older()

    async def add(self, widget: Widget) -> Widget:
        """Every transcript write; one that lands out of view (the reader scrolled up) is
        announced by a "new below" marker."""
        below = self.max_scroll_y > 0 and self.scroll_y < self.max_scroll_y - 1
        await self.mount(widget)
        if below and not self.query(NewBelow):
            await self.mount(NewBelow())
        return widget

    def put(self, widget: Widget) -> AwaitMount:
        """A write that need not be awaited (a command's progress line, mounted from a plain
        callback); the same announcement as `add`."""
        below = self.max_scroll_y > 0 and self.scroll_y < self.max_scroll_y - 1
        mounted = self.mount(widget)
        if below and not self.query(NewBelow):
            self.mount(NewBelow())
        return mounted

    def move_to_end(self, widget: Widget) -> None:
        """A widget shown earlier goes below everything (a queued message whose turn begins
        goes below the answers and notices of the turns before it)."""
        if widget.parent is self and self.children[-1] is not widget:
            self.move_child(widget, after=self.children[-1])

    def take(self, widget: Widget) -> AwaitRemove | None:
        """Remove a widget this transcript shows (a queued message taken back, a pending line
        whose wait is over); None when it is not here any more."""
        return widget.remove() if widget.parent is self else None

    async def add_user(self, text: str, queued: bool) -> UserMessage:
        """The user's message; what an empty session showed until then (`.until-first`, the
        welcome) goes."""
        await self.query(".until-first").remove()
        return await self.add(UserMessage(text, queued=queued))  # type: ignore[return-value]

    async def add_assistant(self) -> AnswerStream:
        """A streamed answer; its first widget mounts with its first text."""
        return AnswerStream(self)

    def trailing_notices(self) -> list[tuple[str, str]]:
        """The notices below the newest message (what was just said): a refresh after another
        picochat wrote puts them back, so a line the reader is reading does not vanish."""
        said: list[tuple[str, str]] = []
        for widget in reversed(self.children):
            if getattr(widget, "seq", None) is not None:
                break
            if isinstance(widget, Notice):
                said.append((widget.said, widget.kind))
        return said[::-1]

    async def add_notice(self, text: str, kind: str = "info") -> Notice:
        return await self.add(Notice(text, kind))  # type: ignore[return-value]


def rows_at_least(m: Message, width: int, cap: int) -> int:
    """About how many rows a message takes at `width`, counted no further than `cap`: the
    text wrapped, plus the margin above it. A tool result shows collapsed, on one row."""
    if m.role == "tool":
        return 1
    if not m.content.strip():
        return 0
    folded = fold(m.content) if m.role == "user" else None  # shown folded: its rows
    # that many characters fill `cap` rows whatever they are
    text = (folded.plain if folded else m.content)[:cap * width]
    return 1 + sum(-(-len(line) // width) or 1 for line in text.split("\n"))


def newest_filling(messages: list[Message], width: int, rows: int) -> list[Message]:
    """The newest of `messages` (oldest first) that fill about `rows` rows: opening a session
    mounts what the reader sees and a screen to scroll back, however long its answers are;
    the rest comes from the database a page at a time."""
    total, start = 0, len(messages)
    while start > 0 and total < rows:
        start -= 1
        total += rows_at_least(messages[start], width, rows - total)
    return messages[start:]


def message_widgets(messages: list[Message]) -> list[Widget]:
    """The widgets of `messages`, oldest first; a tool result's line names what it read from
    its call's arguments, when the call is among them."""
    from picochat.messages import pair_tool_calls

    calls, _ = pair_tool_calls(messages)
    return [w for m in messages if (w := message_widget(
        m, (calls.get(m.seq, {}).get("function") or {}).get("arguments"))) is not None]


def message_widget(m: Message, arguments: str | None = None) -> Widget | None:
    from picochat.messages import INTERRUPTED

    if m.role == "user":
        return UserMessage(m.content, m.seq, retracted=m.retracted)
    if m.role == "assistant":
        if not m.content.strip():
            return None  # a tool-call step: its tools show below it
        return AssistantMessage(m.content, m.seq, interrupted=m.status == INTERRUPTED,
                                retracted=m.retracted)
    if m.role == "tool":
        from picochat.tools.registry import call_detail

        return ToolBlock(m.name or "tool", m.tool_status, m.content, m.seq,
                         call_detail(m.name or "", arguments, m.content))
    return None


class AnswerStream:
    """The answer being streamed: its widget mounts with the first text, and the model's
    thinking, if any, in a block above it with the first thinking (collapsed once the answer
    starts)."""

    def __init__(self, chat: ChatView) -> None:
        self.chat = chat
        self.message: AssistantMessage | None = None
        self.thinking: ThinkingBlock | None = None

    async def add_thinking(self, fragment: str) -> None:
        if self.message is not None:  # thinking after the answer began: not shown apart
            return
        if self.thinking is None:
            self.thinking = ThinkingBlock()
            await self.chat.add(self.thinking)
        self.thinking.add_text(fragment)

    async def add_text(self, fragment: str) -> None:
        if self.thinking is not None:
            self.thinking.finish()
        if self.message is None:
            self.message = AssistantMessage()
            await self.chat.add(self.message)
        self.message.add_text(fragment)

    async def finish(self, seq: int | None = None, interrupted: bool = False) -> None:
        if self.thinking is not None:
            self.thinking.finish()
        if self.message is not None:
            await self.message.finish(seq, interrupted)
