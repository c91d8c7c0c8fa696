"""SIGTERM, and SIGHUP when the terminal closes: the app quits as ctrl+q does (the answer so
far saved as interrupted, queued messages saved unsent, the terminal restored), and the CLI
exits with the status a shell expects of that signal (143, 129).

Whatever happens meanwhile, the process ends within EXIT_WITHIN_S of the first signal: a
watchdog thread exits it then. Once, closing the terminal left the app hung for good (Textual's
writer thread blocked on a full queue); SQLite's journal keeps the database whole however the
process ends, and a draft of the answer is saved about once a second."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from typing import Any, Callable

log = logging.getLogger("picochat.tui")
QUIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
EXIT_WITHIN_S = 2.0  # after a quit signal, the process ends by then, hung or not


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
        _exit_soon(128 + self.signalled)

    def on_loop(self) -> None:
        """The loop runs: a signal quits now, and one that came during set-up quits at once.
        A Python handler, not the loop's: it runs (and arms the watchdog) even while the loop
        is stuck, and hands the quit to the loop."""
        loop = asyncio.get_running_loop()

        def on_signal(signum: int, _frame: Any) -> None:
            self.signalled = self.signalled or signum
            _exit_soon(128 + self.signalled)
            loop.call_soon_threadsafe(self._quit, signum)
        for signum in QUIT_SIGNALS:
            signal.signal(signum, on_signal)
        if self.signalled:
            self._quit(self.signalled)

    def _quit(self, signum: int) -> None:
        log.info("quit_on_signal signal=%d", signum)
        self.signalled = self.signalled or signum
        self.quit(128 + signum)

    def loop_ends(self) -> None:
        """The loop is about to end: a signal is noted again (and arms the watchdog) until
        `release`."""
        for signum in QUIT_SIGNALS:
            signal.signal(signum, self._note)

    def release(self) -> None:
        """After the app has run: SIGTERM and SIGHUP do what they do by default again."""
        for signum in QUIT_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)


_watchdog: threading.Timer | None = None


def _exit_soon(status: int) -> None:
    """Arm, once, the thread that ends the process EXIT_WITHIN_S from now with `status`, if
    it has not ended by itself (a daemon thread: a normal exit does not wait for it)."""
    global _watchdog
    if _watchdog is not None:
        return

    def expire() -> None:
        log.warning("quit_forced status=%d", status)
        os._exit(status)
    _watchdog = threading.Timer(EXIT_WITHIN_S, expire)
    _watchdog.daemon = True
    _watchdog.start()
