"""Forks: a new session that starts with another's context at one of its messages (issue 36).

No row of the source's log is copied. The fork's first branch reads on into the source's
path up to the fork point (`BranchPath` follows `sessions.forked_from`), and the fork's own
rows are numbered on from there, so its log reads as one conversation. What is copied is
what the context held at that point besides the log: the checkpoints of the source's branch
whose summaries come only from rows before it (the one in use then, and those `/uncompact`
goes back to), with their ledgers and timeline entries; the undone turns and `/clear`s before
it; and the pins. Each copy belongs to the fork alone: a later compaction, undo or pin on
either side never shows on the other.

A fork is one transaction: killed halfway, the database holds no fork, or all of it.
Purging a source for good (`purge_session`) first gives each fork its own copy of the rows
it reads there (`detach_forks`), so no fork ever loses a message.
"""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass

from picochat import crashpoints
from picochat.errors import NotForkable
from picochat.messages import Session
from picochat.storage.branches import (BranchPath, _checkpoint_before, _pointers_before,
                                       current_path, path_of)
from picochat.storage.names import JOINERS
from picochat.storage.rows import MESSAGE_COLS, OnCore, insert_session, session_row
from picochat.storage.sql import CHECKPOINT_KEY

_NOT_SESSION_COLS = MESSAGE_COLS.replace("session_id, ", "", 1)  # every column of a row but its session
_CHECKPOINT_COPY = (
    "generation, summary, first_retained_seq, source_max_seq, trigger_reason, provider_kind, "
    "model, tokens_before, tokens_after, degraded, created_at")


@dataclass(frozen=True)
class Forked:
    """A fork made: the new session, its source, the source's last message it starts from,
    and what it carries of the source's context."""

    session: Session
    source: Session
    at: int
    checkpoint: str | None  # the summary it starts with (its own copy's id), if any
    facts: int              # the ledger rows of that summary
    pins: int


class Forks(OnCore):
    """Forking a session, each call one transaction on `core`."""

    def fork_session(self, source_id: str, name: str | None = None, at: int | None = None
                     ) -> Forked:
        """A new session named `name` (else "<source>-fork", "-fork-2", …) holding the
        context of `source_id`'s branch in use as it was right after message `at` (else
        after its newest finished turn), made the most recently active. `at` must end its
        turn: a fork never starts between a question and its answer."""
        with self.core.write() as c:
            source = session_row(c, source_id)
            at = _fork_point(c, source, at)
            now = self.core.clock()
            sid = insert_session(c, now, name or _fork_name(c, source.name), source.model)
            floor, in_use = _pointers_before(c, source, at + 1)
            checkpoint = _checkpoint_before(c, source, at + 1, floor, in_use)
            copies = _copy_checkpoints(c, source, sid, at)
            active = copies.get(checkpoint) if checkpoint else None
            c.execute("UPDATE sessions SET forked_from = ?, fork_branch = ?, fork_seq = ?, "
                      "system_prompt = ?, context_floor_seq = ?, context_generation = ?, "
                      "active_context_checkpoint_id = ? WHERE id = ?",
                      (source.id, source.branch, at, source.system_prompt, floor,
                       source.context_generation, active, sid))
            c.execute("INSERT INTO retractions (session_id, from_seq, to_seq, "
                      "context_generation, created_at, branch) SELECT ?, from_seq, "
                      "MIN(to_seq, ?), context_generation, created_at, 0 FROM retractions "
                      "WHERE session_id = ? AND branch = ? AND from_seq <= ? ORDER BY id",
                      (sid, at, source.id, source.branch, at))
            for floor_seq, prev_floor, prev_cp, created, undone in c.execute(
                    "SELECT floor_seq, prev_floor_seq, prev_checkpoint, created_at, undone_at "
                    "FROM context_clears WHERE session_id = ? AND branch = ? AND "
                    "floor_seq <= ? ORDER BY id", (source.id, source.branch, at)).fetchall():
                c.execute("INSERT INTO context_clears (session_id, floor_seq, prev_floor_seq, "
                          "prev_checkpoint, created_at, undone_at, branch) VALUES "
                          "(?, ?, ?, ?, ?, ?, 0)", (sid, floor_seq, prev_floor,
                                                    copies.get(prev_cp), created, undone))
            pins = _copy_pins(c, source, sid, at)
            facts = c.execute("SELECT COUNT(*) FROM checkpoint_facts WHERE checkpoint_id = ?",
                              (active,)).fetchone()[0]
            crashpoints.reached("in_fork")  # every write done, the transaction still open
        with self.core.read() as c:
            return Forked(session_row(c, sid), source, at, active, facts, pins)


# A turn's end: its answer (an assistant message that calls no tool). A question, a tool call
# or a tool result is the middle of a turn, and a turn still running has no answer yet.
_ANSWER = "m.role = 'assistant' AND m.tool_calls IS NULL"


def _fork_point(c: sqlite3.Connection, source: Session, at: int | None) -> int:
    """The source's last message the fork starts from: `at`, checked to be an answer on its
    branch in use, or its newest answer (a turn another process is still running, or one
    whose answer never came, is left out)."""
    on = current_path(c, source.id).clause()
    if at is None:
        newest = c.execute(f"SELECT MAX(seq) FROM messages m WHERE {on} AND {_ANSWER}"
                           ).fetchone()[0]
        if newest is None:
            raise NotForkable(f"session {source.name} has no answered turn to fork yet",
                              "fork it once an answer has come")
        return int(newest)
    row = c.execute(f"SELECT {_ANSWER} FROM messages m WHERE seq = ? AND {on}",
                    (at,)).fetchone()
    if row is None:
        raise NotForkable(f"session {source.name} has no message {at} on its branch in use",
                          f"`picochat history -s {source.name}` numbers its messages")
    if not row[0]:
        after = c.execute(f"SELECT MIN(seq) FROM messages m WHERE seq > ? AND {on} AND "
                          f"{_ANSWER}", (at,)).fetchone()[0]
        before = c.execute(f"SELECT MAX(seq) FROM messages m WHERE seq < ? AND {on} AND "
                           f"{_ANSWER}", (at,)).fetchone()[0]
        hint = (f"fork at {after}, the answer that ends its turn" if after is not None else
                f"fork at {before}, the last answer before it" if before is not None else
                "fork once an answer has come")
        raise NotForkable(f"message {at} of session {source.name} does not end a turn", hint)
    return at


def _fork_name(c: sqlite3.Connection, source: str) -> str:
    """"<source>-fork", or the first free "<source>-fork-N"."""
    taken = {r[0] for r in c.execute("SELECT name FROM sessions WHERE deleted_at IS NULL")}
    stem = source[:180].rstrip(JOINERS) + "-fork"  # a joiner cut from its pair hides
    name, n = stem, 2
    while name in taken:
        name, n = f"{stem}-{n}", n + 1
    return name


def _copy_checkpoints(c: sqlite3.Connection, source: Session, fork: str, at: int
                      ) -> dict[str, str]:
    """Copies, for the fork's first branch, of the checkpoints of the source's branch in use
    whose cut lies at or before `at` (made from rows the fork has), with their ledgers and
    timeline entries, parents linked among the copies; {source's id: copy's id}."""
    ids = [r[0] for r in c.execute(
        "SELECT k.id FROM context_checkpoints k JOIN branch_checkpoints b ON b.checkpoint_id "
        "= k.id WHERE b.session_id = ? AND b.branch = ? AND k.first_retained_seq <= ? "
        "ORDER BY k.generation", (source.id, source.branch, at))]
    copies: dict[str, str] = {}
    for old in ids:
        new = "cp_" + uuid.uuid4().hex[:16]
        parent = c.execute("SELECT parent_checkpoint_id FROM context_checkpoints WHERE id = ?",
                           (old,)).fetchone()[0]
        c.execute(f"INSERT INTO context_checkpoints (id, session_id, parent_checkpoint_id, "
                  f"{_CHECKPOINT_COPY}) SELECT ?, ?, ?, {_CHECKPOINT_COPY} FROM "
                  "context_checkpoints WHERE id = ?", (new, fork, copies.get(parent), old))
        c.execute("INSERT INTO checkpoint_ledgers (checkpoint_id, dropped, dropped_up_to) "
                  "SELECT ?, dropped, dropped_up_to FROM checkpoint_ledgers WHERE "
                  "checkpoint_id = ?", (new, old))
        c.execute("INSERT INTO checkpoint_facts (checkpoint_id, ord, seq, kind, said_by, text, "
                  "vals) SELECT ?, ord, seq, kind, said_by, text, vals FROM checkpoint_facts "
                  "WHERE checkpoint_id = ?", (new, old))
        c.execute("INSERT INTO branch_checkpoints (checkpoint_id, session_id, branch) "
                  "VALUES (?, ?, 0)", (new, fork))
        c.execute("INSERT OR IGNORE INTO timeline (key, category, session_id, content, "
                  "created_at) SELECT ?, category, ?, content, created_at FROM timeline "
                  "WHERE key = ?", (CHECKPOINT_KEY + new, fork, CHECKPOINT_KEY + old))
        copies[old] = new
    return copies


def _copy_pins(c: sqlite3.Connection, source: Session, fork: str, at: int) -> int:
    """The source's pins that held at the fork point: at its newest answer, those in force;
    at an earlier one, those made before the message after it was written and not removed
    by then (a tie on the clock counts as before), from no message after it. Numbers kept,
    so "#2" means the same pin on both sides."""
    after = c.execute(f"SELECT MIN(created_at) FROM messages m WHERE seq > ? AND "
                      f"{current_path(c, source.id).clause()}", (at,)).fetchone()[0]
    held = ("unpinned_at IS NULL" if after is None else  # nor one taken from a later message
            "created_at <= :after AND (unpinned_at IS NULL OR unpinned_at > :after) AND "
            "(source_seq IS NULL OR source_seq <= :at)")
    return c.execute(
        "INSERT INTO pins (session_id, number, text, tokens, source_seq, created_at) "
        "SELECT :fork, number, text, tokens, source_seq, created_at FROM pins WHERE "
        f"session_id = :source AND {held}",
        {"fork": fork, "source": source.id, "after": after, "at": at}).rowcount


def detach_forks(c: sqlite3.Connection, session_id: str) -> None:
    """Before `session_id` is purged for good: each fork of it gets its own copy of the rows
    it reads there, on its first branch (whose path read them), seqs kept, and reads on
    where its path went on past them (the purged session's own source, if it is a fork)."""
    for (fork,) in c.execute("SELECT id FROM sessions WHERE forked_from = ?",
                             (session_id,)).fetchall():
        path = path_of(c, fork, 0)
        theirs = BranchPath(fork, 0, tuple(s for s in path.steps if s[0] == session_id))
        for (rowid,) in c.execute(f"SELECT m.id FROM messages m WHERE {theirs.clause()} "
                                  "ORDER BY m.seq").fetchall():
            new = c.execute(f"INSERT INTO messages ({MESSAGE_COLS}, branch) SELECT ?, "
                            f"{_NOT_SESSION_COLS}, 0 FROM messages WHERE id = ?",
                            (fork, rowid)).lastrowid
            c.execute("INSERT INTO messages_fts(rowid, content) SELECT id, content FROM "
                      "messages WHERE id = ?", (new,))
        # it reads on where its path went on after the purged session's rows: the first
        # step past them, capped where the path had it (not where the purged one forked)
        first = next(i for i, step in enumerate(path.steps) if step[0] == session_id)
        beyond = next((step for step in path.steps[first:] if step[0] != session_id), None)
        if beyond is None:  # its copies start it now; `fork_seq` stays its seqs' base
            c.execute("UPDATE sessions SET forked_from = NULL WHERE id = ?", (fork,))
        else:
            c.execute("UPDATE sessions SET forked_from = ?, fork_branch = ?, fork_seq = "
                      "MIN(fork_seq, ?) WHERE id = ?", (*beyond, fork))
