"""Test-only pause points for the crash harness (tests/reliability).

With PICOCHAT_CRASH_POINT set to a point's name, the process creates the file named by
PICOCHAT_CRASH_FILE when it gets there and waits to be killed, so a test can SIGKILL it at
exactly that moment. Unset, as always outside that harness, a call costs one lookup.
"""

from __future__ import annotations

import os
import time

POINTS = ("user_written", "summary_in_flight", "before_commit", "in_commit", "quitting",
          "in_rewind", "in_fork")


def reached(point: str) -> None:
    if os.environ.get("PICOCHAT_CRASH_POINT") != point:
        return
    marker = os.environ.get("PICOCHAT_CRASH_FILE")
    if marker:
        with open(marker, "w", encoding="utf-8"):
            pass
    while True:  # until the harness kills us
        time.sleep(1)
