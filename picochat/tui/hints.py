"""The slash-command hints above the prompt: which commands what is typed could be, with
their arguments and help, as the user types."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from picochat.tui import slash

ROWS = 12  # commands shown at once


class SlashHints(Static):
    DEFAULT_CSS = """
    SlashHints { height: auto; max-height: 12; color: $text-muted; padding: 0 2;
                 display: none; }
    SlashHints.open { display: block; }
    """

    @property
    def is_open(self) -> bool:
        return self.has_class("open")

    def show_for(self, typed: str) -> None:
        """The commands `typed` could be; closed when it is no command (or has its argument)."""
        matches = slash.completions(typed)
        if not matches:
            self.close()
            return
        shown = matches[:ROWS] if len(matches) <= ROWS else matches[:ROWS - 1]
        text = Text()
        for c in shown:
            text.append(f"/{c.name} {c.args}".ljust(26), style="bold")
            text.append(c.help + "\n")
        if len(shown) < len(matches):
            text.append(f"… {len(matches) - len(shown)} more: keep typing, or Tab",
                        style="italic")
        text.rstrip()
        self.update(text)
        self.add_class("open")

    def close(self) -> None:
        self.remove_class("open")
