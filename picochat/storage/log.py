"""The message log: the append-only `messages` table (and its full-text index), appended to
and read back.

Its own class because the log is the truth (ARCHITECTURE rule 1): rows are only ever
inserted, each given its `seq` inside the insert's transaction from the durable maximum, so
two processes appending to one session never collide and a seq is never reused. A message
arrives prepared by its writer (`picochat/prepare.py`): the log inserts it and computes none of
it. A plain append does not move the context's generation: what it adds lands after any
checkpoint's cut, in the raw tail.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable

from picochat.messages import ROLES, Message, PreparedMessage, Session
from picochat.storage.drafts import forget_drafts, has_draft
from picochat.storage.rows import (MESSAGE_COLS, MESSAGE_FIELDS, OnCore, last_seq,
                                   session_row, to_message, touch)
from picochat.storage.branches import current_path, floor_of, path_of
from picochat.storage.sql import NO_UPPER_BOUND


class MessageLog(OnCore):
    """The append-only message log, each call one transaction on `core`."""

    def append_messages(self, session_id: str, messages: Iterable[PreparedMessage],
                        *, if_draft: str | None = None) -> list[Message]:
        """Append messages in one transaction (all or none), seqs following the durable
        maximum. Each comes prepared by its writer (`prepare.prepare`: valid text, token
        count, statements); the store gives it its seq and time and nothing else. The draft
        of every turn written goes in the same transaction: its text is in the log now.
        `if_draft`: append only if that turn's draft is still there (two processes recovering
        it append it once); the rows then stay out of the context when their turn was
        overtaken (`_overtaken`)."""
        rows = list(messages)
        for m in rows:  # the one invariant cheap to hold here; the rest is the writer's
            if m.role not in ROLES:
                raise ValueError(f"role must be one of {ROLES}, got {m.role!r}")
        now = self.core.clock()
        out: list[Message] = []
        with self.core.write() as c:
            session = session_row(c, session_id)
            if if_draft is not None and not has_draft(c, if_draft):
                return []
            # a turn's rows go where its question is: a rewind or a switch by another
            # process between the question and its answer leaves them together
            branched = _branched(c, session_id)
            branches = {t: _branch_of_turn(c, session, t) if branched else session.branch
                        for t in {m.turn_id for m in rows}}
            late = if_draft is not None and _overtaken(c, session, if_draft,
                                                       branches.get(if_draft, session.branch))
            seq = last_seq(c, session_id)
            forget_drafts(c, {m.turn_id for m in rows if m.turn_id})
            for m in rows:
                seq += 1
                rowid = c.execute(  # on its turn's branch (storage/branches.py)
                    f"INSERT INTO messages ({MESSAGE_COLS}, branch) "
                    f"VALUES ({', '.join('?' * (len(MESSAGE_FIELDS) + 1))})",
                    (session_id, seq, m.role, m.content, m.tool_calls_json, m.tool_call_id,
                     m.name, m.turn_id, m.tool_status, m.status, m.tokens, now,
                     m.statements, m.reasoning, branches[m.turn_id])).lastrowid
                c.execute("INSERT INTO messages_fts(rowid, content) VALUES (?, ?)",
                          (rowid, m.content))
                out.append(m.stored(session_id, seq, now, retracted=late))
            if late and out:  # kept in the log, out of the context: the context is unchanged
                c.execute("INSERT INTO retractions (session_id, from_seq, to_seq, "
                          "context_generation, created_at, branch) VALUES (?, ?, ?, ?, ?, ?)",
                          (session_id, out[0].seq, seq, session.context_generation, now,
                           branches[if_draft]))
            touch(c, session_id, now)
        return out

    def history(self, session_id: str, branch: int | None = None) -> list[Message]:
        """The raw log of the branch in use (or `branch`), all of it, with undone rows marked
        (for `history` and `export`)."""
        with self.core.read() as c:
            path = (current_path(c, session_id) if branch is None
                    else path_of(c, session_id, branch))
            rows = c.execute(
                f"SELECT {MESSAGE_COLS}, NOT {path.not_retracted()} FROM messages m "
                f"WHERE {path.clause()} ORDER BY seq").fetchall()
        return [to_message(r) for r in rows]

    def history_page(self, session_id: str, before_seq: int | None, limit: int
                     ) -> list[Message]:
        """The newest `limit` messages below `before_seq` (all: None), oldest first: a screen
        of a long log without reading the rest of it."""
        with self.core.read() as c:
            path = current_path(c, session_id)
            rows = c.execute(
                f"SELECT {MESSAGE_COLS}, NOT {path.not_retracted()} FROM messages m "
                f"WHERE seq < ? AND {path.clause()} ORDER BY seq DESC LIMIT ?",
                (before_seq if before_seq is not None else NO_UPPER_BOUND,
                 max(0, limit))).fetchall()
        return [to_message(r) for r in reversed(rows)]

    def message(self, session_id: str, seq: int) -> Message | None:
        """One row of the branch in use (a tool result the app is about to show, a message
        pinned or read back by `history_search`), or None: a row of another branch is not
        this conversation's (its number is shared, its words are not)."""
        with self.core.read() as c:
            path = current_path(c, session_id)
            row = c.execute(
                f"SELECT {MESSAGE_COLS}, NOT {path.not_retracted()} FROM messages m "
                f"WHERE seq = ? AND {path.clause()}", (seq,)).fetchone()
        return to_message(row) if row else None

    def max_seq(self, session_id: str) -> int:
        with self.core.read() as c:
            return last_seq(c, session_id)


def _branched(c: sqlite3.Connection, session_id: str) -> bool:
    """Whether the session was ever rewound (one lookup; most never are)."""
    return c.execute("SELECT 1 FROM branches WHERE session_id = ? LIMIT 1",
                     (session_id,)).fetchone() is not None


def _branch_of_turn(c: sqlite3.Connection, session: Session, turn_id: str | None) -> int:
    """The branch a turn's rows go on: that of its first row already written, else the one
    in use (a new turn's question)."""
    if turn_id is None:
        return session.branch
    row = c.execute("SELECT branch FROM messages WHERE session_id = ? AND turn_id = ? "
                    "ORDER BY seq LIMIT 1", (session.id, turn_id)).fetchone()
    return row[0] if row else session.branch


def _overtaken(c: sqlite3.Connection, session: Session, turn_id: str, branch: int) -> bool:
    """Whether a turn's recovered answer would land out of place on `branch`, its question's:
    the question was cleared there (`/clear` after it), undone, or is gone, or a newer turn
    began after its rows. Appended at the end of the log, it would read as the answer to
    that newer question."""
    path = path_of(c, session.id, branch)  # judged on the question's branch
    last = c.execute(f"SELECT MAX(seq) FROM messages m WHERE turn_id = ? AND {path.rows()}",
                     (turn_id,)).fetchone()[0]
    if last is None or last <= floor_of(c, session, branch):
        return True
    return c.execute(f"SELECT 1 FROM messages m WHERE seq > ? AND {path.clause()} "
                     "AND (turn_id IS NULL OR turn_id != ?) LIMIT 1",
                     (last, turn_id)).fetchone() is not None
