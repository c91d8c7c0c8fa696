"""The transactional core every storage class is built on: the connections, their locks, the
store's one I/O thread, and the guards that make each read or write one transaction.

Kept apart from what is stored so that how a transaction is taken (a write waits for another
process's lock in short slices, a read never waits for a write, sqlite errors become one
readable `StorageError`) is written once, and the classes that hold the tables
(`SessionRows`, `MessageLog`, `ContextPointers`, `Drafts`, `Search`, `Traits`) only say what
they read and write inside one.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Literal, TypeVar

from picochat.storage.db import (LOCK_SLICE_MS, busy_timeout_ms, connect, connect_reader,
                                 describe_error, transaction)

Clock = Callable[[], int]
T = TypeVar("T")


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def open_core(path: Path, clock: Clock = wall_clock_ms) -> "Core":
    writer = connect(path)
    try:
        reader = connect_reader(path)
    except BaseException:
        writer.close()
        raise
    return Core(writer, path, clock, reader)


class Core:
    """Thread-safe transactions over two connections; short transactions, no cached state.

    Writes and reads have a connection each, so a write waiting up to the busy timeout for
    another process's lock never holds up a read: in WAL mode readers do not wait for writers.
    `io` runs a call on the store's own thread, for callers on an event loop."""

    def __init__(self, conn: sqlite3.Connection, path: Path, clock: Clock = wall_clock_ms,
                 reader: sqlite3.Connection | None = None) -> None:
        self._conn = conn
        self._reader = reader or conn
        self.path = path
        self.clock = clock  # the stamp every row written gets (tests give a fixed one)
        self._lock = threading.RLock()
        self._rlock = self._lock if reader is None else threading.RLock()
        self._executor: ThreadPoolExecutor | None = None
        # a write waits for another process's lock in short slices, up to the busy timeout
        # or `stop_waiting`'s instant, whichever is first
        self._conn.execute(f"PRAGMA busy_timeout = {LOCK_SLICE_MS}")
        self._stop_waiting_at = math.inf
        self._file = _identity(path)
        self._seen_version: int | None = self._conn.execute("PRAGMA data_version").fetchone()[0]

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        with self._lock, self._rlock:
            self._conn.close()
            if self._reader is not self._conn:
                self._reader.close()

    def outside_changes(self) -> tuple[bool, bool]:
        """(replaced, others_wrote): whether the database file is gone or another file now
        (what this store writes, no one will read again), and whether another process
        committed since the last call. `PRAGMA data_version` on the writer connection changes
        only for other connections' commits, never for its own."""
        replaced = self._file is not None and _identity(self.path) != self._file
        with self._lock:
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        wrote = self._seen_version is not None and version != self._seen_version
        self._seen_version = version
        return replaced, wrote

    def stop_waiting(self, within_s: float) -> None:
        """From now on a write waits at most `within_s` more for another process's lock: a
        quitting app bounds its shutdown, and says what it could not save."""
        self._stop_waiting_at = min(self._stop_waiting_at, time.monotonic() + within_s)

    def write(self) -> "_Guard":
        """`with core.write() as c:` one write transaction (`BEGIN IMMEDIATE`)."""
        return _Guard(self, "IMMEDIATE", self._conn, self._lock)

    def read(self) -> "_Guard":
        """`with core.read() as c:` one consistent read, on the reader connection."""
        return _Guard(self, "DEFERRED", self._reader, self._rlock)

    def _lock_deadline(self) -> Callable[[], float]:
        """When a write begun now stops waiting for the lock: the busy timeout, or sooner."""
        full = time.monotonic() + busy_timeout_ms() / 1000
        return lambda: min(full, self._stop_waiting_at)

    async def io(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on the store's one thread, in submission order, while the
        event loop goes on. A caller cancelled meanwhile still waits for the outcome before
        the cancellation goes on: the write may have committed, and the caller must know."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="picochat-db")
        future = asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(fn, *args, **kwargs))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done():
                try:
                    await asyncio.wait([future])
                except asyncio.CancelledError:
                    pass
            raise


def _identity(path: Path) -> tuple[int, int] | None:
    """The file a path names now (device, inode); None when there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


class _Guard:
    """Lock + transaction + translation of sqlite errors into one readable `StorageError`."""

    def __init__(self, core: Core, mode: str, conn: sqlite3.Connection,
                 lock: threading.RLock) -> None:
        self.core, self.mode, self.conn, self.lock = core, mode, conn, lock

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        try:
            self._tx = transaction(self.conn, self.mode, self.core._lock_deadline()
                                   if self.mode == "IMMEDIATE" else None)
            return self._tx.__enter__()
        except sqlite3.Error as exc:
            self.lock.release()
            raise describe_error(self.core.path, exc) from None
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> Literal[False]:
        try:
            self._tx.__exit__(kind, exc, tb)
        except sqlite3.Error as err:
            raise describe_error(self.core.path, err) from None
        finally:
            self.lock.release()
        if isinstance(exc, sqlite3.Error):
            raise describe_error(self.core.path, exc) from None
        return False
