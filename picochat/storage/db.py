"""Opening the database: pragmas, migrations, and errors a user can read.

A file that is not SQLite, another program's SQLite file, or a schema newer than this code is
reported and left untouched: picochat never replaces or "repairs" a user's database behind
their back.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from picochat.errors import StorageError
from picochat.fsutil import database_family, make_owner_only, make_private_dir
from picochat.storage.schema import MIGRATIONS, SCHEMA_VERSION

BUSY_TIMEOUT_MS = 10_000  # how long a write waits for another picochat's write to finish


def busy_timeout_ms() -> int:
    """`BUSY_TIMEOUT_MS`, or the test-only PICOCHAT_BUSY_TIMEOUT_MS (a positive integer)."""
    raw = os.environ.get("PICOCHAT_BUSY_TIMEOUT_MS", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else BUSY_TIMEOUT_MS


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode; writers open their own `BEGIN IMMEDIATE`."""
    try:
        make_private_dir(path.parent)
    except OSError as exc:
        raise StorageError(f"{path.parent}: cannot create the data directory: {exc.strerror}",
                           "set PICOCHAT_DATA_DIR or --data-dir to a writable folder") from None
    _create_private(path)
    _make_family_private(path)
    conn: sqlite3.Connection | None = None
    try:
        timeout_ms = busy_timeout_ms()
        conn = sqlite3.connect(str(path), timeout=timeout_ms / 1000,
                               isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {timeout_ms}")
        conn.execute("PRAGMA foreign_keys = ON")
        _refuse_unknown(conn, path)  # before WAL: switching modes would change the file
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StorageError(f"{path}: cannot switch the database to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        migrate(conn, path)
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, sqlite3.DatabaseError):
            raise describe_error(path, exc, opening=True) from None
        raise
    return conn


def _create_private(path: Path) -> None:
    """Create a missing database file 0600 before SQLite opens it: SQLite gives the -wal and
    -shm files the database file's mode, so no other user can read a conversation. An
    existing file (or symlink) is left as it is; a failure is left for SQLite to report."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        pass


def _make_family_private(path: Path) -> None:
    """A database an older picochat made (or one made under umask 022) is world-readable, and
    so are the -wal and -shm SQLite gives its mode: make them 0600 before SQLite opens them.
    Only regular files this user owns, never through a symlink (`make_owner_only`)."""
    for member in database_family(path):
        make_owner_only(member)


def _refuse_unknown(conn: sqlite3.Connection, path: Path) -> None:
    """A schema newer than this code, or another program's SQLite file (tables but no schema
    version: picochat's own first migration sets the version with its tables)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"{path}: database schema version {version} is newer than this picochat "
            f"understands ({SCHEMA_VERSION}); left untouched", "upgrade picochat")
    if version == 0 and conn.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchone():
        raise StorageError(f"{path}: not a picochat database (an SQLite file with other "
                           "tables); left untouched", "move it aside or point --data-dir elsewhere")


def describe_error(path: Path, exc: sqlite3.Error, opening: bool = False) -> StorageError:
    """One line for a sqlite error: what, where (`path`), what to do. `opening`: raised while
    `connect` opened the file, before anything was written to it."""
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        if opening:
            return StorageError(f"{path}: not a picochat database, or damaged ({text}); left "
                                "untouched", "move it aside or point --data-dir elsewhere")
        return StorageError(f"{path}: the database is damaged ({text})",
                            "keep a copy, then move it aside or point --data-dir elsewhere")
    if "readonly" in text or "unable to open" in text:
        what = _read_only(path)
        if what is not None:
            return StorageError(f"{path}: {what} ({text})",
                                "make it writable, or point --data-dir elsewhere")
        return StorageError(f"{path}: cannot open or write the database ({text})",
                            "check the folder and its permissions, or use --data-dir")
    if "full" in text:
        return StorageError(f"{path}: the disk is full; that write was not saved",
                            "free some space and try again")
    if "locked" in text or "busy" in text:
        return StorageError(f"{path}: the database stayed locked by another picochat",
                            "try again in a moment")
    return StorageError(f"{path}: database error: {text}")


def _read_only(path: Path) -> str | None:
    """Which of the database file and its folder cannot be written, if either (SQLite needs
    both: the folder for its -wal and -shm files, or for a new database)."""
    try:
        folder = not os.access(path.parent, os.W_OK)
        if not path.exists():
            return "cannot create the database: its folder is read-only" if folder else None
        file = not os.access(path, os.W_OK)
    except OSError:
        return None
    if file and folder:
        return "the database and its folder are read-only"
    if file:
        return "the database file is read-only"
    return "the database's folder is read-only" if folder else None


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the schema to `SCHEMA_VERSION`, one step per version, each in its own transaction.

    `connect` has already refused a schema newer than this code."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    while version < SCHEMA_VERSION:
        step = MIGRATIONS[version]
        with transaction(conn):
            # Re-check inside the lock: another process may have migrated meanwhile.
            current = conn.execute("PRAGMA user_version").fetchone()[0]
            if current != version:
                version = current
                continue
            sql, carry = step if isinstance(step, tuple) else (step, None)
            for statement in _statements(sql):
                conn.execute(statement)
            if carry is not None:
                carry(conn)
            conn.execute(f"PRAGMA user_version = {version + 1}")
        version += 1
    return version


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


LOCK_SLICE_MS = 100  # a store's writer waits for another process's lock in slices this long


def begin_waiting(conn: sqlite3.Connection, mode: str, deadline: Callable[[], float]) -> None:
    """`BEGIN mode` on a connection whose busy timeout is one LOCK_SLICE_MS, tried again while
    another process holds the write lock, until `deadline()` (a `time.monotonic()` instant,
    read again each slice: a quitting app pulls it in, and the wait ends then, not 10 s on)."""
    while True:
        try:
            conn.execute(f"BEGIN {mode}")
            return
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() >= deadline():
                raise


def _busy(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY or \
        "locked" in str(exc)


@contextmanager
def transaction(conn: sqlite3.Connection, mode: str = "IMMEDIATE",
                deadline: Callable[[], float] | None = None) -> Iterator[sqlite3.Connection]:
    """`BEGIN IMMEDIATE … COMMIT`, or a full rollback on any exception. With `deadline`, the
    lock is waited for in slices (`begin_waiting`)."""
    if deadline is None:
        conn.execute(f"BEGIN {mode}")
    else:
        begin_waiting(conn, mode, deadline)
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # SQLite may already have rolled back (e.g. SQLITE_FULL)
            conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


def connect_reader(path: Path) -> sqlite3.Connection:
    """A second connection to a database `connect` has opened, for reads only: in WAL mode
    it never waits for the writer connection's transactions."""
    try:
        conn = sqlite3.connect(str(path), timeout=busy_timeout_ms() / 1000,
                               isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms()}")
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.DatabaseError as exc:
        raise describe_error(path, exc, opening=True) from None
    return conn
