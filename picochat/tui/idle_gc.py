"""Python's full garbage collections, moved from the middle of a stream to idle moments.

A full collection walks every object the collector tracks. A screen showing a long answer
holds a lot of them (every rendered line is a Strip with seven small caches), and CPython's
automatic full collections stalled the event loop 60-175 ms at a time while a 20k-token
answer streamed, longer as it grew. So the app keeps the young generations automatic (they
are cheap), freezes what start-up built (modules, litellm: never garbage), and runs the full
collection itself once nothing has run for a moment, when CPython would have wanted one.

While the app starts (imports, the first screen), nothing it allocates is garbage, yet
CPython's collections walked it over and over: 35-50 ms of the launch to the first frame. The
CLI turns collection off for that (`hold_until_first_frame`), and the app turns it back on
right after its first frame (`IdleCollector.start`).
"""

from __future__ import annotations

import gc
import time

NEVER = 1_000_000_000   # a threshold CPython never reaches: no automatic full collection
WANTED = 10             # young collections since the last full one before one is due
IDLE_S = 1.0            # nothing running for this long counts as idle
BACKSTOP = 100 * WANTED  # young collections after which a full one runs even while busy

_held = False  # collection off since the app's launch, until its first frame


def hold_until_first_frame() -> None:
    """No collection until the app has drawn its first frame (for `picochat`, before it
    imports the app)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release_hold() -> None:
    """Collection back on, if `hold_until_first_frame` turned it off (the app's first frame,
    or the CLI's end whatever happened before it)."""
    global _held
    if _held:
        _held = False
        gc.enable()


class IdleCollector:
    def __init__(self) -> None:
        self._saved: tuple[int, int, int] | None = None
        self._busy_until = 0.0
        self._freeze = False

    def start(self) -> None:
        """Right after the first frame: collection as this app wants it (and back on if it
        was held off while the app started). What start-up built (modules, classes, the
        first screen) is frozen first: held off, it all sat in the young generation, and the
        first young collection walked it, 9 ms just when the first keys arrive."""
        if _held:
            gc.freeze()
        release_hold()
        if self._saved is None:
            young, middle, old = gc.get_threshold()
            self._saved = (young, middle, WANTED if old == NEVER else old)  # another app's
            gc.set_threshold(young, middle, NEVER)

    def freeze_when_idle(self) -> None:
        """Start-up is over (litellm imported): at the next idle tick, collect once and leave
        what exists then out of every later full collection."""
        self._freeze = True

    def tick(self, busy: bool) -> bool:
        """Called every half second; True when it collected."""
        now = time.monotonic()
        if busy:
            self._busy_until = now
            if self._saved is not None and gc.get_count()[2] >= BACKSTOP:
                gc.collect()  # an answer streaming for minutes: one stall beats growing
                return True
            return False
        if self._saved is None or now - self._busy_until < IDLE_S:
            return False
        if self._freeze:
            self._freeze = False
            gc.collect()
            gc.freeze()
            return True
        if gc.get_count()[2] < WANTED:
            return False
        gc.collect()
        return True

    def stop(self) -> None:
        """Back to CPython's own policy (tests run many apps in one process)."""
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
            gc.unfreeze()
