"""Full-text search over the raw log and the Timeline: what `history_search` and
`timeline_recall` (issue 4) stand on. A fact summarized away from the context stays findable."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from picochat.budget import budget_limits
from picochat.compaction.compact import CompactRequest, compact_context
from picochat.projection import restore
from picochat.storage import open_store
from picochat.storage.schema import MIGRATIONS
from tests.helpers.conversations import talk
from tests.helpers.scripted import Recorder, well_formed
from picochat.storage.search import fts_query
from tests.helpers.storage import append_message


def compact(store, sid, summary=well_formed("- the user asked about many things")):
    request = CompactRequest(session_id=sid, reason="manual",
                             limits=budget_limits(8_192, None, 1_024, 800), system_prompt="sys")
    return asyncio.run(compact_context(store, Recorder(summaries=[summary]), request))


def test_a_fact_only_the_raw_log_still_holds_is_found_after_compaction(store):
    s = store.create_session("f")
    # prose, no exact value the fact ledger would keep: only the raw log holds it
    fact = append_message(store, s.id, "user", "The vault token rotates every full moon on "
                          "the kestrel host.", turn_id="t0")
    append_message(store, s.id, "assistant", "Noted.", turn_id="t0")
    talk(store, s.id, 10, start=1)
    outcome = compact(store, s.id)
    assert outcome.compacted and outcome.checkpoint.first_retained_seq > fact.seq
    projection = restore(store, s.id)
    assert "kestrel" not in str(projection.provider_messages("sys"))  # gone from the context
    hits = store.search.messages(s.id, "which host has the vault token?")
    assert hits[0].seq == fact.seq and hits[0].role == "user"
    assert "«host»" in hits[0].snippet or "«vault»" in hits[0].snippet


def test_best_matches_first_limit_and_other_sessions_apart(store):
    a, b = store.create_session("a"), store.create_session("b")
    append_message(store, a.id, "user", "postgres runs on port 5432")
    best = append_message(store, a.id, "user", "postgres replica postgres primary postgres")
    append_message(store, b.id, "user", "postgres in another session")
    hits = store.search.messages(a.id, "postgres", limit=5)
    assert [h.seq for h in hits][0] == best.seq and len(hits) == 2
    assert len(store.search.messages(a.id, "postgres", limit=1)) == 1
    assert all(h.seq in (1, 2) for h in hits)


def test_free_text_with_fts_syntax_never_errors(store):
    s = store.create_session("q")
    append_message(store, s.id, "user", 'he said "NEAR(a b)" AND-OR * ^col:x')
    for query in ('"', "NEAR(", "a AND", "*", "col:x", "-", "()", "'; DROP TABLE messages; --"):
        store.search.messages(s.id, query)  # no sqlite3.OperationalError
    assert store.search.messages(s.id, "") == [] and fts_query("?!") is None
    assert store.search.messages(s.id, "NEAR")[0].seq == 1


def test_undone_and_cleared_rows_are_found_and_undone_ones_marked(store):
    s = store.create_session("u")
    append_message(store, s.id, "user", "first secret: falcon", turn_id="t1")
    append_message(store, s.id, "assistant", "ok", turn_id="t1")
    store.clear_context(s.id)
    append_message(store, s.id, "user", "second secret: heron", turn_id="t2")
    store.undo_last_turn(s.id)
    assert [h.retracted for h in store.search.messages(s.id, "falcon")] == [False]
    assert [h.retracted for h in store.search.messages(s.id, "heron")] == [True]


def test_purge_removes_the_session_from_the_index(store):
    s = store.create_session("p")
    append_message(store, s.id, "user", "unique-word-zebra")
    store.purge_session(s.id)
    with store.core.read() as c:
        assert c.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH "
                         "'zebra'").fetchone()[0] == 0


def test_upgrading_a_version_3_database_indexes_its_old_messages(tmp_path: Path):
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    for script in MIGRATIONS[:3]:
        for statement in [x for x in script.split(";") if x.strip()]:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 3")
    conn.execute("INSERT INTO sessions (id, name, created_at, updated_at) "
                 "VALUES ('s1', 'old', 1, 1)")
    conn.execute("INSERT INTO messages (session_id, seq, role, content, tokens, created_at) "
                 "VALUES ('s1', 1, 'user', 'the legacy password hint is pelican', 9, 1)")
    conn.commit()
    conn.close()
    store = open_store(path)
    try:
        assert [h.seq for h in store.search.messages("s1", "pelican")] == [1]
        append_message(store, "s1", "user", "and a new pelican")
        assert sorted(h.seq for h in store.search.messages("s1", "pelican")) == [1, 2]
    finally:
        store.close()


def test_timeline_recall_finds_an_earlier_summary(store):
    s = store.create_session("t")
    talk(store, s.id, 10)
    first = compact(store, s.id, well_formed(
        "- (none)", Exact_Facts="- the deploy key is in /etc/keys/deploy.pem"))
    talk(store, s.id, 10, start=10)
    compact(store, s.id, well_formed("- later work on the frontend"))
    found = store.search.timeline(s.id, "where is the deploy key?")
    assert found[0] == (f"context_checkpoint:{first.checkpoint.id}", first.checkpoint.summary)
    assert store.search.timeline(s.id, "???") == []


def test_an_old_fact_is_found_in_a_long_log_where_the_other_words_are_everywhere(store):
    from picochat.messages import NewMessage
    from picochat.storage import search as search_module
    from tests.helpers.storage import append_messages

    s = store.create_session("long")
    fact = append_message(store, s.id, "user", "the canary host listens on port 8042")
    common = search_module.COMMON_CANDIDATES + search_module.RARE_MATCHES + 500
    append_messages(store, s.id, [NewMessage("user", f"the canary host moved; port {9000 + i}")
                                  for i in range(common)])
    # every word but one is in thousands of newer rows: the rare one still finds the fact
    hits = store.search.messages(s.id, "which port does the canary host use, 8042?", limit=3)
    assert hits[0].seq == fact.seq and "«8042»" in hits[0].snippet
    # a query of common words alone ranks among the newest matches and still fills the page
    recent = store.search.messages(s.id, "canary host", limit=5)
    assert len(recent) == 5 and all(h.seq > common - search_module.COMMON_CANDIDATES
                                    for h in recent)
    # and the turn doing the searching is left out
    assert all(h.seq < 10 for h in store.search.messages(s.id, "canary", before_seq=10))


# (facts, filler sentences, turns) of each stretch of the chat hypothesis found it in
STRETCHES = [(1, 0, 3), (2, 0, 2), (2, 0, 7), (1, 0, 2), (1, 0, 3), (1, 1, 1), (2, 0, 7),
             (1, 1, 2), (3, 1, 4), (1, 0, 5), (1, 1, 3), (2, 0, 1), (2, 3, 5), (2, 1, 3),
             (1, 2, 6), (1, 2, 5), (2, 1, 7), (2, 0, 7), (1, 1, 5), (1, 2, 2), (3, 2, 1),
             (2, 0, 5)]


def test_the_message_holding_every_word_comes_first_however_long_it_is(store):
    """A fact planted in a long message ("…, /srv/app41/service.toml …, please keep this in
    mind …") is what a search for it must find first, among shorter messages holding its
    common words (srv, service, toml). bm25 alone scored the long one below 29 short ones
    and left it out of the 25 results (tests/test_facts_survive.py's state machine found
    this chat)."""
    sid = store.create_session("s").id
    filler = ("Please keep this in mind for the rest of our work together, it matters a lot "
              "to the team and we will come back to it later when we plan the rollout. ")
    n = 0
    for facts, pad, turns in STRETCHES:
        for _ in range(turns):
            n += 1
            said = (f"port {20000 + n}", f"/srv/app{n}/service.toml", f"TKT-{5000 + n}")[:facts]
            append_message(store, sid, "user", f"Remember {', '.join(said)} for step {n}. "
                           + filler * pad, turn_id=f"t{n}")
            append_message(store, sid, "assistant", "Noted. " + filler * pad, turn_id=f"t{n}")
    hits = store.search.messages(sid, "/srv/app41/service.toml", limit=25)
    assert "app41" in hits[0].snippet
    assert len(hits) == 25  # the others still fill the list


def test_a_ticket_id_or_a_quoted_phrase_finds_that_one_not_every_word_of_it(store):
    """`/search OPS-103` found all twenty OPS tickets (issue 35, item 8): a token joined by
    punctuation, or a "quoted phrase", must match as written; loose words still rank."""
    from picochat.storage.search import parse_query
    from picochat.tui.commands import search_title

    sid = store.create_session("ops").id
    for i in range(100, 120):
        append_message(store, sid, "user", f"Ticket OPS-{i} is about the cache.", turn_id=f"t{i}")
    append_message(store, sid, "user", "The redis cache runs on port 6380.", turn_id="r")
    hits = store.search.messages(sid, "OPS-103", limit=20)
    assert hits[0].seq == 4 and store.search.count(sid, "OPS-103") == 1  # that one first
    assert len(hits) == 20  # then the others holding its words, as before
    assert search_title("OPS-103", 20, 1) == ("1 message holds 'OPS-103' as written (first), "
                                              "then the best holding its words")
    assert [h.seq for h in store.search.messages(sid, '"OPS-103"')] == [4]  # quoted: only it
    assert store.search.count(sid, "OPS") == 20  # a loose word is still every one
    assert [h.seq for h in store.search.messages(sid, '"redis cache"')] == [21]
    assert store.search.count(sid, '"cache redis"') == 0  # a phrase keeps its order
    q = parse_query('"redis cache" port 10.0.0.2')
    assert (q.quoted, q.joined, q.loose) == (("redis cache",), ("10 0 0 2",), ("port",))
