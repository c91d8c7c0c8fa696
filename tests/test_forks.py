"""Forks (issue 36, item 2), as a spec of the store: a fork is a new session that starts with
another's context at one of its messages: its summary, its ledger, its pins, its undone turns
and clears, and the raw rows it reads, which it points at rather than copies. From there on
each side is its own: nothing written on one shows on the other.

(The random walk over turns, rewinds, forks and compactions is `test_branches.Branching`.)
"""

from __future__ import annotations

import pytest

from picochat.errors import NameTaken, NotForkable
from picochat.projection import project
from picochat.storage import open_store
from picochat.storage.schema import SCHEMA_VERSION
from tests.helpers.storage import append_message, database_at, old_session
from tests.helpers.traced import compact, seqs, turn


def rows_in_db(store) -> int:
    with store.core.read() as c:
        return c.execute("SELECT COUNT(*) FROM messages").fetchone()[0]


def long_talk(store, sid: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        turn(store, sid, f"question {i} " + "words " * 40, f"answer {i} " + "words " * 40)


def test_a_fork_reads_its_source_up_to_the_point_and_copies_no_row(store):
    src = store.create_session("work").id
    for i in range(3):
        turn(store, src, f"q{i}", f"a{i}")                    # 1..6
    before = rows_in_db(store)
    done = store.fork_session(src, "idea")
    fork = done.session.id
    assert (done.session.name, done.at, done.source.id) == ("idea", 6, src)
    assert rows_in_db(store) == before                        # pointed at, not copied
    assert seqs(store.history(fork)) == [1, 2, 3, 4, 5, 6]
    assert [m.content for m in store.history(fork)] == [m.content for m in store.history(src)]
    assert seqs(project(store.context_snapshot(fork)).raw) == [1, 2, 3, 4, 5, 6]
    assert store.session(fork).message_count == 6
    # from here on each side is its own
    turn(store, fork, "the fork's own question", "its answer")   # 7, 8 of the fork
    turn(store, src, "the source goes on", "so it does")          # 7, 8 of the source
    assert seqs(store.history(fork)) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert "the fork's own question" in store.history(fork)[6].content
    assert "the source goes on" in store.history(src)[6].content
    assert all("fork's own" not in m.content for m in store.history(src))
    assert store.latest_session().id == src
    assert store.session(fork).forked_from == src


def test_a_fork_starts_with_the_summary_ledger_and_pins_in_use_as_its_own_copies(store):
    src = store.create_session("work").id
    long_talk(store, src, 6)
    first = compact(store, src)
    long_talk(store, src, 3, start=6)
    second = compact(store, src)
    assert first.compacted and second.compacted
    store.add_pin(src, "the deploy key is kestrel", 6)
    snapshot = store.context_snapshot(src)

    done = store.fork_session(src, "idea")
    fork = done.session.id
    mine = store.context_snapshot(fork)
    assert done.checkpoint == mine.checkpoint.id != second.checkpoint.id
    assert mine.checkpoint.session_id == fork
    assert mine.checkpoint.summary == snapshot.checkpoint.summary
    assert mine.checkpoint.ledger == snapshot.checkpoint.ledger and done.facts > 0
    assert [p.text for p in mine.pins] == ["the deploy key is kestrel"] and done.pins == 1
    assert project(mine).provider_messages("sys") == project(snapshot).provider_messages("sys")
    assert store.search.timeline_entries(fork) != []
    # /uncompact goes back along the fork's own chain; the source keeps its summary
    store.uncompact(fork)
    assert store.context_snapshot(fork).checkpoint.summary == first.checkpoint.summary
    assert store.context_snapshot(src).checkpoint.id == second.checkpoint.id
    # a compaction, an undo and a pin in the fork stay there
    long_talk(store, fork, 4, start=20)
    assert compact(store, fork).compacted
    store.undo_last_turn(fork)
    store.add_pin(fork, "only in the fork", 3)
    assert [c.id for c in store.checkpoints(src)] == [second.checkpoint.id, first.checkpoint.id]
    assert [p.text for p in store.pins(src)] == ["the deploy key is kestrel"]
    assert not any(m.retracted for m in store.history(src))
    assert project(store.context_snapshot(src)).provider_messages("sys") == \
        project(snapshot).provider_messages("sys")


def test_a_fork_at_an_earlier_message_holds_what_the_context_held_then(store):
    src = store.create_session("work").id
    long_talk(store, src, 6)                                  # 1..12
    cp = compact(store, src).checkpoint
    store.add_pin(src, "typed before the fork point", 0)
    turn(store, src, "q6", "a6")                              # 13, 14
    turn(store, src, "q7", "a7")                              # 15, 16
    store.add_pin(src, "from message 15", 4, source_seq=15)
    store.undo_last_turn(src)                                 # 15, 16 out

    at_cut = store.fork_session(src, "at-cut", at=cp.first_retained_seq - 1)
    assert at_cut.checkpoint is None                          # its summary's cut is after
    assert seqs(store.history(at_cut.session.id))[-1] == cp.first_retained_seq - 1
    late = store.fork_session(src, "late", at=14)
    snap = store.context_snapshot(late.session.id)
    assert snap.checkpoint.summary == cp.summary
    assert [p.text for p in snap.pins] == ["typed before the fork point"]
    assert seqs(store.history(late.session.id)) == list(range(1, 15))
    whole = store.fork_session(src, "whole")                  # the undone turn comes along,
    assert [m.seq for m in store.history(whole.session.id) if m.retracted] == [15, 16]
    assert seqs(project(store.context_snapshot(whole.session.id)).raw) == \
        seqs(project(store.context_snapshot(src)).raw)        # still undone there


def test_a_fork_point_that_is_no_turn_s_end_is_refused_and_nothing_is_written(store):
    src = store.create_session("work").id
    with pytest.raises(NotForkable, match="no answered turn to fork"):
        store.fork_session(src, "x")
    turn(store, src, "q0", "a0")                              # 1, 2
    append_message(store, src, "user", "q1", turn_id="t3")    # 3
    append_message(store, src, "assistant", "", turn_id="t3",
                   tool_calls=[{"id": "c1", "type": "function",
                                "function": {"name": "read_file", "arguments": "{}"}}])
    append_message(store, src, "tool", "file text", turn_id="t3", tool_call_id="c1")
    append_message(store, src, "assistant", "a1", turn_id="t3")  # 6
    sessions = len(store.list_sessions())
    for at, why, hint in ((1, "does not end a turn", "fork at 2"),
                          (4, "does not end a turn", "fork at 6"),
                          (99, "no message 99", "picochat history -s work")):
        with pytest.raises(NotForkable, match=why) as raised:
            store.fork_session(src, "x", at=at)
        assert raised.value.exit_status == 2 and hint in raised.value.hint
    with pytest.raises(NameTaken, match="already exists"):
        store.fork_session(src, "work")
    assert len(store.list_sessions()) == sessions
    assert store.fork_session(src, None, at=2).session.name == "work-fork"
    assert store.fork_session(src).session.name == "work-fork-2"


def test_a_turn_still_running_in_another_process_is_not_forked_by_default(store):
    """Its question is written first, then its tool calls and results, and its answer last
    (a draft of it only a second in): until the answer comes, the fork ends before it."""
    src = store.create_session("work").id
    turn(store, src, "q0", "a0")                              # 1, 2
    append_message(store, src, "user", "q1, being answered", turn_id="t3")
    assert store.fork_session(src, "just asked").at == 2
    append_message(store, src, "assistant", "", turn_id="t3",
                   tool_calls=[{"id": "c1", "type": "function",
                                "function": {"name": "read_file", "arguments": "{}"}}])
    append_message(store, src, "tool", "file text", turn_id="t3", tool_call_id="c1")
    assert store.fork_session(src, "tool ran").at == 2
    append_message(store, src, "assistant", "a1", turn_id="t3")   # 6
    assert store.fork_session(src, "answered").at == 6


def test_undo_rewind_and_search_in_a_fork_reach_into_the_source_s_rows_on_its_side(store):
    src = store.create_session("work").id
    turn(store, src, "the staging host is osprey-7", "noted")  # 1, 2
    turn(store, src, "the deploy key is kestrel", "noted")     # 3, 4
    turn(store, src, "later: the db is heron", "noted")        # 5, 6
    fork = store.fork_session(src, "idea", at=4).session.id
    assert [h.seq for h in store.search.messages(fork, "staging host")] == [1]
    assert store.search.messages(fork, "heron") == []          # after the fork point
    assert store.search.count(fork, "osprey") == 1
    store.undo_last_turn(fork)                                 # 3, 4: the source's rows
    assert seqs(project(store.context_snapshot(fork)).raw) == [1, 2]
    assert not any(m.retracted for m in store.history(src))
    store.rewind(fork, 1)                                      # a branch of the fork
    turn(store, fork, "the staging host is wren", "ok")        # 5, 6 of the fork
    assert seqs(store.history(fork)) == [5, 6]
    [root, new] = store.branches(fork)
    assert root.where == "forked from work after message 4"
    assert root.size == "1 turn from work, 0 since"           # its undo took one out
    assert (new.parent, new.fork_seq) == (0, 0)
    store.switch_branch(fork, 0)
    assert seqs(store.history(fork)) == [1, 2, 3, 4]
    assert [b.id for b in store.branches(src)] == [0]          # the source never branched


def test_a_fork_of_a_fork_reads_through_both(store):
    a = store.create_session("a").id
    turn(store, a, "one", "two")                               # 1, 2
    b = store.fork_session(a, "b").session.id
    turn(store, b, "three", "four")                            # 3, 4 of b
    c = store.fork_session(b, "c").session.id
    turn(store, c, "five", "six")                              # 5, 6 of c
    assert [m.content.split(". ")[-1] for m in store.history(c)][::2] == [
        "one", "three", "five"]
    assert [m.session_id for m in store.history(c)] == [a, a, b, b, c, c]
    # how each began, as the session picker shows it: the first message on its path
    firsts = store.first_lines([a, b, c])
    assert all(firsts[s].endswith("one") for s in (a, b, c))
    store.rewind(c, 1)                                         # c now begins otherwise
    turn(store, c, "seven", "eight")
    assert store.first_lines([c])[c].endswith("seven")


def test_purging_a_source_for_good_leaves_each_fork_whole(store):
    a = store.create_session("a").id
    for i in range(3):
        turn(store, a, f"q{i}", f"a{i}")                       # 1..6
    b = store.fork_session(a, "b", at=4).session.id
    turn(store, b, "b's own", "yes")                           # 5, 6 of b
    c = store.fork_session(b, "c").session.id
    store.rewind(b, 3)
    turn(store, b, "b rewound", "ok")
    want = {s: {br.id: [m.content for m in store.history(s, br.id)]
                for br in store.branches(s)} for s in (b, c)}
    store.purge_session(a)
    assert {s: {br.id: [m.content for m in store.history(s, br.id)]
                for br in store.branches(s)} for s in (b, c)} == want
    assert store.search.count(c, "q1") == 1                    # the copies are searchable
    store.purge_session(b)
    assert [m.content for m in store.history(c)] == want[c][0]


def test_purging_the_middle_of_a_chain_leaves_the_last_fork_reading_what_it_read(store):
    """Found in review: G, then S forked from G and rewound to G's third message, then F
    forked from S. Purging S must leave F reading G only up to where S's branch did, not
    up to where S first forked."""
    g = store.create_session("g").id
    for i in range(5):
        turn(store, g, f"kiwi{i}", f"answer {i}")              # 1..10
    s = store.fork_session(g, "s").session.id
    store.rewind(s, 5)                                         # s reads g up to 4
    turn(store, s, "a squid question", "an answer")            # 11, 12 of s
    f = store.fork_session(s, "f").session.id
    want = [m.content for m in store.history(f)]
    assert len(want) == 6
    store.purge_session(s)
    assert [m.content for m in store.history(f)] == want
    assert seqs(project(store.context_snapshot(f)).raw) == [1, 2, 3, 4, 11, 12]
    assert [h.seq for h in store.search.messages(f, "squid")] == [11]  # a copy, found
    assert store.search.messages(f, "kiwi3") == []              # g's 7: not on f's path


def test_the_pins_a_fork_carries_are_those_that_held_at_its_point(tmp_path):
    """At an earlier answer: those made before the next message and not removed by then,
    whatever happened to them later (found in review)."""
    ticks = iter(range(1_000, 10**9, 1_000))   # a second between writes: no tie to judge
    store = open_store(tmp_path / "p.db", clock=lambda: next(ticks))
    src = store.create_session("work").id
    turn(store, src, "q0", "a0")                               # 1, 2
    kept = store.add_pin(src, "held then, removed later", 3)
    turn(store, src, "q1", "a1")                               # 3, 4
    store.add_pin(src, "pinned later, from message 1", 3, source_seq=1)
    store.remove_pin(src, kept.number)
    early = store.fork_session(src, "early", at=2)
    assert [p.text for p in store.pins(early.session.id)] == ["held then, removed later"]
    late = store.fork_session(src, "late")
    assert [p.text for p in store.pins(late.session.id)] == ["pinned later, from message 1"]
    store.close()


def test_a_database_from_schema_17_migrates_with_no_fork(tmp_path):
    path = tmp_path / "old.db"
    conn = database_at(path, 17)
    old_session(conn)                                          # 's_a': 1 user, 2 answer
    conn.close()
    store = open_store(path)
    try:
        assert store.session("s_a").forked_from is None
        assert seqs(store.history("s_a")) == [1, 2]
        fork = store.fork_session("s_a", "b").session.id
        assert seqs(store.history(fork)) == [1, 2]
        assert SCHEMA_VERSION >= 18
    finally:
        store.close()


def test_picochat_fork_from_the_shell(run_cli, cli_store):
    """`picochat fork -s SRC [--at SEQ] NAME` says what the fork starts with and makes it
    the current session; a bad point or name is one line, exit 2, and nothing is made."""
    import json

    for text in ("our redis runs on 6380", "the staging host is osprey-7"):
        assert run_cli("ask", "-s", "work", text).status == 0          # 1..4
    assert run_cli("pin", "-s", "work", "the deploy key is kestrel").status == 0
    made = run_cli("fork", "-s", "work", "--at", "2", "idea")
    assert made.status == 0, made.stderr
    assert made.stdout.startswith("Forked work after message 2 into idea: it starts with "
                                  "the context work had there (no summary, no pins)")  # pinned later
    assert "Commands without --session now go to idea; -s work goes back." in made.stdout
    assert run_cli("ask", "but redis moved to 6390").status == 0       # no -s: the fork
    fork = cli_store.find_session("idea")
    mine = [m.content for m in cli_store.history(fork.id)]
    assert mine[0] == "our redis runs on 6380" and mine[2] == "but redis moved to 6390"
    assert len(mine) == 4 and "osprey-7" not in " ".join(mine)
    work = cli_store.find_session("work")
    assert "6390" not in " ".join(m.content for m in cli_store.history(work.id))

    as_json = json.loads(run_cli("fork", "-s", "work", "--json").stdout)
    assert (as_json["name"], as_json["at"], as_json["pins"]) == ("work-fork", 4, 1)
    listed = {s["name"]: s for s in json.loads(run_cli("sessions", "--json").stdout)}
    assert (listed["idea"]["forked_from"], listed["idea"]["fork_seq"]) == (work.id, 2)
    assert listed["work"]["forked_from"] is None
    count = len(cli_store.list_sessions())
    for argv, says in ((["--at", "3"], "does not end a turn"), (["--at", "40"], "no message 40"),
                       (["-s", "nope"], "no session named 'nope'")):
        bad = run_cli("fork", *argv, "x") if "-s" in argv else run_cli(
            "fork", "-s", "work", *argv, "x")
        assert bad.status == 2 and says in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    for argv, says in ((["--at", "99999999999999999999"], "must be a number from 0"),
                       (["work"], "a session named 'work' already exists")):
        bad = run_cli("fork", "-s", "work", *argv)
        assert bad.status == 2 and says in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr and "internal error" not in bad.stderr
    assert len(cli_store.list_sessions()) == count
