"""The rows every job of the store reads: a session, a message, and the stamp that makes a
session the most recently active.

Written once, so the session's and the log's columns, and how a row becomes a `Session` or a
`Message`, cannot drift between `sessions.py`, `log.py` and `context.py`, which all read them.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any, Sequence

from picochat.errors import NameTaken, SessionNotFound
from picochat.messages import Message, Session
from picochat.storage.core import Core
from picochat.storage.names import check_session_name


class OnCore:
    """A job of the store on the transactional core: every call one transaction on `core`."""

    def __init__(self, core: Core) -> None:
        self.core = core


def fields(cols: str) -> tuple[str, ...]:
    """The column names of a `*_COLS` list: rows are read by name, never by position."""
    return tuple(name.strip() for name in cols.split(","))


SESSION_COLS = (
    "id, name, created_at, updated_at, model, active_context_checkpoint_id, context_generation, "
    "context_floor_seq, last_compressed_message_at, deleted_at, system_prompt, branch, "
    "forked_from, fork_seq"
)
MESSAGE_COLS = (
    "session_id, seq, role, content, tool_calls, tool_call_id, name, turn_id, tool_status, "
    "status, tokens, created_at, statements, reasoning"
)
_SESSION_FIELDS = fields(SESSION_COLS)
MESSAGE_FIELDS = fields(MESSAGE_COLS)

# "Most recently active" is a counter, not the clock (schema 15): each write that makes a
# session the latest gives it this, one above every session's, and stamps `updated_at` with
# the clock as it is (a session stamped in the future comes back to now). A clock stepped
# back can then never keep a session "latest" that another was written after.
NEXT_ACTIVITY = "(SELECT COALESCE(MAX(activity_seq), 0) + 1 FROM sessions)"


def touch(c: sqlite3.Connection, session_id: str, now: int) -> None:
    """The session is now the most recently active: next in write order, stamped `now`."""
    c.execute(f"UPDATE sessions SET updated_at = ?, activity_seq = {NEXT_ACTIVITY} "
              "WHERE id = ?", (now, session_id))


def session_row(c: sqlite3.Connection, session_id: str) -> Session:
    row = c.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(f"no session with id {session_id!r}", "`picochat sessions` lists them")
    return to_session(c, row)


def to_session(c: sqlite3.Connection, row: Sequence[Any]) -> Session:
    """A `SELECT {SESSION_COLS}` row, read by column name."""
    r = dict(zip(_SESSION_FIELDS, row))
    return Session(**r, message_count=max(r["fork_seq"], _own_max_seq(c, r["id"])))


def _own_max_seq(c: sqlite3.Connection, session_id: str) -> int:
    # Seqs run 1, 2, 3… and rows are never deleted, so the count is the maximum seq: one index
    # lookup instead of a scan that would grow with the history on every append and restore.
    return c.execute("SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?",
                     (session_id,)).fetchone()[0]


def last_seq(c: sqlite3.Connection, session_id: str) -> int:
    """The session's highest seq: its own rows', or, in a fork that has written none above
    it yet, the last of its source's it starts from (`storage/forks.py`). The next row
    appended takes the one after it, so a fork's rows follow its source's in seq order."""
    base = c.execute("SELECT fork_seq FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return max(base[0] if base else 0, _own_max_seq(c, session_id))


def to_message(row: Sequence[Any]) -> Message:
    """A `SELECT {MESSAGE_COLS}, <retracted>` row, read by column name."""
    r = dict(zip(MESSAGE_FIELDS + ("retracted",), row))
    calls = tuple(json.loads(r["tool_calls"])) if r["tool_calls"] else None
    return Message(r["session_id"], r["seq"], r["role"], r["content"], calls,
                   r["tool_call_id"], r["name"], r["turn_id"], r["tool_status"], r["status"],
                   r["tokens"], r["created_at"], retracted=bool(r["retracted"]),
                   statements=r["statements"], reasoning=r["reasoning"])


def check_new_name(c: sqlite3.Connection, name: str, but: str | None = None) -> None:
    """Refuse `name` for a session made or renamed (`but`: the one renamed): not one line of
    visible text, or a live session's other than `but`'s."""
    check_session_name(name)
    if c.execute("SELECT 1 FROM sessions WHERE name = ? AND deleted_at IS NULL AND id IS NOT ?",
                 (name, but)).fetchone():
        raise NameTaken(f"a session named {name!r} already exists", "pick another name")


def insert_session(c: sqlite3.Connection, now: int, name: str, model: str | None) -> str:
    """A new session row named `name` (refused if a live session has it), the most recently
    active; its id."""
    check_new_name(c, name)
    sid = "s_" + uuid.uuid4().hex[:12]
    c.execute("INSERT INTO sessions (id, name, created_at, updated_at, model, activity_seq) "
              f"VALUES (?, ?, ?, ?, ?, {NEXT_ACTIVITY})", (sid, name, now, now, model))
    return sid
