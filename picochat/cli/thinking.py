"""`picochat ask` while a reasoning model thinks: stdout is the answer, so thinking never goes
there. A person at a terminal still learns why nothing arrives yet: stderr shows a dim
"thinking…" while it lasts, then "thought for N s" on its own line. A pipe or a file on stderr
gets nothing (scripts read stderr for errors)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

DIM, RESET, CLEAR_LINE = "\x1b[2m", "\x1b[0m", "\r\x1b[K"


class ThinkingLine:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.shown = _is_terminal(self.stream)
        self._since: float | None = None

    def thinking(self) -> None:
        """A piece of thinking arrived."""
        if self._since is None:
            self._since = time.monotonic()
            self._write(f"{DIM}picochat: thinking…{RESET}")

    def done(self) -> None:
        """The answer (or a tool call, or the end of the turn) came: close the line."""
        if self._since is None:
            return
        seconds = time.monotonic() - self._since
        self._since = None
        took = f"{seconds:.0f} s" if seconds >= 0.5 else "<1 s"
        self._write(f"{CLEAR_LINE}{DIM}picochat: thought for {took}{RESET}\n")

    def _write(self, text: str) -> None:
        if not self.shown:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except OSError:  # the terminal is gone: the answer matters, not this line
            self.shown = False


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
