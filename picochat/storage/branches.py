"""Branches: a session's log as a tree (issue 36). Rewinding to an earlier message of the user
starts a branch there; the rows after it stay, on the branch that was left, and each branch
keeps its own context pointers (active checkpoint, `/clear` floor, undone turns).

A branch's path is what it reads of the log: its own rows, then its parent's path up to the
seq it left at (`BranchPath`). Nothing is copied and no row is rewritten: a new row says which
branch it was written on, and every read of the log or the context filters by the path of the
branch it reads. Where a branch begins, it takes the pointers that held at that point: the
floor of the clears made before it, the undone turns before it, and the newest checkpoint of
the chain in use whose summary and facts come only from rows before it (its cut is before the
rewound message), so a summary never carries a fact of another branch.

The session row holds the current branch's pointers (every other read goes on as before);
switching stores them in the branch's own row here and loads the other's, and moves the
context generation on, so a compaction built on one branch cannot commit on another.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from picochat import crashpoints
from picochat.errors import BranchNotFound, NotRewindable
from picochat.messages import Session
from picochat.storage.rows import OnCore, session_row, touch
from picochat.storage.sql import not_retracted, text_literal


@dataclass(frozen=True)
class BranchPath:
    """The rows a branch reads: for each (session, branch) on the way to the root, the highest
    seq of its rows on the path (None: all of them; the branch's own). A fork's path goes on
    into its source session (`storage/forks.py`). `clause` is that as SQL over a `messages`
    row aliased `m`, and `rows` the same without the rows the branch's undo took out (ids and
    ints only, formatted as literals: never text of a message)."""

    session: str  # the session reading: whose undo counts
    branch: int
    steps: tuple[tuple[str, int, int | None], ...]
    only: bool = False  # the session never branched and is no fork: every row of it is on it

    def clause(self) -> str:
        if self.only:
            return f"(m.session_id = {text_literal(self.session)})"
        sessions = ", ".join(text_literal(s) for s in dict.fromkeys(s for s, _, _ in self.steps))
        parts = [f"(m.session_id = {text_literal(s)} AND m.branch = {int(b)}"
                 + ("" if last is None else f" AND m.seq <= {int(last)}") + ")"
                 for s, b, last in self.steps]
        return f"(m.session_id IN ({sessions}) AND ({' OR '.join(parts)}))"

    def not_retracted(self) -> str:
        return not_retracted(self.session, self.branch)

    def rows(self) -> str:
        """The path's rows in the context's sense: on it, and not undone on this branch."""
        return f"{self.clause()} AND {self.not_retracted()}"

    def sessions(self) -> dict[str, int | None]:
        """Each session the path reads, with the highest seq of its rows on it (None: all)."""
        out: dict[str, int | None] = {}
        for s, _, last in self.steps:
            prev = out.get(s, 0)
            out[s] = None if last is None or prev is None else max(prev, last)
        return out


@dataclass(frozen=True)
class Branch:
    """One branch of a session, as `/branches` lists it."""

    id: int
    parent: int | None
    fork_seq: int          # the last seq of the parent's path it shares (0 for branch 0)
    turns: int             # user messages written on it
    last_seq: int          # its newest row's seq (the fork point while it has none)
    last_at: int           # when its newest row was written (its creation while none)
    current: bool
    first: str = ""        # its first message of the user's: how it went another way
    checkpoint: str | None = None  # its summary in use
    floor: int = 0         # its `/clear` floor
    source: str | None = None  # a fork's first branch: the name of the session it came from
    carried: int = 0           # …and the turns it reads from there

    @property
    def where(self) -> str:
        """Where it begins, as every list of branches says it."""
        if self.source is not None:
            return f"forked from {self.source} after message {self.fork_seq}"
        return ("the start" if self.parent is None else
                f"leaves branch {self.parent} after message {self.fork_seq}")

    @property
    def size(self) -> str:
        if self.source is not None:
            return f"{_turns(self.carried)} from {self.source}, {self.turns:,} since"
        return _turns(self.turns)


def _turns(n: int) -> str:
    return f"{n:,} turn{'s' if n != 1 else ''}"


def no_branch(session: str, branch: int) -> BranchNotFound:
    """The one error for a branch number a session lacks (`session`: its name or id)."""
    return BranchNotFound(f"session {session} has no branch {branch}",
                          "`picochat branches` lists them")


def path_of(c: sqlite3.Connection, session_id: str, branch: int) -> BranchPath:
    """The path of `branch`: its rows, then each ancestor's up to where its child left it,
    and on into the source session where a fork's first branch began."""
    rows = _branch_rows(c, session_id)
    if branch != 0 and branch not in rows:
        raise no_branch(session_id, branch)
    link = _source_of(c, session_id)
    if not rows and link is None:
        return BranchPath(session_id, branch, ((session_id, branch, None),), only=True)
    steps: list[tuple[str, int, int | None]] = []
    at_session, at, last = session_id, branch, None
    while (at_session, at) not in {(s, b) for s, b, _ in steps}:
        steps.append((at_session, at, last))
        parent, fork = rows.get(at, (None, 0))
        if parent is None:  # the root of this session: a fork goes on in its source
            if link is None:
                break
            at_session, at, fork = link
            rows, link = _branch_rows(c, at_session), _source_of(c, at_session)
        else:
            at = parent
        last = fork if last is None else min(last, fork)
    return BranchPath(session_id, branch, tuple(steps))


def _branch_rows(c: sqlite3.Connection, session_id: str) -> dict[int, tuple[int | None, int]]:
    return {r[0]: (r[1], r[2]) for r in c.execute(
        "SELECT id, parent, fork_seq FROM branches WHERE session_id = ?", (session_id,))}


def _source_of(c: sqlite3.Connection, session_id: str) -> tuple[str, int, int] | None:
    """Where a fork's first branch leaves its source: (session, branch, last seq); None for a
    session that is no fork."""
    row = c.execute("SELECT forked_from, fork_branch, fork_seq FROM sessions WHERE id = ?",
                    (session_id,)).fetchone()
    return (row[0], row[1], row[2]) if row and row[0] is not None else None


def floor_of(c: sqlite3.Connection, session: Session, branch: int) -> int:
    """`branch`'s `/clear` floor: the session's for the one in use, else its own row's."""
    if branch == session.branch:
        return session.context_floor_seq
    row = c.execute("SELECT context_floor_seq FROM branches WHERE session_id = ? AND id = ?",
                    (session.id, branch)).fetchone()
    return row[0] if row else 0


def current_path(c: sqlite3.Connection, session_id: str) -> BranchPath:
    row = c.execute("SELECT branch FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return path_of(c, session_id, row[0] if row else 0)


@dataclass(frozen=True)
class Rewound:
    """A rewind done: the session on its new branch, the branch it left and how many of the
    user's messages (from the rewound one on) stay there."""

    session: Session
    left: int
    later: int


class BranchPointers(OnCore):
    """Rewinding, switching and listing a session's branches, each call one transaction."""

    def branches(self, session_id: str) -> list[Branch]:
        """Every branch of the session, oldest first (only branch 0 for one never rewound)."""
        with self.core.read() as c:
            session = session_row(c, session_id)
            rows = c.execute("SELECT id, parent, fork_seq, created_at, "
                             "active_context_checkpoint_id, context_floor_seq FROM branches "
                             "WHERE session_id = ? ORDER BY id", (session_id,)).fetchall() \
                or [(0, None, session.fork_seq, session.created_at, None, 0)]
            source = None if session.forked_from is None else c.execute(
                "SELECT name FROM sessions WHERE id = ?", (session.forked_from,)).fetchone()[0]
            out = []
            for bid, parent, fork, created, checkpoint, floor in rows:
                if bid == session.branch:  # the session row holds the current one's
                    checkpoint = session.active_context_checkpoint_id
                    floor = session.context_floor_seq
                # its turns: the user's messages on it that no undo there took out
                turns, last_seq, last_at = c.execute(
                    "SELECT COUNT(*) FILTER (WHERE role = 'user' AND "
                    f"{not_retracted(session_id, bid)}), MAX(seq), MAX(created_at) FROM messages m "
                    "WHERE session_id = ? AND branch = ?", (session_id, bid)).fetchone()
                first = c.execute("SELECT substr(content, 1, 300) FROM messages WHERE "
                                  "session_id = ? AND branch = ? AND role = 'user' ORDER BY "
                                  "seq LIMIT 1", (session_id, bid)).fetchone()
                carried = 0
                if bid == 0 and source is not None:  # the turns a fork reads from its source
                    path = path_of(c, session_id, 0)
                    carried = c.execute(
                        f"SELECT COUNT(*) FROM messages m WHERE role = 'user' AND m.session_id "
                        f"!= ? AND {path.rows()}", (session_id,)).fetchone()[0]
                out.append(Branch(bid, parent, fork, turns, last_seq or fork,
                                  last_at or created, bid == session.branch,
                                  first[0] if first else "", checkpoint, floor,
                                  source if bid == 0 else None, carried))
            return out

    def rewind(self, session_id: str, seq: int) -> Rewound:
        """A new branch that leaves the current path just before message `seq` (one of the
        user's on it), made current with the pointers that held at that point; the branch
        left keeps its rows and its pointers. The caller then sends the edited message: it
        lands on the new branch."""
        with self.core.write() as c:
            session = session_row(c, session_id)
            path = current_path(c, session_id)
            row = c.execute(f"SELECT session_id, branch, role FROM messages m WHERE seq = ? "
                            f"AND {path.rows()}", (seq,)).fetchone()
            if row is None or row[2] != "user":
                raise NotRewindable(f"message {seq} is not one of yours in this branch's "
                                    "context", "select one of your messages, then press e")
            # a message a fork shares with its source: the new branch leaves the fork's own
            # first branch, whose path goes on into the source's rows
            owner = row[1] if row[0] == session_id else 0
            later = c.execute(f"SELECT COUNT(*) FROM messages m WHERE seq >= ? AND "
                              f"role = 'user' AND {path.rows()}", (seq,)).fetchone()[0]
            now = self.core.clock()
            _keep_first_branch(c, session, now)
            new = c.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM branches WHERE "
                            "session_id = ?", (session_id,)).fetchone()[0]
            _save_pointers(c, session)
            floor, in_use = _pointers_before(c, session, seq)
            checkpoint = _checkpoint_before(c, session, seq, floor, in_use)
            c.execute("INSERT INTO branches (session_id, id, parent, fork_seq, "
                      "active_context_checkpoint_id, context_floor_seq, created_at) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (session_id, new, owner, seq - 1, checkpoint, floor, now))
            # what held before the point, carried: undone turns, clears and the checkpoints
            # of the chain whose cuts come before it
            c.execute("INSERT INTO retractions (session_id, from_seq, to_seq, "
                      "context_generation, created_at, branch) SELECT session_id, from_seq, "
                      "MIN(to_seq, ?), context_generation, created_at, ? FROM retractions "
                      "WHERE session_id = ? AND branch = ? AND from_seq < ?",
                      (seq - 1, new, session_id, session.branch, seq))
            c.execute("INSERT INTO context_clears (session_id, floor_seq, prev_floor_seq, "
                      "prev_checkpoint, created_at, undone_at, branch) SELECT session_id, "
                      "floor_seq, prev_floor_seq, prev_checkpoint, created_at, undone_at, ? "
                      "FROM context_clears WHERE session_id = ? AND branch = ? AND "
                      "floor_seq < ? ORDER BY id", (new, session_id, session.branch, seq))
            c.execute("INSERT INTO branch_checkpoints (checkpoint_id, session_id, branch) "
                      "SELECT b.checkpoint_id, b.session_id, ? FROM branch_checkpoints b "
                      "JOIN context_checkpoints k ON k.id = b.checkpoint_id WHERE "
                      "b.session_id = ? AND b.branch = ? AND k.first_retained_seq < ?",
                      (new, session_id, session.branch, seq))
            _make_current(c, session_id, new, checkpoint, floor, now)
            crashpoints.reached("in_rewind")  # every write done, the transaction still open
        with self.core.read() as c:
            return Rewound(session_row(c, session_id), session.branch, later)

    def switch_branch(self, session_id: str, branch: int) -> Session:
        """Make `branch` current, with its own pointers; the one left keeps its own."""
        with self.core.write() as c:
            session = session_row(c, session_id)
            if branch == session.branch:
                return session
            target = c.execute("SELECT active_context_checkpoint_id, context_floor_seq FROM "
                               "branches WHERE session_id = ? AND id = ?",
                               (session_id, branch)).fetchone()
            if target is None:
                raise no_branch(session.name, branch)
            _save_pointers(c, session)
            now = self.core.clock()
            _make_current(c, session_id, branch, target[0], target[1], now)
        with self.core.read() as c:
            return session_row(c, session_id)


def _keep_first_branch(c: sqlite3.Connection, session: Session, now: int) -> None:
    """Branch 0 gets its row the first time the session branches (never before: a session
    that never branches has none)."""
    c.execute("INSERT OR IGNORE INTO branches (session_id, id, parent, fork_seq, created_at) "
              "VALUES (?, 0, NULL, ?, ?)", (session.id, session.fork_seq,
                                            session.created_at or now))


def _save_pointers(c: sqlite3.Connection, session: Session) -> None:
    """The current branch's pointers, kept in its own row while another is current."""
    c.execute("UPDATE branches SET active_context_checkpoint_id = ?, context_floor_seq = ? "
              "WHERE session_id = ? AND id = ?",
              (session.active_context_checkpoint_id, session.context_floor_seq, session.id,
               session.branch))


def _make_current(c: sqlite3.Connection, session_id: str, branch: int,
                  checkpoint: str | None, floor: int, now: int) -> None:
    """`branch` current with its pointers; the generation moves on (a compaction built on the
    branch left cannot commit here), and the compaction wait, a figure of that context, ends."""
    c.execute("UPDATE sessions SET branch = ?, active_context_checkpoint_id = ?, "
              "context_floor_seq = ?, context_generation = context_generation + 1 "
              "WHERE id = ?", (branch, checkpoint, floor, session_id))
    c.execute("DELETE FROM compaction_waits WHERE session_id = ?", (session_id,))
    touch(c, session_id, now)


def _pointers_before(c: sqlite3.Connection, session: Session, seq: int
                     ) -> tuple[int, str | None]:
    """The `/clear` floor, and the checkpoint in use, when the path reached `seq`: the
    current ones if the floor lies before it, else those the first clear in force made at or
    after `seq` moved away from."""
    if session.context_floor_seq < seq:
        return session.context_floor_seq, session.active_context_checkpoint_id
    row = c.execute("SELECT prev_floor_seq, prev_checkpoint FROM context_clears WHERE "
                    "session_id = ? AND branch = ? AND undone_at IS NULL AND floor_seq >= ? "
                    "ORDER BY id LIMIT 1", (session.id, session.branch, seq)).fetchone()
    if row is None or row[0] >= seq:  # a floor from before clears were kept: none known
        return 0, None
    return row[0], row[1]


def _checkpoint_before(c: sqlite3.Connection, session: Session, seq: int, floor: int,
                       at: str | None) -> str | None:
    """The newest checkpoint of the chain from `at` whose summary and facts come only from
    rows before `seq` (its cut, the first row it keeps, lies before it) and after `floor`."""
    while at is not None:
        row = c.execute("SELECT first_retained_seq, parent_checkpoint_id FROM "
                        "context_checkpoints WHERE id = ? AND session_id = ?",
                        (at, session.id)).fetchone()
        if row is None:
            return None
        if floor < row[0] < seq:
            return at
        at = row[1]
    return None
