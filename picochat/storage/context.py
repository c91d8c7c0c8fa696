"""The context's pointers into the log: which checkpoint is active, where `/clear` put the
floor, which turns undo took out, the compaction wait, and the pins. Together they say what
each request carries of a session (`projection.py` reads them in one `context_snapshot`).

Its own class because these are the only rows that change what earlier history means, and
each such change (`/clear`, undo, `/uncompact`, a commit) bumps `context_generation` in the
same transaction, so a checkpoint candidate built before it fails its commit (ARCHITECTURE
rules 2 to 4). The log's rows are never touched: undo adds retraction ranges.
"""

from __future__ import annotations

import dataclasses

import json
import sqlite3
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from picochat import crashpoints
from picochat.errors import StaleGeneration, StorageError
from picochat.messages import (
    Checkpoint,
    CompactionWait,
    LedgerRow,
    Message,
    NewCheckpoint,
    Pin,
    Session,
    StoredLedger,
    TriggerReason,
)
from picochat.storage.branches import current_path
from picochat.storage.rows import (MESSAGE_COLS, OnCore, fields, last_seq, session_row,
                                   to_message, touch)

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
    uncleared: bool = False  # a /clear was taken back: the context from before it is back

    @property
    def changed(self) -> bool:
        return self.undone is not None or self.uncleared


_CHECKPOINT_COLS = (
    "id, session_id, generation, parent_checkpoint_id, summary, first_retained_seq, "
    "source_max_seq, trigger_reason, provider_kind, model, tokens_before, tokens_after, "
    "degraded, created_at"
)
_CHECKPOINT_FIELDS = fields(_CHECKPOINT_COLS)


class ContextPointers(OnCore):
    """What each request carries of a session, each call one transaction on `core`."""

    # --- the context ---------------------------------------------------------------------------

    def context_snapshot(self, session_id: str) -> ContextSnapshot:
        """Session, active checkpoint and the raw rows the projection starts from, in one read."""
        with self.core.read() as c:
            session = session_row(c, session_id)
            checkpoint, problem = _active_checkpoint(c, session)
            start = session.context_floor_seq + 1
            if checkpoint is not None:
                start = max(start, checkpoint.first_retained_seq)
            on = current_path(c, session_id).rows()
            rows = c.execute(f"SELECT {MESSAGE_COLS}, 0 FROM messages m WHERE seq >= ? AND {on} "
                             "ORDER BY seq", (start,)).fetchall()
            max_seq = last_seq(c, session_id)
            pins = _pins(c, session_id)
        return ContextSnapshot(session, checkpoint, problem, tuple(to_message(r) for r in rows),
                               max_seq, pins)

    def active_checkpoint(self, session_id: str) -> Checkpoint | None:
        """The checkpoint the projection starts from (None when there is none or it is unusable),
        without reading the raw tail."""
        with self.core.read() as c:
            return _active_checkpoint(c, session_row(c, session_id))[0]

    def clear_context(self, session_id: str) -> Session:
        """`/clear`: the context restarts after the newest message; raw rows stay, and the
        generation moves on, so a compaction built before the clear cannot commit."""
        with self.core.write() as c:
            before = session_row(c, session_id)
            c.execute(
                "UPDATE sessions SET context_floor_seq = ?, active_context_checkpoint_id = NULL, "
                "context_generation = context_generation + 1 WHERE id = ?",
                (last_seq(c, session_id), session_id))
            now = self.core.clock()
            c.execute("INSERT INTO context_clears (session_id, floor_seq, "
                      "prev_floor_seq, prev_checkpoint, created_at, branch) SELECT id, "
                      "context_floor_seq, ?, ?, ?, branch FROM sessions WHERE id = ?",
                      (before.context_floor_seq, before.active_context_checkpoint_id, now,
                       session_id))
            touch(c, session_id, now)
        with self.core.read() as c:
            return session_row(c, session_id)

    def undo_last_turn(self, session_id: str) -> UndoResult:
        """Take the newest turn out of the context (rows stay in the log, marked undone).

        The active checkpoint survives only if every removed row lies in its raw tail, since
        only then does the summary still mean the same thing.
        """
        with self.core.write() as c:
            session = session_row(c, session_id)
            on = current_path(c, session_id).rows()
            rows = c.execute(f"SELECT seq, role, turn_id FROM messages m WHERE seq > ? AND {on} "
                             "ORDER BY seq DESC", (session.context_floor_seq,)).fetchall()
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
                "created_at, branch) VALUES (?, ?, ?, ?, ?, ?)",  # them (two writers) stay
                [(session_id, a, b, session.context_generation + 1, now, session.branch)
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
            before = session_row(c, session_id)
            updated = c.execute(
                "UPDATE sessions SET active_context_checkpoint_id = ?, "
                "context_generation = context_generation + 1, last_compressed_message_at = ? "
                "WHERE id = ? AND context_generation = ?",
                (cp_id, now, session_id, expected_generation)).rowcount
            if updated != 1:
                session_row(c, session_id)
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
                f"SELECT 1 FROM messages m WHERE seq = ? AND seq > ? AND "
                f"{current_path(c, session_id).rows()}",
                (new.first_retained_seq, before.context_floor_seq)).fetchone()
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
            c.execute("INSERT INTO branch_checkpoints (checkpoint_id, session_id, branch) "
                      "VALUES (?, ?, ?)", (cp_id, session_id, before.branch))
            crashpoints.reached("in_commit")  # both writes done, the transaction still open
            return _checkpoint_by_id(c, cp_id)  # type: ignore[return-value]

    def uncompact(self, session_id: str) -> UncompactResult:
        """`/uncompact`: make the active checkpoint's parent active again (or none), bumping
        the generation in the same transaction. Rows are never deleted, so this always works."""
        with self.core.write() as c:
            session = session_row(c, session_id)
            active_id = session.active_context_checkpoint_id
            if not active_id:
                return _unclear(c, session, self.core.clock())
            active = _checkpoint_by_id(c, active_id)
            parent = active.parent_checkpoint_id if active else None
            if parent is not None:
                cp = _checkpoint_by_id(c, parent)
                if cp is None or _checkpoint_problem(c, session, cp):
                    parent = None  # an unusable parent: fall back to the raw history
            c.execute("UPDATE sessions SET active_context_checkpoint_id = ?, "
                      "context_generation = context_generation + 1 WHERE id = ?",
                      (parent, session_id))
            touch(c, session_id, self.core.clock())
            return UncompactResult(active_id, parent, session.context_generation + 1)

    def checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        with self.core.read() as c:
            return _checkpoint_by_id(c, checkpoint_id)

    def checkpoints(self, session_id: str, branch: int | None = None) -> list[Checkpoint]:
        """Every checkpoint of the branch in use (or `branch`): made on it, or on the way to
        where it began, from rows it shares; newest first."""
        with self.core.read() as c:
            if branch is None:
                branch = session_row(c, session_id).branch
            rows = c.execute(f"SELECT {_CHECKPOINT_COLS} FROM context_checkpoints WHERE "
                             "session_id = ? AND id IN (SELECT checkpoint_id FROM "
                             "branch_checkpoints b WHERE b.session_id = ? AND b.branch = ?) "
                             "ORDER BY generation DESC",
                             (session_id, session_id, branch)).fetchall()
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
            session_row(c, session_id)
            return _pins(c, session_id)

    def add_pin(self, session_id: str, text: str, tokens: int, source_seq: int | None = None,
                check: Callable[[tuple[Pin, ...]], None] | None = None) -> Pin:
        """Pin `text` with the next unused number. `check` sees the pins in force inside the
        same write (two processes pinning at once cannot both pass a cap) and may raise."""
        with self.core.write() as c:
            session_row(c, session_id)
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
            session_row(c, session_id)
            pin = next((p for p in _pins(c, session_id) if p.number == number), None)
            if pin is not None:
                c.execute("UPDATE pins SET unpinned_at = ? WHERE session_id = ? AND number = ?",
                          (self.core.clock(), session_id, number))
        return pin


def _pins(c: sqlite3.Connection, session_id: str) -> tuple[Pin, ...]:
    rows = c.execute("SELECT number, text, tokens, source_seq, created_at FROM pins WHERE "
                     "session_id = ? AND unpinned_at IS NULL ORDER BY number", (session_id,))
    return tuple(Pin(*r) for r in rows)


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


def _unclear(c: sqlite3.Connection, session: Session, now: int) -> UncompactResult:
    """With no summary in use, `/uncompact` takes back the newest `/clear`, if it is the one
    in force (no later clear): the floor and the summary in use before it come back (the
    summary only if still usable). Turns sent since stay, after the restored context."""
    row = c.execute("SELECT id, floor_seq, prev_floor_seq, prev_checkpoint FROM "
                    "context_clears WHERE session_id = ? AND branch = ? AND undone_at IS NULL "
                    "ORDER BY id DESC LIMIT 1", (session.id, session.branch)).fetchone()
    if row is None or row[1] != session.context_floor_seq:
        return UncompactResult(None, None, session.context_generation)
    clear_id, _, prev_floor, prev_cp = row
    restored = dataclasses.replace(session, context_floor_seq=prev_floor)
    if prev_cp is not None and _checkpoint_problem(c, restored, _checkpoint_by_id(c, prev_cp)):
        prev_cp = None  # gone or unusable: the raw history from the old floor
    c.execute("UPDATE sessions SET context_floor_seq = ?, active_context_checkpoint_id = ?, "
              "context_generation = context_generation + 1 WHERE id = ?",
              (prev_floor, prev_cp, session.id))
    c.execute("UPDATE context_clears SET undone_at = ? WHERE id = ?", (now, clear_id))
    touch(c, session.id, now)
    return UncompactResult(None, prev_cp, session.context_generation + 1, uncleared=True)


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
    exists = c.execute(f"SELECT 1 FROM messages m WHERE seq = ? AND "
                       f"{current_path(c, session.id).clause()}",
                       (cp.first_retained_seq,)).fetchone()
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
