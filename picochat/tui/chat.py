"""The transcript: what the user sees is the raw history, always; a divider marks where the
active checkpoint's summary ends and the raw tail the model still reads begins."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Collapsible, Markdown, Static
from textual.widgets._markdown import MarkdownFence

from picochat.messages import INTERRUPTED, Checkpoint, Message
from picochat.tui.safe import clean

SHOWN_AT_OPEN = 200           # newest messages mounted when a session opens
TOOL_PREVIEW_CHARS = 4_000


COPY = Binding("c", "copy", "Copy", key_display="c")


class Copyable:
    """A transcript item the user can select (click, or alt+up then up/down) and copy with c."""

    can_focus = True

    def copy_text(self) -> str:
        raise NotImplementedError

    def action_copy(self) -> None:
        text = self.copy_text()
        self.app.copy_to_clipboard(text)  # type: ignore[attr-defined]
        self.notify(f"Copied {len(text):,} characters")  # type: ignore[attr-defined]


class UserMessage(Copyable, Static):
    BINDINGS = [COPY]
    DEFAULT_CSS = """
    UserMessage {
        margin: 1 0 0 0;
        padding: 0 1;
        border-left: thick $accent;
        background: $boost;
    }
    UserMessage.queued { color: $text-muted; border-left: thick $accent 40%; }
    UserMessage.found { border-left: thick $success; }
    UserMessage:focus { border-left: thick $success; background: $boost 200%; }
    """

    def __init__(self, text: str, seq: int | None = None, queued: bool = False) -> None:
        super().__init__(Text(clean(text)), classes="queued" if queued else "")
        self.seq = seq
        self.text = text
        if queued:
            self.border_subtitle = "queued"

    def copy_text(self) -> str:
        return self.text

    def started(self, seq: int) -> None:
        self.seq = seq
        self.remove_class("queued")
        self.border_subtitle = ""


class CodeFence(Copyable, MarkdownFence):
    """A code block in an answer: selectable on its own, c copies just the code."""

    BINDINGS = [Binding("c", "copy", "Copy code", key_display="c")]
    DEFAULT_CSS = """
    CodeFence { border-left: blank; }  /* room for the mark: its Label covers an outline */
    CodeFence:focus { border-left: thick $success; }
    """

    def copy_text(self) -> str:
        return self.code


class AssistantMessage(Copyable, Markdown):
    BINDINGS = [COPY]
    BLOCKS = {**Markdown.BLOCKS, "fence": CodeFence, "code_block": CodeFence}
    DEFAULT_CSS = """
    AssistantMessage { margin: 1 0 0 0; padding: 0 1; }
    AssistantMessage.interrupted { border-left: thick $warning; }
    AssistantMessage:focus { outline-left: thick $success; background: $boost; }
    """

    def __init__(self, text: str = "", seq: int | None = None,
                 interrupted: bool = False) -> None:
        super().__init__(clean(text), classes="interrupted" if interrupted else "")
        self.seq = seq
        self._stream = None
        self.parts: list[str] = []

    async def add_text(self, fragment: str) -> None:
        if self._stream is None:
            self._stream = Markdown.get_stream(self)
        fragment = clean(fragment)
        self.parts.append(fragment)
        await self._stream.write(fragment)

    def copy_text(self) -> str:
        return self.source

    async def finish(self, seq: int | None = None, interrupted: bool = False) -> None:
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.seq = seq
        if interrupted:
            self.add_class("interrupted")
            self.border_subtitle = "interrupted"


class ToolBlock(Collapsible):
    BINDINGS = [Binding("c", "copy", "Copy result", key_display="c")]
    DEFAULT_CSS = """
    ToolBlock { margin: 0 0 0 2; border: none; padding: 0; background: transparent; }
    ToolBlock.error CollapsibleTitle { color: $error; }
    """

    def __init__(self, name: str, status: str | None, result: str, seq: int | None) -> None:
        preview = clean(result)
        if len(preview) > TOOL_PREVIEW_CHARS:
            preview = preview[:TOOL_PREVIEW_CHARS] + f"\n… {len(result):,} characters in all"
        title = f"⚙ {name or 'tool'} ({status or 'done'})"
        super().__init__(Static(Text(preview)), title=title, collapsed=True,
                         classes="error" if status == "error" else "")
        self.seq = seq
        self.result = result

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.result)
        self.notify(f"Copied the tool result ({len(self.result):,} characters)")


class Notice(Static):
    DEFAULT_CSS = """
    Notice { margin: 1 0 0 0; padding: 0 1; color: $text-muted; }
    Notice.error { color: $error; border-left: thick $error; }
    Notice.info { color: $text-muted; }
    Notice.card { border: round $primary 50%; color: $text; }
    """

    def __init__(self, text: str, kind: str = "info") -> None:
        super().__init__(Text(clean(text)), classes=kind)


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
        super().__init__(Text(divider_text(checkpoint)))
        self.checkpoint_id = checkpoint.id


def divider_text(cp: Checkpoint) -> str:
    kind = " · degraded" if cp.degraded else ""
    return (f"▲ above: summarized in checkpoint {cp.id} (gen {cp.generation}, "
            f"{cp.tokens_before:,} → {cp.tokens_after:,} tokens{kind}) · "
            f"below: raw tail from #{cp.first_retained_seq}")


SELECTABLE = "UserMessage, AssistantMessage, CodeFence, ToolBlock > CollapsibleTitle"


class ChatView(VerticalScroll):
    """Owns every transcript write: the app calls these methods and nothing else mounts here.
    A selected item (focused) moves with up/down; enter goes back to the prompt."""

    BINDINGS = [
        Binding("up", "select(-1)", "Previous", key_display="↑", show=False),
        Binding("down", "select(1)", "Next", key_display="↓", show=False),
        Binding("enter", "app.focus('prompt')", "Back to prompt", key_display="enter"),
    ]

    DEFAULT_CSS = """
    ChatView { padding: 0 1 1 1; scrollbar-size-vertical: 1; }
    ChatView > .older { color: $text-muted; text-align: center; }
    """

    def on_mount(self) -> None:
        self.anchor()

    async def show_history(self, messages: list[Message], checkpoint: Checkpoint | None) -> None:
        """Mount the newest messages; older ones load in pages as the user scrolls to the top
        (the database stays the source of truth, the screen holds what was looked at)."""
        await self.remove_children()
        self._older = list(messages[:-SHOWN_AT_OPEN]) if len(messages) > SHOWN_AT_OPEN else []
        self._checkpoint = checkpoint
        widgets = [w for w in map(message_widget, messages[-SHOWN_AT_OPEN:]) if w is not None]
        if self._older:
            widgets.insert(0, Static(self._older_text(), classes="older"))
        await self.mount_all(widgets)
        await self.set_checkpoint(checkpoint)
        self.scroll_end(animate=False, immediate=True)
        self.anchor()

    def _older_text(self) -> str:
        return f"… {len(self._older):,} earlier messages: scroll up to load them"

    async def load_older(self) -> int:
        """Mount the next page of older messages above the ones shown; how many were added."""
        if not getattr(self, "_older", None):
            return 0
        page, self._older = self._older[-SHOWN_AT_OPEN:], self._older[:-SHOWN_AT_OPEN]
        marker = self.query(".older").first()
        widgets = [w for w in map(message_widget, page) if w is not None]
        first = next((w for w in self.children if w is not marker), None)
        if first is not None:
            await self.mount_all(widgets, before=first)
        else:
            await self.mount_all(widgets)
        if self._older:
            marker.update(self._older_text())
        else:
            await marker.remove()
        await self.set_checkpoint(self._checkpoint)
        return len(page)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if new <= 0 and old > 0 and getattr(self, "_older", None):
            self.run_worker(self.load_older(), group="older", exclusive=True)

    async def set_checkpoint(self, checkpoint: Checkpoint | None) -> None:
        """Move the divider to where the active checkpoint's raw tail begins."""
        self._checkpoint = checkpoint
        for old in self.query(CheckpointDivider):
            await old.remove()
        if checkpoint is None:
            return
        divider = CheckpointDivider(checkpoint)
        after = [w for w in self.children if getattr(w, "seq", None) is not None
                 and w.seq >= checkpoint.first_retained_seq]
        if after:
            await self.mount(divider, before=after[0])
        else:
            await self.mount(divider)

    def on_key(self, event: events.Key) -> None:
        """Typing while an item is selected goes to the prompt, as if it had never left."""
        if (event.is_printable and event.character and self.screen.focused is not self
                and event.key not in self.screen.active_bindings):
            event.stop()
            prompt = self.app.query_one("#prompt")
            prompt.focus()
            prompt.insert(event.character)  # type: ignore[attr-defined]

    def select_last(self) -> bool:
        items = list(self.query(SELECTABLE))
        if items:
            items[-1].focus()
        return bool(items)

    def action_select(self, step: int) -> None:
        items = list(self.query(SELECTABLE))
        focused = self.screen.focused
        if not items:
            return
        if focused not in items:
            items[-1 if step < 0 else 0].focus()
            return
        index = items.index(focused) + step
        if 0 <= index < len(items):
            items[index].focus()
        elif index < 0 and getattr(self, "_older", None):
            self.run_worker(self.load_older(), group="older", exclusive=True)

    async def add(self, widget: Widget) -> Widget:
        await self.mount(widget)
        return widget

    async def add_user(self, text: str, queued: bool) -> UserMessage:
        return await self.add(UserMessage(text, queued=queued))  # type: ignore[return-value]

    async def add_assistant(self) -> AssistantMessage:
        return await self.add(AssistantMessage())  # type: ignore[return-value]

    async def add_notice(self, text: str, kind: str = "info") -> Notice:
        return await self.add(Notice(text, kind))  # type: ignore[return-value]


def message_widget(m: Message) -> Widget | None:
    if m.role == "user":
        return UserMessage(m.content, m.seq)
    if m.role == "assistant":
        if not m.content.strip():
            return None  # a tool-call step: its tools show below it
        return AssistantMessage(m.content, m.seq, interrupted=m.status == INTERRUPTED)
    if m.role == "tool":
        return ToolBlock(m.name or "tool", m.tool_status, m.content, m.seq)
    return None
