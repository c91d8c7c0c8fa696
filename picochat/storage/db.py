"""Opening the database: pragmas, migrations, and errors a user can read.

A file that is not SQLite, or a schema newer than this code, is reported and left untouched:
picochat never replaces or "repairs" a user's database behind their back.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from picochat.errors import StorageError
from picochat.storage.schema import MIGRATIONS, SCHEMA_VERSION

BUSY_TIMEOUT_MS = 10_000


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode; writers open their own `BEGIN IMMEDIATE`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"{path.parent}: cannot create the data directory: {exc.strerror}",
                           "set PICOCHAT_DATA_DIR or --data-dir to a writable folder") from None
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000,
                               isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        _refuse_newer_schema(conn, path)  # before WAL: switching modes would change the file
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StorageError(f"{path}: cannot switch the database to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        migrate(conn, path)
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, sqlite3.DatabaseError):
            raise describe_error(path, exc) from None
        raise
    return conn


def _refuse_newer_schema(conn: sqlite3.Connection, path: Path) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"{path}: database schema version {version} is newer than this picochat "
            f"understands ({SCHEMA_VERSION}); left untouched", "upgrade picochat")


def describe_error(path: Path, exc: sqlite3.Error) -> StorageError:
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        return StorageError(f"{path}: not a picochat database or damaged ({text}); left untouched",
                            "move it aside or point --data-dir elsewhere")
    if "readonly" in text or "unable to open" in text:
        return StorageError(f"{path}: cannot write the database ({text})",
                            "check the folder's permissions or use --data-dir")
    if "full" in text:
        return StorageError(f"{path}: the disk is full; nothing was written", "free some space")
    if "locked" in text or "busy" in text:
        return StorageError(f"{path}: the database stayed locked by another picochat",
                            "try again in a moment")
    return StorageError(f"{path}: database error: {text}")


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
            for statement in _statements(step):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
        version += 1
    return version


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


@contextmanager
def transaction(conn: sqlite3.Connection, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
    """`BEGIN IMMEDIATE … COMMIT`, or a full rollback on any exception."""
    conn.execute(f"BEGIN {mode}")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # SQLite may already have rolled back (e.g. SQLITE_FULL)
            conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")
