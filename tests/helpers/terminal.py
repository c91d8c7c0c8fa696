"""The app in a pseudo-terminal: keys in, the screen's text out."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import threading

from tests.helpers.waiting import WAIT_S, wait_until

CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b.")


class Terminal:
    """The app in a pty of 120×40, as its controlling terminal: keys in, screen bytes out
    (drained by a thread so the app never blocks on a full pty)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))

        def controlling() -> None:  # after setsid: the pty becomes this session's terminal
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.proc = subprocess.Popen([sys.executable, "-m", "picochat", "--session", "app"],
                                     env=env, stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True, preexec_fn=controlling)
        os.close(slave)
        self.output = bytearray()
        self.closed = False
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.output += data

    def text(self) -> str:
        return CSI.sub("", self.output.decode("utf-8", "replace"))

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait_for(self, what: str, timeout: float = WAIT_S) -> None:
        def shown() -> bool:
            if what in self.text():
                return True
            assert self.proc.poll() is None, f"the app ended before showing {what!r}"
            return False
        wait_until(shown, timeout, f"never saw {what!r}")

    def hang_up(self) -> None:
        """Close the terminal: the kernel sends SIGHUP, and the tty reads and writes fail."""
        self.closed = True
        os.close(self.master)

    def finish(self, timeout: float = WAIT_S) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            if not self.closed:
                os.close(self.master)
            self._reader.join(timeout=5)
        return code
