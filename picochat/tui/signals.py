"""SIGTERM, and SIGHUP when the terminal closes: the app quits as ctrl+q does (the answer so
far saved as interrupted, queued messages saved unsent, the terminal restored), and the CLI
exits with the status a shell expects of that signal (143, 129)."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any, Callable

log = logging.getLogger("picochat.tui")
QUIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class QuitSignals:
    """Before the event loop runs and while the app shuts down, a signal is only noted (never
    fatal); while it runs, the first one quits through `quit(return_code)`."""

    def __init__(self, quit: Callable[[int], None]) -> None:
        self.quit = quit
        self.signalled: int | None = None
        for signum in QUIT_SIGNALS:
            signal.signal(signum, self._note)

    def _note(self, signum: int, _frame: Any) -> None:
        self.signalled = self.signalled or signum

    def on_loop(self) -> None:
        """The loop runs: a signal quits now, and one that came during set-up quits at once."""
        loop = asyncio.get_running_loop()
        for signum in QUIT_SIGNALS:
            loop.add_signal_handler(signum, self._quit, signum)
        if self.signalled:
            self._quit(self.signalled)

    def _quit(self, signum: int) -> None:
        log.info("quit_on_signal signal=%d", signum)
        self.signalled = self.signalled or signum
        self.quit(128 + signum)

    def loop_ends(self) -> None:
        """The loop would reset them to their fatal default: noted again until `release`."""
        loop = asyncio.get_running_loop()
        for signum in QUIT_SIGNALS:
            loop.remove_signal_handler(signum)
            signal.signal(signum, self._note)

    def release(self) -> None:
        """After the app has run: SIGTERM and SIGHUP do what they do by default again."""
        for signum in QUIT_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
