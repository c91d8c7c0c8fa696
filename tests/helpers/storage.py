"""Writing rows the way picochat's writers do, in one call: tests build histories with these.

`Store` inserts what it is given; a message's derived data (clean text, token count,
statements) is its writer's to compute. Tests append many messages by hand, so the keyword
form lives here, not on `Store`.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path
from typing import Any, Iterable, Sequence

from picochat.messages import COMPLETE, Message, NewMessage
from picochat.prepare import prepare
from picochat.storage.store import Store


def append_message(
    store: Store,
    session_id: str,
    role: str,
    content: str,
    *,
    tool_calls: Sequence[dict[str, Any]] | None = None,
    tool_call_id: str | None = None,
    name: str | None = None,
    turn_id: str | None = None,
    tool_status: str | None = None,
    status: str = COMPLETE,
    token_count: int | None = None,
    reasoning: str | None = None,
) -> Message:
    """Append one message; its seq comes from the durable maximum inside the transaction."""
    calls = tuple(dict(c) for c in tool_calls) if tool_calls else None
    return append_messages(store, session_id, [NewMessage(
        role, content, calls, tool_call_id, name, turn_id, tool_status, status,
        token_count, reasoning)])[0]


def append_messages(store: Store, session_id: str, news: Iterable[NewMessage], *,
                    if_draft: str | None = None) -> list[Message]:
    """Append `news` in one transaction, each prepared as picochat's writers prepare it."""
    return store.append_messages(session_id, [prepare(n) for n in news], if_draft=if_draft)


def database_at(path: Any, version: int) -> Any:
    """A database file as schema `version` left it (the migrations up to it, run raw): an open
    sqlite3 connection to it, for the test to fill before picochat opens and migrates it."""
    import sqlite3

    from picochat.storage.schema import MIGRATIONS

    conn = sqlite3.connect(path, isolation_level=None)
    for step in MIGRATIONS[:version]:
        sql = step[0] if isinstance(step, tuple) else step
        for statement in [s for s in sql.split(";") if s.strip()]:
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {version}")
    return conn


def old_session(conn: Any) -> None:
    """Session 's_a' ("a") with a question and its answer, written raw into a database an
    older picochat left (`database_at`), as its columns were then."""
    conn.execute("INSERT INTO sessions (id, name, created_at, updated_at) "
                 "VALUES ('s_a', 'a', 1, 1)")
    for seq, role in ((1, "user"), (2, "assistant")):
        conn.execute("INSERT INTO messages (session_id, seq, role, content, tokens, "
                     "created_at) VALUES ('s_a', ?, ?, 'old words', 2, 1)", (seq, role))


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def dead_owner(db: Path) -> str:
    """The lock token of a draft writer that has ended: its file is there, no one holds it."""
    from picochat.storage.owner import owners_dir

    owners_dir(db).mkdir(mode=0o700, exist_ok=True)
    (owners_dir(db) / "0123456789abcdef").touch(mode=0o600)
    return "0123456789abcdef"


def dead_draft(store: Store, session_id: str, turn_id: str, text: str) -> None:
    """An answer a killed picochat was streaming: its draft, whose writer has ended."""
    store.drafts.save(session_id, turn_id, text)
    conn = sqlite3.connect(store.path)
    with conn:
        conn.execute("UPDATE drafts SET owner_pid = ?, owner_lock = ? WHERE turn_id = ?",
                     (dead_pid(), dead_owner(store.path), turn_id))
    conn.close()
