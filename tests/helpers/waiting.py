"""Waiting for the event a test means, never for a fixed time.

CI machines are busy: a step that takes 50 ms on a quiet machine may take two seconds there. So
a test never sleeps and then looks; it waits until what it means has happened (a row saved, a
widget shown, a line printed, a file written). Each helper here polls a condition and gives up
only after a deadline that is a failure bound (the thing will never happen), not a guess at how
long it takes: `WAIT_S`, generous on purpose. A negative claim ("nothing was sent") waits first
for the event that would come after the thing that must not happen (the notice that answered
the command), then looks.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, Callable

# How long a wait may take before the test fails: far beyond any real step under load.
WAIT_S = 60.0
# How often a condition is looked at again. Not a wait for anything: between two looks the app
# (or the other process) runs. No event exists to wait on for an arbitrary condition.
POLL_S = 0.02


async def settle(pilot: Any, app: Any, until: Callable[[], Any], timeout: float = WAIT_S,
                 what: str = "the app never got there") -> None:
    """Let the app run until `until()` holds (the worker and the UI are asynchronous)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not until():
        assert loop.time() < deadline, what
        await pilot.pause(POLL_S)


def wait_until(until: Callable[[], Any], timeout: float = WAIT_S,
               what: str = "the condition never held") -> Any:
    """Block until `until()` returns something true, and return it (for another process's
    rows, files and output)."""
    deadline = time.monotonic() + timeout
    while not (got := until()):
        assert time.monotonic() < deadline, what
        time.sleep(POLL_S)
    return got


async def wait_until_async(until: Callable[[], Any], timeout: float = WAIT_S,
                           what: str = "the condition never held") -> Any:
    """`wait_until` for a test that runs on an event loop: the loop keeps running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (got := until()):
        assert loop.time() < deadline, what
        await asyncio.sleep(POLL_S)
    return got


def wait_for_file(path: Path, timeout: float = WAIT_S) -> Path:
    """Block until `path` exists."""
    wait_until(path.exists, timeout, f"{path} never appeared")
    return path


def read_until(stream: Any, text: str, timeout: float = WAIT_S) -> str:
    """What a pipe delivered until `text` appeared (raw reads: the CLI streams unbuffered)."""
    got = b""
    deadline = time.monotonic() + timeout
    os.set_blocking(stream.fileno(), False)
    while text.encode() not in got:
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {text!r}; got {got!r}")
        try:
            chunk = os.read(stream.fileno(), 4096)
        except BlockingIOError:
            time.sleep(POLL_S)
            continue
        if not chunk:
            raise AssertionError(f"the stream ended before {text!r}; got {got!r}")
        got += chunk
    return got.decode()
