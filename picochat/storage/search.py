"""Search: the raw log's full-text index ranked for `history_search` and the app's search,
the timeline of past summaries for `timeline_recall`, and the user's earlier prompts for the
prompt's recall.

Its own class because ranking is its own craft (bm25 over the FTS5 index, bounded so a word
found everywhere in a long log never makes a search scan all of it) and it only reads what
the log's writers wrote: nothing here changes a message or the context.
"""

from __future__ import annotations

import math
import re
import sqlite3
from dataclasses import dataclass
from typing import Sequence

from picochat.storage.core import Core
from picochat.storage.branches import BranchPath, current_path
from picochat.storage.sql import CHECKPOINT_KEY, NO_UPPER_BOUND


@dataclass(frozen=True)
class SearchHit:
    """A message `Search.messages` found, with the passage that matched."""

    seq: int
    role: str
    snippet: str       # the matching passage, matches between « and »
    turn_id: str | None
    retracted: bool


# bm25 costs a few microseconds a match, so a word found in most of a long log would make
# every search scan all of it: words in more than RARE_MATCHES messages are left out of the
# ranked query, and when every word is that common, only the newest COMMON_CANDIDATES matches
# are ranked.
RARE_MATCHES = 2_000
COMMON_CANDIDATES = 2_000


def fts_words(text: str) -> list[str]:
    return re.findall(r"\w+", text)[:16]


def fts_query(text: str) -> str | None:
    """A safe FTS5 query for free text: each word quoted (no operators, no syntax errors),
    any word may match, better matches rank first."""
    return _any_of(fts_words(text))


@dataclass(frozen=True)
class Query:
    """What a search asks for. `quoted`: "phrases" every match must hold as written.
    `joined`: tokens whose words punctuation joins (`OPS-103`, `10.0.0.2`, `/etc/svc`): the
    messages holding them as written rank first, then those holding their words. `loose`:
    the other words, any of which may match."""

    quoted: tuple[str, ...]
    joined: tuple[str, ...]
    loose: tuple[str, ...]

    @property
    def words(self) -> list[str]:
        """Every word a match may hold, for ranking and the snippet's marks."""
        return list(self.loose) + [w for p in self.joined for w in p.split()]


def parse_query(text: str) -> Query:
    quoted: list[str] = []
    joined: list[str] = []
    loose: list[str] = []
    for in_quotes, bare in re.findall(r'"([^"]*)"|(\S+)', text):
        words = fts_words(in_quotes if in_quotes else bare)
        if in_quotes and words:
            quoted.append(" ".join(words))
        elif len(words) > 1:
            joined.append(" ".join(words))
        else:
            loose += words
    return Query(tuple(quoted[:8]), tuple(joined[:8]), tuple(loose[:16]))


def _must(phrase_texts: Sequence[str], query: str | None) -> str | None:
    """`query` restricted to the messages holding every phrase."""
    must = " AND ".join(f'"{p}"' for p in phrase_texts)
    if not must:
        return query
    return f"({must}) AND ({query})" if query else must


def _any_of(words: Sequence[str]) -> str | None:
    return " OR ".join(f'"{w}"' for w in words) if words else None


def _all_of(words: Sequence[str]) -> str | None:
    return " AND ".join(f'"{w}"' for w in words) if words else None




class Search:
    """`store.search`: ranked full-text search of the log, the timeline, earlier prompts."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def messages(self, session_id: str, query: str, limit: int = 10,
                 before_seq: int | None = None) -> list[SearchHit]:
        """Full-text search over the raw log of the branch in use, including rows a checkpoint
        summarized, cleared or undone (they are marked): best matches first. `before_seq`
        leaves out the turn doing the searching."""
        q = parse_query(query)
        must, words = list(q.quoted), q.words
        if not words and not must:
            return []
        limit = max(1, limit)
        before = before_seq if before_seq is not None else NO_UPPER_BOUND
        with self.core.read() as c:
            on = current_path(c, session_id)  # the branch read: no other's rows
            # a message holding every word comes first, however long it is (bm25 alone ranks
            # a short one holding the common words over a long one that also has the rare),
            # and first among those, one holding the joined tokens as written (OPS-103)
            picked = (_ranked(c, _must(must + list(q.joined), _all_of(list(q.loose))),
                              before, limit, 0, NO_UPPER_BOUND, on) if q.joined
                      else [])
            if (len(words) > 1 or must) and len(picked) < limit:
                more = _ranked(c, _must(must, _all_of(words)), before,
                               limit + len(picked), 0, NO_UPPER_BOUND, on)
                picked += [i for i in more if i not in picked][: limit - len(picked)]
            rare = [w for w in words if _matches_up_to(c, w, RARE_MATCHES + 1) <= RARE_MATCHES]
            if rare and len(picked) < limit:
                more = _ranked(c, _must(must, _any_of(rare)), before,
                               limit + len(picked), 0, NO_UPPER_BOUND, on)
                picked += [i for i in more if i not in picked][: limit - len(picked)]
            if len(picked) < limit:  # fill up from the newest matches of every word
                everything = _must(must, _any_of(words))
                # the newest candidates end at the session's last row before `before`; the
                # index alone finds where they begin (a join here makes SQLite scan it all)
                top = _top_rowid(c, on, before)
                floor = c.execute(
                    "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? AND rowid <= ? "
                    "ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                    (everything, top, COMMON_CANDIDATES - 1)).fetchone()
                more = _ranked(c, everything, before, limit + len(picked),
                               floor[0] if floor else 0, top, on)
                picked += [i for i in more if i not in picked][: limit - len(picked)]
            if not picked:
                return []
            marks = ",".join("?" * len(picked))
            rows = c.execute(  # snippets for the chosen rows only: they cost more than bm25
                "SELECT m.id, m.seq, m.role, snippet(messages_fts, 0, '«', '»', '…', 16), "
                f"m.turn_id, NOT {on.not_retracted()} FROM messages_fts "
                "JOIN messages m ON m.id = messages_fts.rowid "
                f"WHERE messages_fts MATCH ? AND messages_fts.rowid IN ({marks})",
                (_any_of(words + [w for p in must for w in p.split()]), *picked)).fetchall()
        by_id = {r[0]: SearchHit(r[1], r[2], r[3], r[4], bool(r[5])) for r in rows}
        return [by_id[i] for i in picked if i in by_id]

    def count(self, session_id: str, query: str, cap: int = 10_000) -> int:
        """How many of the session's messages hold `query` as written: its phrases and joined
        tokens, and any of its loose words; counted no further than `cap`."""
        q = parse_query(query)
        match = _must(list(q.quoted + q.joined), _any_of(list(q.loose)))
        if match is None:
            return 0
        with self.core.read() as c:
            on = current_path(c, session_id).clause()
            return c.execute(
                "SELECT COUNT(*) FROM (SELECT m.id FROM messages_fts JOIN messages m ON "
                f"m.id = messages_fts.rowid WHERE messages_fts MATCH ? AND {on} LIMIT ?)",
                (match, cap)).fetchone()[0]

    def timeline(self, session_id: str, query: str, limit: int = 5) -> list[tuple[str, str]]:
        """Earlier checkpoint summaries (the timeline) that mention the query's words, the
        best-matching first: (key, summary). A word found in every summary ("the", "is")
        counts for little, a rare one ("deploy") for much: each word matched (whole, or as the
        start of a longer one) scores by its rarity across the timeline."""
        terms = {t.lower() for t in fts_words(query)}
        if not terms:
            return []
        docs = [(key, content, set(re.findall(r"\w+", content.lower())))
                for key, content in self.timeline_entries(session_id)]
        def has(words: set[str], term: str) -> bool:  # "deploy" finds "deployment"
            return term in words or len(term) >= 3 and any(w.startswith(term) for w in words)

        found = {t: sum(has(words, t) for _, _, words in docs) for t in terms}
        scored = []
        for order, (key, content, words) in enumerate(docs):
            score = sum(math.log((len(docs) + 1) / found[t]) for t in terms if has(words, t))
            if score:
                scored.append((-score, order, key, content))
        scored.sort()
        return [(key, content) for _, _, key, content in scored[:limit]]

    def user_prompts(self, limit: int = 500) -> list[str]:
        """The newest `limit` user messages of every session, oldest first: the order the
        prompt's recall walks back from its end (no other file holds text). Ordered by row
        id, the order they were written in: seqs are per session, and two sessions' clocks
        may tie within a millisecond."""
        with self.core.read() as c:
            rows = c.execute("SELECT content FROM messages WHERE role = 'user' "
                             "ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [r[0] for r in reversed(rows)]

    # --- the timeline: accepted summaries, kept for recall ------------------------------------

    def add_timeline(self, key: str, session_id: str, content: str,
                     category: str = "Timeline") -> None:
        """A summary for `timeline_recall`, written after its checkpoint commits (D13): best
        effort, and a key written twice is kept once."""
        with self.core.write() as c:
            c.execute("INSERT OR IGNORE INTO timeline (key, category, session_id, content, "
                      "created_at) VALUES (?, ?, ?, ?, ?)",
                      (key, category, session_id, content, self.core.clock()))

    def timeline_entries(self, session_id: str) -> list[tuple[str, str]]:
        """The timeline of the branch in use, oldest first: (key, summary). A summary made
        on another branch is not recalled here: it holds that branch's facts."""
        with self.core.read() as c:
            # left out: a summary of a checkpoint the current branch does not have
            return c.execute(
                "SELECT key, content FROM timeline t WHERE session_id = ? AND (NOT EXISTS ("
                "SELECT 1 FROM branch_checkpoints b WHERE b.session_id = t.session_id AND "
                f"t.key = '{CHECKPOINT_KEY}' || b.checkpoint_id) OR EXISTS (SELECT 1 FROM "
                "branch_checkpoints b WHERE b.session_id = t.session_id AND b.branch = "
                "(SELECT branch FROM sessions WHERE id = t.session_id) AND "
                f"t.key = '{CHECKPOINT_KEY}' || b.checkpoint_id)) ORDER BY created_at, id",
                (session_id,)).fetchall()


def _matches_up_to(c: sqlite3.Connection, word: str, cap: int) -> int:
    """Messages (of any session) holding `word`, counted no further than `cap`."""
    return c.execute("SELECT COUNT(*) FROM (SELECT rowid FROM messages_fts WHERE "
                     "messages_fts MATCH ? LIMIT ?)", (_any_of([word]), cap)).fetchone()[0]


def _ranked(c: sqlite3.Connection, match: str | None, before: int, limit: int, floor: int,
            top: int, on: BranchPath) -> list[int]:
    """Row ids of the best matches (bm25, then newest) among rows floor..top on the path
    `on`, below seq `before`."""
    rows = c.execute(
        "SELECT m.id FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
        "WHERE messages_fts MATCH ? AND messages_fts.rowid BETWEEN ? AND ? "
        f"AND m.seq < ? AND {on.clause()} "
        "ORDER BY bm25(messages_fts), m.seq DESC LIMIT ?",
        (match, floor, top, before, limit)).fetchall()
    return [r[0] for r in rows]


def _top_rowid(c: sqlite3.Connection, on: BranchPath, before: int) -> int:
    """A row id no row of the path below seq `before` is above: the highest of each session
    it reads, in range, found by the index alone. (Not the newest seq's: a fork given its
    purged source's rows holds old seqs under new ids.)"""
    top = 0
    for session_id, last in on.sessions().items():
        bound = before if last is None else min(before, last + 1)
        row = c.execute("SELECT MAX(id) FROM messages WHERE session_id = ? AND seq < ?",
                        (session_id, bound)).fetchone()
        top = max(top, row[0] or 0)
    return top
