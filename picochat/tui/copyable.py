"""Transcript items the user can select (a click, or alt+up then up/down), copy with c and,
for a message of the user's or an answer, pin with alt+p.

Every copy goes through `copy_shown`, and the app's `copy_to_clipboard` cleans what it is
given: the clipboard holds the text as the screen shows it, never an escape sequence or an
invisible character the screen dropped or named (pasted into a shell, that would run what
the reader never saw).
"""

from __future__ import annotations

from textual.app import App
from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget

from picochat.tui.safe import literal

COPY = Binding("c", "copy", "Copy", key_display="c")
# not a letter: typing on a selected message goes to the prompt, and "please" must not pin it
PIN = Binding("alt+p", "pin", "Pin", key_display="alt+p")


class PinRequested(Message):
    """The user pressed alt+p on a saved message: its owner (the app) pins it."""

    def __init__(self, seq: int) -> None:
        super().__init__()
        self.seq = seq


def copy_shown(node: Widget | App, text: str, what: str = "") -> None:
    """Put `text` on the clipboard as the screen shows it (the app cleans it) and say how
    much went: the count is of what was copied, not of the raw text."""
    app = node.app
    app.copy_to_clipboard(text)
    count = f"{len(app.clipboard):,} characters"
    node.notify(literal(f"Copied {what} ({count})"  # type: ignore[arg-type]
                        if what else f"Copied {count}"))  # PicochatApp.notify takes a Text


class Copyable:
    """Mixed into a widget: focusable, and `c` puts `copy_text()` on the clipboard."""

    can_focus = True

    def copy_text(self) -> str:
        raise NotImplementedError

    def action_copy(self) -> None:
        copy_shown(self, self.copy_text())  # type: ignore[arg-type]


class Pinnable(Copyable):
    """A saved message (it has a seq): alt+p asks the app to pin it (`PinRequested`)."""

    seq: int | None

    def action_pin(self) -> None:
        if self.seq is None:  # queued or still streaming: nothing saved to pin yet
            self.notify(literal("Not saved yet: pin it once it is"),  # type: ignore[attr-defined]
                        severity="warning")
            return
        self.post_message(PinRequested(self.seq))  # type: ignore[attr-defined]
