"""Sessions: the `sessions` table's rows, created, found, listed, renamed, deleted, and
which one was written to or opened last.

Its own class because a session is the name and settings a conversation goes by, not what was
said in it (`log.py`) nor what the model is sent of it (`context.py`): a rename or a model
change never touches the log or the context.
"""

from __future__ import annotations

import sqlite3

from picochat.errors import SessionNotFound
from picochat.messages import Session
from picochat.storage.branches import current_path
from picochat.storage.forks import detach_forks
from picochat.storage.rows import (NEXT_ACTIVITY, SESSION_COLS, OnCore, check_new_name,
                                   insert_session, session_row, to_session)
from picochat.storage.sql import NO_UPPER_BOUND

_BY_ACTIVITY = "ORDER BY activity_seq DESC, rowid DESC"


class SessionRows(OnCore):
    """The sessions of the database, each call one transaction on `core`."""

    def create_session(self, name: str | None = None, model: str | None = None) -> Session:
        with self.core.write() as c:
            sid = self._insert_session(c, _free_name(c) if name is None else name, model)
        return self.session(sid)

    def find_or_create_session(self, ref: str | None) -> Session:
        """The live session `ref` names (an id or a name), or a new one so named, looked up and
        created in one write transaction: two first `ask`s on a new name share one session.
        `None` picks a free name."""
        with self.core.write() as c:
            row = None
            if ref is not None:
                row = c.execute("SELECT id FROM sessions WHERE deleted_at IS NULL AND "
                                "(id = ? OR name = ?) ORDER BY (id = ?) DESC LIMIT 1",
                                (ref, ref, ref)).fetchone()
            sid = row[0] if row else self._insert_session(c, ref or _free_name(c), None)
        return self.session(sid)

    def _insert_session(self, c: sqlite3.Connection, name: str, model: str | None) -> str:
        return insert_session(c, self.core.clock(), name, model)

    def session(self, session_id: str) -> Session:
        with self.core.read() as c:
            return session_row(c, session_id)

    def find_session(self, ref: str) -> Session | None:
        """A live session by id, else by name."""
        with self.core.read() as c:
            row = c.execute(
                f"SELECT {SESSION_COLS} FROM sessions WHERE deleted_at IS NULL AND "
                "(id = ? OR name = ?) ORDER BY (id = ?) DESC LIMIT 1", (ref, ref, ref)).fetchone()
            return to_session(c, row) if row else None

    def require_session(self, ref: str) -> Session:
        found = self.find_session(ref)
        if found is None:
            raise SessionNotFound(f"no session named {ref!r}",
                                  "`picochat sessions` lists them")
        return found

    def latest_session(self) -> Session | None:
        """The live session written to last (created, appended to, cleared, uncompacted),
        by the order of those writes, not by the clock's stamps (`NEXT_ACTIVITY`)."""
        with self.core.read() as c:
            row = c.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE deleted_at IS NULL "
                            f"{_BY_ACTIVITY} LIMIT 1").fetchone()
            return to_session(c, row) if row else None

    def mark_opened(self, session_id: str) -> None:
        """The app now shows this session: it is the most recently active (`latest_session`,
        the one current session of the app's next start and of every command without -s).
        `last_opened_at` is the clock, or one above the newest stamp if that is not earlier
        (two opens in one millisecond, a clock set back)."""
        with self.core.write() as c:
            c.execute("UPDATE sessions SET last_opened_at = MAX(?, 1 + COALESCE("
                      f"(SELECT MAX(last_opened_at) FROM sessions), 0)), activity_seq = "
                      f"{NEXT_ACTIVITY} WHERE id = ?", (self.core.clock(), session_id))

    def last_opened_session(self) -> Session | None:
        """The live session the app opened last; None when it never opened one that is still
        there (the caller then takes `latest_session`)."""
        with self.core.read() as c:
            row = c.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE deleted_at IS NULL "
                            "AND last_opened_at IS NOT NULL "
                            "ORDER BY last_opened_at DESC LIMIT 1").fetchone()
            return to_session(c, row) if row else None

    def list_sessions(self) -> list[Session]:
        with self.core.read() as c:
            rows = c.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE deleted_at IS NULL "
                             f"{_BY_ACTIVITY}").fetchall()  # the first is `latest_session`
            return [to_session(c, r) for r in rows]

    def first_lines(self, session_ids: list[str], chars: int = 200) -> dict[str, str]:
        """Each session's first user message, its first `chars` characters (the picker shows
        how a conversation began); a session with none is left out."""
        out: dict[str, str] = {}
        with self.core.read() as c:
            for sid in session_ids:  # on the branch in use; a fork's begins in its source
                # step by step from the root, whose rows come first, by the (session, seq)
                # index: one query over the path's OR sorted every user message of a source
                for step, branch, last in reversed(current_path(c, sid).steps):
                    row = c.execute("SELECT substr(content, 1, ?) FROM messages WHERE "
                                    "session_id = ? AND branch = ? AND seq <= ? AND role = "
                                    "'user' ORDER BY seq LIMIT 1",
                                    (chars, step, branch, NO_UPPER_BOUND if last is None
                                     else last)).fetchone()
                    if row is not None:
                        out[sid] = row[0]
                        break
        return out

    def set_session_model(self, session_id: str, model: str) -> None:
        with self.core.write() as c:
            c.execute("UPDATE sessions SET model = ? WHERE id = ?", (model, session_id))

    def set_session_system_prompt(self, session_id: str, prompt: str | None) -> None:
        """The session's own system prompt; None goes back to the agent's."""
        with self.core.write() as c:
            c.execute("UPDATE sessions SET system_prompt = ? WHERE id = ?", (prompt, session_id))

    def rename_session(self, session_id: str, name: str) -> Session:
        with self.core.write() as c:
            check_new_name(c, name, but=session_id)
            c.execute("UPDATE sessions SET name = ? WHERE id = ?", (name, session_id))
        return self.session(session_id)

    def delete_session(self, session_id: str) -> None:
        """Soft delete: hidden from every list, rows kept."""
        with self.core.write() as c:
            c.execute("UPDATE sessions SET deleted_at = ? WHERE id = ? AND deleted_at IS NULL",
                      (self.core.clock(), session_id))

    def purge_session(self, session_id: str) -> None:
        """Delete for good: messages, checkpoints and timeline rows go with it (cascade)."""
        with self.core.write() as c:
            detach_forks(c, session_id)  # a fork keeps every row it reads
            c.execute("INSERT INTO messages_fts(messages_fts, rowid, content) "
                      "SELECT 'delete', id, content FROM messages WHERE session_id = ?",
                      (session_id,))
            c.execute("DELETE FROM sessions WHERE id = ?", (session_id,))


def _free_name(c: sqlite3.Connection) -> str:
    taken = {r[0] for r in c.execute("SELECT name FROM sessions WHERE deleted_at IS NULL")}
    n = 1
    while f"chat-{n}" in taken:
        n += 1
    return f"chat-{n}"
