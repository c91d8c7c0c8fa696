"""The live line where an answer will appear: what the turn is doing, and for how long.

Waiting for a first token, or for a 35-second compaction, used to show nothing in the
transcript. This line says which ("waiting for the answer", "compacting the context") and
counts the seconds, until the answer's first words (or thinking) replace it."""

from __future__ import annotations

import time

from textual.widgets import Static

from picochat.tui.safe import literal
from picochat.tui.status import SPINNER

FRAME_SECONDS = 0.25


class Pending(Static):
    DEFAULT_CSS = """
    Pending { margin: 1 0 0 2; color: $text-muted; text-style: italic; }
    """

    def __init__(self, doing: str, stop: str = "Esc stops") -> None:
        super().__init__(classes="pending")
        self.doing = doing
        self.stop = stop  # how to stop it, when it can be stopped
        self._since = time.monotonic()

    def on_mount(self) -> None:
        self._show()
        self.set_interval(FRAME_SECONDS, self._show)

    def now(self, doing: str) -> None:
        """Something else is happening now: say it, and count from now."""
        if doing != self.doing:
            self.doing, self._since = doing, time.monotonic()
            self._show()

    def _show(self) -> None:
        now = time.monotonic()  # the frame follows the clock, as the top bar's spinner does
        spin = SPINNER[int(now / FRAME_SECONDS) % len(SPINNER)]
        tail = f" · {self.stop}" if self.stop else ""
        self.update(literal(f"{spin} {self.doing} · {now - self._since:.0f}s{tail}"))
