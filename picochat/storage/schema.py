"""Schema migrations, one step per `PRAGMA user_version`.

Version 1 is the plain chat log; version 2 adds only the checkpoint table and session fields (an
old session starts with no checkpoint, never one guessed from old data); version 3 adds the
timeline of accepted summaries and the retractions that undo writes instead of deleting rows;
version 4 a full-text index of the raw log; version 5 a session's own system prompt (`/system`);
later steps say what they add beside their SQL. Steps never rewrite existing messages.
"""

from __future__ import annotations

import sqlite3
from typing import Callable

from picochat.storage.legacy_ledger import carry_ledgers

# A step is SQL, or SQL and then a function that moves existing rows across (same transaction).
Step = str | tuple[str, Callable[[sqlite3.Connection], None]]


def number_activity(conn: sqlite3.Connection) -> None:
    """Step 15's carry: number the sessions there are in the order their clock stamps gave
    them (the old "most recently active"), ties by age, so the upgrade changes no choice; the
    next write to any session then puts it above them all, whatever its stamp says."""
    rows = conn.execute("SELECT rowid FROM sessions ORDER BY updated_at, rowid").fetchall()
    conn.executemany("UPDATE sessions SET activity_seq = ? WHERE rowid = ?",
                     [(n, rowid) for n, (rowid,) in enumerate(rows, start=1)])


def first_branches(conn: sqlite3.Connection) -> None:
    """Step 17's carry: every checkpoint there is belongs to branch 0, the only one then."""
    conn.execute("INSERT INTO branch_checkpoints (checkpoint_id, session_id, branch) "
                 "SELECT id, session_id, 0 FROM context_checkpoints")


MIGRATIONS: tuple[Step, ...] = (
    # 1: sessions and the append-only message log.
    """
    CREATE TABLE sessions (
        id          TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL,
        model       TEXT,
        deleted_at  INTEGER
    );
    CREATE UNIQUE INDEX idx_sessions_live_name ON sessions(name) WHERE deleted_at IS NULL;
    CREATE TABLE messages (
        id           INTEGER PRIMARY KEY,
        session_id   TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq          INTEGER NOT NULL,
        role         TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
        content      TEXT NOT NULL,
        tool_calls   TEXT,
        tool_call_id TEXT,
        name         TEXT,
        turn_id      TEXT,
        tool_status  TEXT,
        status       TEXT NOT NULL DEFAULT 'complete',
        tokens       INTEGER NOT NULL,
        created_at   INTEGER NOT NULL,
        UNIQUE(session_id, seq)
    );
    """,
    # 2: context checkpoints and the session's pointer to one.
    """
    CREATE TABLE IF NOT EXISTS context_checkpoints (
        id                    TEXT PRIMARY KEY,
        session_id            TEXT NOT NULL,
        generation            INTEGER NOT NULL,
        parent_checkpoint_id  TEXT,
        summary               TEXT NOT NULL,
        first_retained_seq    INTEGER NOT NULL,
        source_max_seq        INTEGER NOT NULL,
        trigger_reason        TEXT NOT NULL,
        provider_kind         TEXT NOT NULL,
        model                 TEXT NOT NULL,
        tokens_before         INTEGER NOT NULL,
        tokens_after          INTEGER NOT NULL,
        degraded              INTEGER NOT NULL DEFAULT 0,
        created_at            INTEGER NOT NULL,
        FOREIGN KEY(session_id) REFERENCES sessions(id) ON DELETE CASCADE,
        UNIQUE(session_id, generation)
    );
    CREATE INDEX IF NOT EXISTS idx_context_checkpoints_session_created
    ON context_checkpoints(session_id, created_at DESC);
    ALTER TABLE sessions ADD COLUMN active_context_checkpoint_id TEXT;
    ALTER TABLE sessions ADD COLUMN context_generation INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN last_compressed_message_at INTEGER;
    """,
    # 3: /clear floor, undo retractions, and the timeline of accepted summaries (searched by
    # `timeline_recall`, never read to rebuild a context).
    """
    ALTER TABLE sessions ADD COLUMN context_floor_seq INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE retractions (
        id                 INTEGER PRIMARY KEY,
        session_id         TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        from_seq           INTEGER NOT NULL,
        to_seq             INTEGER NOT NULL,
        context_generation INTEGER NOT NULL,
        created_at         INTEGER NOT NULL
    );
    CREATE INDEX idx_retractions_session ON retractions(session_id, from_seq);
    CREATE TABLE timeline (
        id          INTEGER PRIMARY KEY,
        key         TEXT NOT NULL UNIQUE,
        category    TEXT NOT NULL,
        session_id  TEXT REFERENCES sessions(id) ON DELETE CASCADE,
        content     TEXT NOT NULL,
        created_at  INTEGER NOT NULL
    );
    CREATE INDEX idx_timeline_session ON timeline(session_id, created_at);
    """,
    # 4: full-text index over the raw log, for `history_search` after compaction. It indexes
    # the messages table in place (external content): the text is stored once.
    """
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        content, content='messages', content_rowid='id',
        tokenize='unicode61 remove_diacritics 2'
    );
    INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
    """,
    # 5: `/system TEXT` sets a session's own system prompt; NULL means the agent's.
    """
    ALTER TABLE sessions ADD COLUMN system_prompt TEXT;
    """,
    # 6: the answer being streamed, saved every second or so outside the append-only log, so
    # a process killed mid-answer loses at most the last moments of it: the next start turns
    # a dead process's draft into an interrupted answer. One row per running turn.
    """
    CREATE TABLE drafts (
        turn_id     TEXT PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        content     TEXT NOT NULL,
        owner_pid   INTEGER NOT NULL,
        owner_start INTEGER,
        updated_at  INTEGER NOT NULL
    );
    """,
    # 7: each message's exact facts (the ledger's extraction), taken once when it is appended
    # like its token count, so a compaction over 200k tokens reads them instead of scanning
    # the text again. JSON [[kind, value], ...]; NULL for rows written before: extracted then.
    """
    ALTER TABLE messages ADD COLUMN facts TEXT;
    """,
    # 8: what a model's server taught picochat, per model and address, so the next process
    # does not learn it again by failing: the window its overflow error stated (kept beside
    # the configured window it corrected, and ignored once the config changes), and that it
    # refuses requests that offer tools.
    """
    CREATE TABLE model_traits (
        model             TEXT PRIMARY KEY,
        learned_window    INTEGER,
        configured_window INTEGER,
        tools_refused     INTEGER NOT NULL DEFAULT 0,
        updated_at        INTEGER NOT NULL
    );
    """,
    # 9: the thinking behind an assistant message's tool calls, for a provider that requires
    # it back in later requests (DeepSeek's thinking mode); NULL for every other row.
    """
    ALTER TABLE messages ADD COLUMN reasoning TEXT;
    """,
    # 10: when the app last opened each session (started in it, or switched to it), so the
    # next start reopens the one the user was viewing, not the one written to last. A
    # counter-like stamp: strictly above every other, whatever the clock says. NULL: never.
    """
    ALTER TABLE sessions ADD COLUMN last_opened_at INTEGER;
    """,
    # 11: each checkpoint's exact-fact ledger, as rows beside it: picochat's own record of
    # what a compaction folded, never read back out of summary text (where a model's
    # lookalike lines could pass for it). The checkpoints written before carry theirs across
    # from the one place picochat wrote it in their summaries (`legacy_ledger`).
    ("""
    CREATE TABLE checkpoint_ledgers (
        checkpoint_id  TEXT PRIMARY KEY REFERENCES context_checkpoints(id) ON DELETE CASCADE,
        dropped        INTEGER NOT NULL DEFAULT 0,
        dropped_up_to  INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE checkpoint_facts (
        checkpoint_id  TEXT NOT NULL
                       REFERENCES checkpoint_ledgers(checkpoint_id) ON DELETE CASCADE,
        ord            INTEGER NOT NULL,
        seq            INTEGER NOT NULL,
        kind           TEXT NOT NULL,
        said_by        TEXT NOT NULL CHECK (said_by IN ('user', 'answer', 'tool')),
        text           TEXT NOT NULL,
        PRIMARY KEY (checkpoint_id, ord)
    ) WITHOUT ROWID;
    """, carry_ledgers),
    # 12: each message's ledger statements (`picochat.statements`: the sentence around a
    # value, a paste as one line), taken once at append like its token count, in place of
    # schema 7's bare values (rows from before are read then); and the values each ledger
    # row holds, which a correction retires. Rows written before hold none: a correction
    # reads their text.
    # And where automatic compaction waits after a rejected or failed summary (issue 30), so
    # that `ask`, one process a turn, does not pay for a summary call on every turn either.
    """
    ALTER TABLE messages ADD COLUMN statements TEXT;
    ALTER TABLE checkpoint_facts ADD COLUMN vals TEXT NOT NULL DEFAULT '[]';
    CREATE TABLE compaction_waits (
        session_id          TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        context_generation  INTEGER NOT NULL,
        tokens_before       INTEGER NOT NULL,
        kind                TEXT NOT NULL
    );
    """,
    # 13: pins (issue 30, item 6): statements the user keeps verbatim in every request of a
    # session. Unpinning stamps `unpinned_at` rather than deleting, so the number a list
    # showed never comes back as another pin.
    """
    CREATE TABLE pins (
        session_id   TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        number       INTEGER NOT NULL,
        text         TEXT NOT NULL,
        tokens       INTEGER NOT NULL,
        source_seq   INTEGER,
        created_at   INTEGER NOT NULL,
        unpinned_at  INTEGER,
        PRIMARY KEY (session_id, number)
    ) WITHOUT ROWID;
    """,
    # 14: a draft's owner is told alive by a lock it holds (`storage/owner.py`), not by pid
    # and start time alone: a process in another pid namespace (a container) shares the
    # database but not the pid. NULL for drafts written before.
    """
    ALTER TABLE drafts ADD COLUMN owner_lock TEXT;
    """,
    # 15: the order sessions were last active in, as a counter (issue 31, item 13): each
    # write that makes a session the most recently active gives it one above every other
    # session's. `updated_at` is the clock, and a clock stepped back left a session stamped
    # in the future "latest" until the clock caught up; a counter cannot be.
    ("""
    ALTER TABLE sessions ADD COLUMN activity_seq INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX idx_sessions_activity ON sessions(activity_seq);
    """, number_activity),
    # 16: /clear is undoable (issue 35, item 3): each clear keeps the pointers it moved (the
    # floor and the active checkpoint before it), so /uncompact can put them back. `floor_seq`
    # is the floor the clear set; `undone_at` stamps a clear taken back; the newest (`id`) is
    # taken back first.
    """
    CREATE TABLE context_clears (
        id               INTEGER PRIMARY KEY,
        session_id       TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        floor_seq        INTEGER NOT NULL,
        prev_floor_seq   INTEGER NOT NULL,
        prev_checkpoint  TEXT,
        created_at       INTEGER NOT NULL,
        undone_at        INTEGER
    );
    CREATE INDEX idx_context_clears_session ON context_clears(session_id, id);
    """,
    # 17: branches (issue 36): a session's log is a tree. Each row, retraction and clear says
    # which branch it was made on (0: the session's first, every row written before). A
    # branch other than 0 leaves `parent` after its `fork_seq` (the last seq of the parent's
    # path it shares); its path is its own rows, then its parent's path up to that seq. The
    # session's own pointers (active checkpoint, floor) are those of its current `branch`; a
    # branch not current keeps its own in its row here. Which checkpoints belong to a branch
    # (made on it, or inherited where it began) is `branch_checkpoints`, beside
    # `context_checkpoints`, whose columns the contract fixes. Existing rows are not touched:
    # the new columns default to 0.
    ("""
    ALTER TABLE sessions ADD COLUMN branch INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE messages ADD COLUMN branch INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE retractions ADD COLUMN branch INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE context_clears ADD COLUMN branch INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE branches (
        session_id                    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        id                            INTEGER NOT NULL,
        parent                        INTEGER,
        fork_seq                      INTEGER NOT NULL,
        active_context_checkpoint_id  TEXT,
        context_floor_seq             INTEGER NOT NULL DEFAULT 0,
        created_at                    INTEGER NOT NULL,
        PRIMARY KEY (session_id, id)
    );
    CREATE TABLE branch_checkpoints (
        checkpoint_id  TEXT NOT NULL REFERENCES context_checkpoints(id) ON DELETE CASCADE,
        session_id     TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        branch         INTEGER NOT NULL,
        PRIMARY KEY (checkpoint_id, branch)
    );
    CREATE INDEX idx_branch_checkpoints ON branch_checkpoints(session_id, branch);
    """, first_branches),
    # 18: forks (issue 36): a session made from another's context at one of its messages.
    # Its first branch's path goes on into `forked_from`'s branch `fork_branch`, up to
    # `fork_seq`; no row of the source is copied, and the fork's own rows are numbered on from
    # `fork_seq`. NULL and 0 for every session that is no fork.
    """
    ALTER TABLE sessions ADD COLUMN forked_from TEXT;
    ALTER TABLE sessions ADD COLUMN fork_branch INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN fork_seq INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX idx_sessions_forked_from ON sessions(forked_from) WHERE forked_from IS NOT NULL;
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
