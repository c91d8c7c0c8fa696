"""Transcript items the user can select (a click, or alt+up then up/down) and copy with c."""

from __future__ import annotations

from textual.binding import Binding

from picochat.tui.safe import literal

COPY = Binding("c", "copy", "Copy", key_display="c")


class Copyable:
    """Mixed into a widget: focusable, and `c` puts `copy_text()` on the clipboard."""

    can_focus = True

    def copy_text(self) -> str:
        raise NotImplementedError

    def action_copy(self) -> None:
        text = self.copy_text()
        self.app.copy_to_clipboard(text)  # type: ignore[attr-defined]
        self.notify(literal(f"Copied {len(text):,} characters"))  # type: ignore[attr-defined]
