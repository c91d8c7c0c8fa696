"""Sessions, the append-only message log, and the context's pointers into it (checkpoints,
`/clear`, undo, `/uncompact`, the compaction wait, pins): what `Store` writes, on the
transactional core (`core.py`). Its parts keep the rest: `store.drafts` (`drafts.py`),
`store.search` (`search.py`), `store.traits` (`traits.py`).

Messages are append-only and get their `seq` inside the insert's transaction from the durable
maximum, so two processes appending to one session never collide and a seq is never reused. A
message arrives prepared by its writer (`picochat/prepare.py`: valid text, token count,
statements): storage inserts it and computes none of it. Operations that change what earlier
history means (`/clear`, undo) bump `context_generation` in the same transaction, so a
checkpoint candidate built before them fails its commit. A plain append does not: the messages
it adds land after the candidate's cut, in the raw tail.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from picochat import crashpoints
from picochat.errors import SessionNotFound, StaleGeneration, StorageError
from picochat.messages import (
    ROLES,
    Checkpoint,
    CompactionWait,
    LedgerRow,
    Message,
    NewCheckpoint,
    PreparedMessage,
    Pin,
    Session,
    StoredLedger,
    TriggerReason,
)
from picochat.storage.names import check_session_name
from picochat.storage.drafts import Drafts, forget_drafts, has_draft
from picochat.storage.core import Clock, Core, T, open_core, wall_clock_ms
from picochat.storage.search import Search
from picochat.storage.sql import NO_UPPER_BOUND, NOT_RETRACTED
from picochat.storage.traits import Traits

TRIGGER_REASONS = tuple(TriggerReason)


@dataclass(frozen=True)
class ContextSnapshot:
    """One consistent read of what a projection needs: session, checkpoint, raw rows."""

    session: Session
    checkpoint: Checkpoint | None
    checkpoint_problem: str | None  # why an active checkpoint was not usable, if it was not
    messages: tuple[Message, ...]
    max_seq: int
    pins: tuple[Pin, ...] = ()


@dataclass(frozen=True)
class UndoResult:
    removed: tuple[int, ...]  # seqs taken out of the context (still in the raw log)
    checkpoint_kept: bool
    checkpoint_dropped: bool = False  # a checkpoint was active and is not any more


@dataclass(frozen=True)
class UncompactResult:
    undone: str | None       # the checkpoint that stopped being active; None: nothing to undo
    active: str | None       # the checkpoint active now; None: the raw history
    context_generation: int


_SESSION_COLS = (
    "id, name, created_at, updated_at, model, active_context_checkpoint_id, context_generation, "
    "context_floor_seq, last_compressed_message_at, deleted_at, system_prompt"
)
_MESSAGE_COLS = (
    "session_id, seq, role, content, tool_calls, tool_call_id, name, turn_id, tool_status, "
    "status, tokens, created_at, statements, reasoning"
)
_CHECKPOINT_COLS = (
    "id, session_id, generation, parent_checkpoint_id, summary, first_retained_seq, "
    "source_max_seq, trigger_reason, provider_kind, model, tokens_before, tokens_after, "
    "degraded, created_at"
)


def _fields(cols: str) -> tuple[str, ...]:
    """The column names of a `_*_COLS` list: rows are read by name, never by position."""
    return tuple(name.strip() for name in cols.split(","))


_SESSION_FIELDS = _fields(_SESSION_COLS)
_MESSAGE_FIELDS = _fields(_MESSAGE_COLS)
_CHECKPOINT_FIELDS = _fields(_CHECKPOINT_COLS)

# "Most recently active" is a counter, not the clock (schema 15): each write that makes a
# session the latest gives it this, one above every session's, and stamps `updated_at` with
# the clock as it is (a session stamped in the future comes back to now). A clock stepped
# back can then never keep a session "latest" that another was written after.
_NEXT_ACTIVITY = "(SELECT COALESCE(MAX(activity_seq), 0) + 1 FROM sessions)"
_BY_ACTIVITY = "ORDER BY activity_seq DESC, rowid DESC"


def open_store(path: Path, clock: Clock = wall_clock_ms) -> "Store":
    return Store(open_core(path, clock))


class Store:
    """Sessions, the message log and the context's pointers, on the transactional core
    (`store.core`); drafts, search and model traits are its parts (`store.drafts`, …).

    No cached state: every call is one short transaction, so two processes on one file see
    each other's writes at their next call."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.path = core.path
        self.drafts = Drafts(core, self)
        self.search = Search(core)
        self.traits = Traits(core)

    def close(self) -> None:
        self.core.close()

    async def io(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on the store's one thread (`Core.io`)."""
        return await self.core.io(fn, *args, **kwargs)

    # --- sessions ------------------------------------------------------------------------------

    def create_session(self, name: str | None = None, model: str | None = None) -> Session:
        with self.core.write() as c:
            if name is None:
                name = _free_name(c)
            elif c.execute("SELECT 1 FROM sessions WHERE name = ? AND deleted_at IS NULL",
                           (name,)).fetchone():
                raise StorageError(f"a session named {name!r} already exists",
                                   "pick another name")
            sid = self._insert_session(c, name, model)
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
        check_session_name(name)
        now = self.core.clock()
        sid = "s_" + uuid.uuid4().hex[:12]
        c.execute("INSERT INTO sessions (id, name, created_at, updated_at, model, activity_seq) "
                  f"VALUES (?, ?, ?, ?, ?, {_NEXT_ACTIVITY})", (sid, name, now, now, model))
        return sid

    def session(self, session_id: str) -> Session:
        with self.core.read() as c:
            return _session_row(c, session_id)

    def find_session(self, ref: str) -> Session | None:
        """A live session by id, else by name."""
        with self.core.read() as c:
            row = c.execute(
                f"SELECT {_SESSION_COLS} FROM sessions WHERE deleted_at IS NULL AND "
                "(id = ? OR name = ?) ORDER BY (id = ?) DESC LIMIT 1", (ref, ref, ref)).fetchone()
            return _session(c, row) if row else None

    def require_session(self, ref: str) -> Session:
        found = self.find_session(ref)
        if found is None:
            raise SessionNotFound(f"no session named {ref!r}",
                                  "`picochat sessions` lists them")
        return found

    def latest_session(self) -> Session | None:
        """The live session written to last (created, appended to, cleared, uncompacted),
        by the order of those writes, not by the clock's stamps (`_NEXT_ACTIVITY`)."""
        with self.core.read() as c:
            row = c.execute(f"SELECT {_SESSION_COLS} FROM sessions WHERE deleted_at IS NULL "
                            f"{_BY_ACTIVITY} LIMIT 1").fetchone()
            return _session(c, row) if row else None

    def mark_opened(self, session_id: str) -> None:
        """The app now shows this session: the next start reopens it. The stamp is the clock,
        or one above the newest stamp if that is not earlier (two opens in one millisecond,
        a clock set back): the last session opened is always the one reopened."""
        with self.core.write() as c:
            c.execute("UPDATE sessions SET last_opened_at = MAX(?, 1 + COALESCE("
                      "(SELECT MAX(last_opened_at) FROM sessions), 0)) WHERE id = ?",
                      (self.core.clock(), session_id))

    def last_opened_session(self) -> Session | None:
        """The live session the app opened last; None when it never opened one that is still
        there (the caller then takes `latest_session`)."""
        with self.core.read() as c:
            row = c.execute(f"SELECT {_SESSION_COLS} FROM sessions WHERE deleted_at IS NULL "
                            "AND last_opened_at IS NOT NULL "
                            "ORDER BY last_opened_at DESC LIMIT 1").fetchone()
            return _session(c, row) if row else None

    def list_sessions(self) -> list[Session]:
        with self.core.read() as c:
            rows = c.execute(f"SELECT {_SESSION_COLS} FROM sessions WHERE deleted_at IS NULL "
                             f"{_BY_ACTIVITY}").fetchall()  # the first is `latest_session`
            return [_session(c, r) for r in rows]

    def set_session_model(self, session_id: str, model: str) -> None:
        with self.core.write() as c:
            c.execute("UPDATE sessions SET model = ? WHERE id = ?", (model, session_id))

    def set_session_system_prompt(self, session_id: str, prompt: str | None) -> None:
        """The session's own system prompt; None goes back to the agent's."""
        with self.core.write() as c:
            c.execute("UPDATE sessions SET system_prompt = ? WHERE id = ?", (prompt, session_id))

    def rename_session(self, session_id: str, name: str) -> Session:
        check_session_name(name)
        with self.core.write() as c:
            clash = c.execute("SELECT id FROM sessions WHERE name = ? AND deleted_at IS NULL "
                              "AND id != ?", (name, session_id)).fetchone()
            if clash:
                raise StorageError(f"a session named {name!r} already exists", "pick another name")
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
            c.execute("INSERT INTO messages_fts(messages_fts, rowid, content) "
                      "SELECT 'delete', id, content FROM messages WHERE session_id = ?",
                      (session_id,))
            c.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    # --- messages ------------------------------------------------------------------------------

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
            session = _session_row(c, session_id)
            if if_draft is not None and not has_draft(c, if_draft):
                return []
            late = if_draft is not None and _overtaken(c, session, if_draft)
            seq = c.execute("SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?",
                            (session_id,)).fetchone()[0]
            forget_drafts(c, {m.turn_id for m in rows if m.turn_id})
            for m in rows:
                seq += 1
                rowid = c.execute(
                    f"INSERT INTO messages ({_MESSAGE_COLS}) "
                    f"VALUES ({', '.join('?' * len(_MESSAGE_FIELDS))})",
                    (session_id, seq, m.role, m.content, m.tool_calls_json, m.tool_call_id,
                     m.name, m.turn_id, m.tool_status, m.status, m.tokens, now,
                     m.statements, m.reasoning)).lastrowid
                c.execute("INSERT INTO messages_fts(rowid, content) VALUES (?, ?)",
                          (rowid, m.content))
                out.append(m.stored(session_id, seq, now, retracted=late))
            if late and out:  # kept in the log, out of the context: the context is unchanged
                c.execute("INSERT INTO retractions (session_id, from_seq, to_seq, "
                          "context_generation, created_at) VALUES (?, ?, ?, ?, ?)",
                          (session_id, out[0].seq, seq, session.context_generation, now))
            _touch(c, session_id, now)
        return out

    def history(self, session_id: str) -> list[Message]:
        """The raw log, all of it, with undone rows marked (for `history` and `export`)."""
        with self.core.read() as c:
            rows = c.execute(
                f"SELECT {_MESSAGE_COLS}, NOT {NOT_RETRACTED} FROM messages m "
                "WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
        return [_message(r) for r in rows]

    def history_page(self, session_id: str, before_seq: int | None, limit: int
                     ) -> list[Message]:
        """The newest `limit` messages below `before_seq` (all: None), oldest first: a screen
        of a long log without reading the rest of it."""
        with self.core.read() as c:
            rows = c.execute(
                f"SELECT {_MESSAGE_COLS}, NOT {NOT_RETRACTED} FROM messages m "
                "WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
                (session_id, before_seq if before_seq is not None else NO_UPPER_BOUND,
                 max(0, limit))).fetchall()
        return [_message(r) for r in reversed(rows)]

    def message(self, session_id: str, seq: int) -> Message | None:
        """One row of the raw log (a tool result the app is about to show), or None."""
        with self.core.read() as c:
            row = c.execute(
                f"SELECT {_MESSAGE_COLS}, NOT {NOT_RETRACTED} FROM messages m "
                "WHERE session_id = ? AND seq = ?", (session_id, seq)).fetchone()
        return _message(row) if row else None

    def max_seq(self, session_id: str) -> int:
        with self.core.read() as c:
            return c.execute("SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?",
                             (session_id,)).fetchone()[0]

    # --- the context ---------------------------------------------------------------------------

    def context_snapshot(self, session_id: str) -> ContextSnapshot:
        """Session, active checkpoint and the raw rows the projection starts from, in one read."""
        with self.core.read() as c:
            session = _session_row(c, session_id)
            checkpoint, problem = _active_checkpoint(c, session)
            start = session.context_floor_seq + 1
            if checkpoint is not None:
                start = max(start, checkpoint.first_retained_seq)
            rows = c.execute(
                f"SELECT {_MESSAGE_COLS}, 0 FROM messages m WHERE session_id = ? AND seq >= ? "
                f"AND {NOT_RETRACTED} ORDER BY seq", (session_id, start)).fetchall()
            max_seq = c.execute("SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?",
                                (session_id,)).fetchone()[0]
            pins = _pins(c, session_id)
        return ContextSnapshot(session, checkpoint, problem, tuple(_message(r) for r in rows),
                               max_seq, pins)

    def active_checkpoint(self, session_id: str) -> Checkpoint | None:
        """The checkpoint the projection starts from (None when there is none or it is unusable),
        without reading the raw tail."""
        with self.core.read() as c:
            return _active_checkpoint(c, _session_row(c, session_id))[0]

    def clear_context(self, session_id: str) -> Session:
        """`/clear`: the context restarts after the newest message; raw rows stay, and the
        generation moves on, so a compaction built before the clear cannot commit."""
        with self.core.write() as c:
            _session_row(c, session_id)
            c.execute(
                "UPDATE sessions SET context_floor_seq = (SELECT COALESCE(MAX(seq), 0) FROM "
                "messages WHERE session_id = :id), active_context_checkpoint_id = NULL, "
                "context_generation = context_generation + 1 WHERE id = :id", {"id": session_id})
            _touch(c, session_id, self.core.clock())
        return self.session(session_id)

    def undo_last_turn(self, session_id: str) -> UndoResult:
        """Take the newest turn out of the context (rows stay in the log, marked undone).

        The active checkpoint survives only if every removed row lies in its raw tail, since
        only then does the summary still mean the same thing.
        """
        with self.core.write() as c:
            session = _session_row(c, session_id)
            rows = c.execute(
                f"SELECT seq, role, turn_id FROM messages m WHERE session_id = ? AND seq > ? "
                f"AND {NOT_RETRACTED} ORDER BY seq DESC", (session_id,
                                                            session.context_floor_seq)).fetchall()
            removed = last_turn_seqs(rows)
            if not removed:
                return UndoResult((), session.active_context_checkpoint_id is not None)
            low = min(removed)
            keep = False
            if session.active_context_checkpoint_id:
                cp = _checkpoint_by_id(c, session.active_context_checkpoint_id)
                keep = cp is not None and low >= cp.first_retained_seq
            now = self.core.clock()
            c.executemany(  # one range per run of the turn's rows: another turn's rows between
                "INSERT INTO retractions (session_id, from_seq, to_seq, context_generation, "
                "created_at) VALUES (?, ?, ?, ?, ?)",  # them (two writers) stay in the context
                [(session_id, a, b, session.context_generation + 1, now)
                 for a, b in _runs([r[0] for r in reversed(rows)], set(removed))])
            c.execute("UPDATE sessions SET context_generation = context_generation + 1, "
                      "active_context_checkpoint_id = CASE WHEN ? THEN "
                      "active_context_checkpoint_id ELSE NULL END WHERE id = ?",
                      (int(keep), session_id))
        return UndoResult(tuple(sorted(removed)), keep,
                          bool(session.active_context_checkpoint_id) and not keep)

    # --- checkpoints ---------------------------------------------------------------------------

    def commit_context_checkpoint(self, session_id: str, expected_generation: int,
                                  new: NewCheckpoint) -> Checkpoint:
        """Insert a checkpoint and make it active, in one transaction, or change nothing.

        A session whose generation moved since the candidate was built raises `StaleGeneration`.
        """
        if new.trigger_reason not in TRIGGER_REASONS:
            raise ValueError(f"trigger_reason must be one of {TRIGGER_REASONS}")
        cp_id = "cp_" + uuid.uuid4().hex[:16]
        now = self.core.clock()
        with self.core.write() as c:
            before = _session_row(c, session_id)
            updated = c.execute(
                "UPDATE sessions SET active_context_checkpoint_id = ?, "
                "context_generation = context_generation + 1, last_compressed_message_at = ? "
                "WHERE id = ? AND context_generation = ?",
                (cp_id, now, session_id, expected_generation)).rowcount
            if updated != 1:
                _session_row(c, session_id)
                raise StaleGeneration(
                    f"the context of session {session_id} changed while compacting (a clear, "
                    "an undo or another compaction came first); nothing was committed",
                    "run the compaction again")
            active = before.active_context_checkpoint_id
            if active and new.parent_checkpoint_id is None and _checkpoint_problem(
                    c, before, _checkpoint_by_id(c, active)):
                active = None  # an unusable pointer (restore fell back to raw history) is replaced
            if new.parent_checkpoint_id != active:
                raise StaleGeneration(f"checkpoint parent {new.parent_checkpoint_id} is not the "
                                      f"active checkpoint of session {session_id}; nothing was "
                                      "committed", "run the compaction again")
            boundary = c.execute(
                f"SELECT 1 FROM messages m WHERE session_id = ? AND seq = ? AND seq > ? "
                f"AND {NOT_RETRACTED}",
                (session_id, new.first_retained_seq, before.context_floor_seq)).fetchone()
            if not boundary:
                raise StorageError(f"first_retained_seq {new.first_retained_seq} is not a message "
                                   f"in the context of session {session_id}; nothing was "
                                   "committed")
            row = {name: getattr(new, name) for name in _CHECKPOINT_FIELDS if hasattr(new, name)}
            c.execute(
                f"INSERT INTO context_checkpoints ({_CHECKPOINT_COLS}) "
                f"VALUES ({', '.join(':' + name for name in _CHECKPOINT_FIELDS)})",
                {**row, "id": cp_id, "session_id": session_id,
                 "generation": expected_generation + 1, "degraded": int(new.degraded),
                 "created_at": now})
            _insert_ledger(c, cp_id, new.ledger)
            crashpoints.reached("in_commit")  # both writes done, the transaction still open
            return _checkpoint_by_id(c, cp_id)  # type: ignore[return-value]

    def uncompact(self, session_id: str) -> UncompactResult:
        """`/uncompact`: make the active checkpoint's parent active again (or none), bumping
        the generation in the same transaction. Rows are never deleted, so this always works."""
        with self.core.write() as c:
            session = _session_row(c, session_id)
            active_id = session.active_context_checkpoint_id
            if not active_id:
                return UncompactResult(None, None, session.context_generation)
            active = _checkpoint_by_id(c, active_id)
            parent = active.parent_checkpoint_id if active else None
            if parent is not None:
                cp = _checkpoint_by_id(c, parent)
                if cp is None or _checkpoint_problem(c, session, cp):
                    parent = None  # an unusable parent: fall back to the raw history
            c.execute("UPDATE sessions SET active_context_checkpoint_id = ?, "
                      "context_generation = context_generation + 1 WHERE id = ?",
                      (parent, session_id))
            _touch(c, session_id, self.core.clock())
            return UncompactResult(active_id, parent, session.context_generation + 1)

    def checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        with self.core.read() as c:
            return _checkpoint_by_id(c, checkpoint_id)

    def checkpoints(self, session_id: str) -> list[Checkpoint]:
        """Every checkpoint of the session, newest first."""
        with self.core.read() as c:
            rows = c.execute(f"SELECT {_CHECKPOINT_COLS} FROM context_checkpoints "
                             "WHERE session_id = ? ORDER BY generation DESC",
                             (session_id,)).fetchall()
            return [_checkpoint(c, r) for r in rows]

    # --- automatic compaction's back-off ----------------------------------------------------------

    def compaction_wait(self, session_id: str) -> CompactionWait | None:
        with self.core.read() as c:
            row = c.execute("SELECT context_generation, tokens_before, kind FROM "
                            "compaction_waits WHERE session_id = ?", (session_id,)).fetchone()
        return CompactionWait(*row) if row else None

    def set_compaction_wait(self, session_id: str, wait: CompactionWait | None) -> None:
        """Start (or move) the session's wait; None ends it."""
        with self.core.write() as c:
            if wait is None:
                c.execute("DELETE FROM compaction_waits WHERE session_id = ?", (session_id,))
                return
            c.execute("INSERT INTO compaction_waits (session_id, context_generation, "
                      "tokens_before, kind) VALUES (?, ?, ?, ?) ON CONFLICT(session_id) DO "
                      "UPDATE SET context_generation = excluded.context_generation, "
                      "tokens_before = excluded.tokens_before, kind = excluded.kind",
                      (session_id, wait.context_generation, wait.tokens_before, wait.kind))

    # --- pins ----------------------------------------------------------------------------------

    def pins(self, session_id: str) -> tuple[Pin, ...]:
        """The session's pins in force, oldest first."""
        with self.core.read() as c:
            _session_row(c, session_id)
            return _pins(c, session_id)

    def add_pin(self, session_id: str, text: str, tokens: int, source_seq: int | None = None,
                check: Callable[[tuple[Pin, ...]], None] | None = None) -> Pin:
        """Pin `text` with the next unused number. `check` sees the pins in force inside the
        same write (two processes pinning at once cannot both pass a cap) and may raise."""
        with self.core.write() as c:
            _session_row(c, session_id)
            if check is not None:
                check(_pins(c, session_id))
            number = c.execute("SELECT COALESCE(MAX(number), 0) + 1 FROM pins WHERE "
                               "session_id = ?", (session_id,)).fetchone()[0]
            now = self.core.clock()
            c.execute("INSERT INTO pins (session_id, number, text, tokens, source_seq, "
                      "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                      (session_id, number, text, tokens, source_seq, now))
        return Pin(number, text, tokens, source_seq, now)

    def remove_pin(self, session_id: str, number: int) -> Pin | None:
        """Unpin #number; None when no pin in force has that number."""
        with self.core.write() as c:
            _session_row(c, session_id)
            pin = next((p for p in _pins(c, session_id) if p.number == number), None)
            if pin is not None:
                c.execute("UPDATE pins SET unpinned_at = ? WHERE session_id = ? AND number = ?",
                          (self.core.clock(), session_id, number))
        return pin



def _touch(c: sqlite3.Connection, session_id: str, now: int) -> None:
    """The session is now the most recently active: next in write order, stamped `now`."""
    c.execute(f"UPDATE sessions SET updated_at = ?, activity_seq = {_NEXT_ACTIVITY} "
              "WHERE id = ?", (now, session_id))


def _pins(c: sqlite3.Connection, session_id: str) -> tuple[Pin, ...]:
    rows = c.execute("SELECT number, text, tokens, source_seq, created_at FROM pins WHERE "
                     "session_id = ? AND unpinned_at IS NULL ORDER BY number", (session_id,))
    return tuple(Pin(*r) for r in rows)


def _overtaken(c: sqlite3.Connection, session: Session, turn_id: str) -> bool:
    """Whether a turn's recovered answer would land out of place: its question was cleared
    (`/clear` after it), undone, or is gone, or a newer turn began after its rows. Appended at
    the end of the log, it would read as the answer to that newer question."""
    last = c.execute(f"SELECT MAX(seq) FROM messages m WHERE session_id = ? AND turn_id = ? "
                     f"AND {NOT_RETRACTED}", (session.id, turn_id)).fetchone()[0]
    if last is None or last <= session.context_floor_seq:
        return True
    return c.execute("SELECT 1 FROM messages WHERE session_id = ? AND seq > ? AND "
                     "(turn_id IS NULL OR turn_id != ?) LIMIT 1",
                     (session.id, last, turn_id)).fetchone() is not None


# --- row helpers ---------------------------------------------------------------------------------


def _free_name(c: sqlite3.Connection) -> str:
    taken = {r[0] for r in c.execute("SELECT name FROM sessions WHERE deleted_at IS NULL")}
    n = 1
    while f"chat-{n}" in taken:
        n += 1
    return f"chat-{n}"


def _session_row(c: sqlite3.Connection, session_id: str) -> Session:
    row = c.execute(f"SELECT {_SESSION_COLS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(f"no session with id {session_id!r}", "`picochat sessions` lists them")
    return _session(c, row)


def _session(c: sqlite3.Connection, row: Sequence[Any]) -> Session:
    """A `SELECT {_SESSION_COLS}` row, read by column name."""
    r = dict(zip(_SESSION_FIELDS, row))
    # Seqs run 1, 2, 3… and rows are never deleted, so the count is the maximum seq: one index
    # lookup instead of a scan that would grow with the history on every append and restore.
    count = c.execute("SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?",
                      (r["id"],)).fetchone()[0]
    return Session(**r, message_count=count)


def _message(row: Sequence[Any]) -> Message:
    """A `SELECT {_MESSAGE_COLS}, <retracted>` row, read by column name."""
    r = dict(zip(_MESSAGE_FIELDS + ("retracted",), row))
    calls = tuple(json.loads(r["tool_calls"])) if r["tool_calls"] else None
    return Message(r["session_id"], r["seq"], r["role"], r["content"], calls,
                   r["tool_call_id"], r["name"], r["turn_id"], r["tool_status"], r["status"],
                   r["tokens"], r["created_at"], retracted=bool(r["retracted"]),
                   statements=r["statements"], reasoning=r["reasoning"])


def _checkpoint(c: sqlite3.Connection, row: Sequence[Any]) -> Checkpoint:
    """A `SELECT {_CHECKPOINT_COLS}` row, read by column name, with its ledger rows."""
    r = dict(zip(_CHECKPOINT_FIELDS, row))
    return Checkpoint(**{**r, "degraded": bool(r["degraded"])}, ledger=_ledger(c, r["id"]))


def _checkpoint_by_id(c: sqlite3.Connection, checkpoint_id: str) -> Checkpoint | None:
    row = c.execute(f"SELECT {_CHECKPOINT_COLS} FROM context_checkpoints WHERE id = ?",
                    (checkpoint_id,)).fetchone()
    return _checkpoint(c, row) if row else None


def _ledger(c: sqlite3.Connection, checkpoint_id: str) -> StoredLedger:
    head = c.execute("SELECT dropped, dropped_up_to FROM checkpoint_ledgers "
                     "WHERE checkpoint_id = ?", (checkpoint_id,)).fetchone()
    if head is None:
        return StoredLedger()
    rows = c.execute("SELECT seq, kind, said_by, text, vals FROM checkpoint_facts "
                     "WHERE checkpoint_id = ? ORDER BY ord", (checkpoint_id,)).fetchall()
    return StoredLedger(tuple(LedgerRow(r[0], r[1], r[2], r[3], tuple(json.loads(r[4])))
                              for r in rows),
                        head[0], head[1])


def _insert_ledger(c: sqlite3.Connection, checkpoint_id: str, ledger: StoredLedger) -> None:
    c.execute("INSERT INTO checkpoint_ledgers (checkpoint_id, dropped, dropped_up_to) "
              "VALUES (?, ?, ?)", (checkpoint_id, ledger.dropped, ledger.dropped_up_to))
    c.executemany("INSERT INTO checkpoint_facts (checkpoint_id, ord, seq, kind, said_by, text, "
                  "vals) VALUES (?, ?, ?, ?, ?, ?, ?)",
                  [(checkpoint_id, i, r.seq, r.kind, r.said_by, r.text,
                    json.dumps(list(r.values), ensure_ascii=False))
                   for i, r in enumerate(ledger.rows)])


def _active_checkpoint(c: sqlite3.Connection, session: Session
                       ) -> tuple[Checkpoint | None, str | None]:
    """The session's active checkpoint, or None and why it cannot be used."""
    if not session.active_context_checkpoint_id:
        return None, None
    checkpoint = _checkpoint_by_id(c, session.active_context_checkpoint_id)
    problem = _checkpoint_problem(c, session, checkpoint)
    return (None, problem) if problem else (checkpoint, None)


def _checkpoint_problem(c: sqlite3.Connection, session: Session,
                        cp: Checkpoint | None) -> str | None:
    """Why the active checkpoint cannot be used (missing, another session's, empty, or a
    boundary that is not a message after the floor): restore then falls back to the raw
    history and reports this diagnostic, rather than sending a broken context."""
    if cp is None:
        return f"active checkpoint {session.active_context_checkpoint_id} does not exist"
    if cp.session_id != session.id:
        return f"active checkpoint {cp.id} belongs to another session"
    if not cp.summary.strip():
        return f"active checkpoint {cp.id} has an empty summary"
    exists = c.execute("SELECT 1 FROM messages WHERE session_id = ? AND seq = ?",
                       (session.id, cp.first_retained_seq)).fetchone()
    if not exists or cp.first_retained_seq <= session.context_floor_seq:
        return f"active checkpoint {cp.id} has an invalid boundary seq {cp.first_retained_seq}"
    return None


def last_turn_seqs(rows_desc: Iterable[Sequence[Any]]) -> list[int]:
    """Seqs of the newest turn: every row of its turn_id, wherever another writer's rows fell
    between them, and the rows without an id among them (a tool result belongs to the call
    before it); without an id, back to and including the newest user message."""
    rows = list(rows_desc)
    if not rows:
        return []
    newest_turn = rows[0][2]
    if newest_turn is not None:
        first = min(seq for seq, _, turn_id in rows if turn_id == newest_turn)
        return [seq for seq, _, turn_id in rows
                if seq >= first and turn_id in (newest_turn, None)]
    seqs: list[int] = []
    for seq, role, turn_id in rows:
        if turn_id is not None:
            break
        seqs.append(seq)
        if role == "user":
            break
    return seqs


def _runs(seqs: Sequence[int], chosen: set[int]) -> list[tuple[int, int]]:
    """(first, last) of each run of `chosen` seqs that lie next to each other in `seqs`."""
    runs: list[tuple[int, int]] = []
    start: int | None = None
    prev = 0
    for seq in seqs:
        if seq in chosen:
            start = seq if start is None else start
            prev = seq
        elif start is not None:
            runs.append((start, prev))
            start = None
    if start is not None:
        runs.append((start, prev))
    return runs
