"""Branches (issue 36), as a spec of the store: rewinding to an earlier message of the user
starts a branch there, the rows after it stay on the branch left, and each branch keeps its
own context: its checkpoint, its `/clear` floor, its undone turns, what search and recall
find. A state machine then runs random turns, rewinds, switches, compactions, undos, clears
and `/uncompact`s, and after every step checks each branch against a model of its own path.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from picochat.errors import BranchNotFound, NotRewindable, StaleGeneration
from picochat.messages import NewCheckpoint
from picochat.projection import project
from picochat.storage import open_store
from picochat.storage.schema import SCHEMA_VERSION
from tests.helpers.storage import append_message, database_at, old_session
from tests.helpers.traced import TAG, TOKEN, compact, seqs, turn


def test_a_session_never_rewound_has_one_branch_and_reads_as_before(store):
    sid = store.create_session("s").id
    turn(store, sid, "hello", "hi")
    [only] = store.branches(sid)
    assert (only.id, only.parent, only.current, only.turns) == (0, None, True, 1)
    assert seqs(store.history(sid)) == [1, 2]


def test_rewinding_starts_a_branch_and_the_rows_after_stay_on_the_one_left(store):
    sid = store.create_session("s").id
    for i in range(3):
        turn(store, sid, f"question {i}", f"answer {i}")      # seqs 1..6
    raw = {m.seq: m.content for m in store.history(sid)}
    done = store.rewind(sid, 3)                                # edit the second question
    assert (done.session.branch, done.left, done.later) == (1, 0, 2)
    assert seqs(store.history(sid)) == [1, 2]                  # the path before it
    turn(store, sid, "question 1, asked better", "a better answer")  # seqs 7, 8
    assert seqs(store.history(sid)) == [1, 2, 7, 8]
    assert seqs(store.history(sid, branch=0)) == [1, 2, 3, 4, 5, 6]  # kept, whole
    branches = {b.id: b for b in store.branches(sid)}
    assert (branches[1].parent, branches[1].fork_seq, branches[1].turns) == (0, 2, 1)
    assert branches[1].current and not branches[0].current
    store.switch_branch(sid, 0)
    assert seqs(project(store.context_snapshot(sid)).raw) == [1, 2, 3, 4, 5, 6]
    # no raw row was rewritten: every seq reads as it was written
    assert {m.seq: m.content for m in store.history(sid, branch=0)} == raw


def test_a_rewind_to_what_is_not_the_user_s_on_this_path_changes_nothing(store):
    sid = store.create_session("s").id
    turn(store, sid, "one", "two")
    store.rewind(sid, 1)
    turn(store, sid, "three", "four")                          # seqs 3, 4 on branch 1
    before = store.session(sid)
    for seq in (2, 4, 99):                                     # an answer, an answer, none
        with pytest.raises(NotRewindable):
            store.rewind(sid, seq)
    store.switch_branch(sid, 0)
    with pytest.raises(NotRewindable):
        store.rewind(sid, 3)                                   # branch 1's, not on this path
    with pytest.raises(BranchNotFound):
        store.switch_branch(sid, 7)
    store.switch_branch(sid, 1)
    assert store.session(sid).branch == before.branch
    assert [b.id for b in store.branches(sid)] == [0, 1]


def test_a_branch_starts_with_the_checkpoint_whose_summary_comes_only_from_before_it(store):
    sid = store.create_session("s").id
    for i in range(6):
        turn(store, sid, f"question {i} " + "words " * 40, f"answer {i} " + "words " * 40)
    first = compact(store, sid)
    assert first.compacted
    cut = first.checkpoint.first_retained_seq
    for i in range(6, 9):
        turn(store, sid, f"question {i} " + "words " * 40, f"answer {i} " + "words " * 40)
    second = compact(store, sid)
    assert second.compacted and second.checkpoint.first_retained_seq > cut
    assert second.checkpoint.parent_checkpoint_id == first.checkpoint.id

    # back to a question after the first cut and before the second: the first summary holds
    user_after = next(m.seq for m in store.history(sid) if m.role == "user" and m.seq > cut
                      and m.seq < second.checkpoint.first_retained_seq)
    store.rewind(sid, user_after)
    snapshot = store.context_snapshot(sid)
    assert snapshot.checkpoint is not None and snapshot.checkpoint.id == first.checkpoint.id
    assert [c.id for c in store.checkpoints(sid)] == [first.checkpoint.id]
    on_path = set(seqs(store.history(sid)))
    assert all(row.seq in on_path for row in snapshot.checkpoint.ledger.rows)
    # back before the first cut: no summary
    store.switch_branch(sid, 0)
    store.rewind(sid, 1)
    assert store.context_snapshot(sid).checkpoint is None and store.checkpoints(sid) == []
    # a compaction on a branch is its own: not on the branch it left
    for i in range(6):
        turn(store, sid, f"other {i} " + "words " * 40, f"reply {i} " + "words " * 40)
    mine = compact(store, sid)
    assert mine.compacted
    store.switch_branch(sid, 0)
    assert mine.checkpoint.id not in [c.id for c in store.checkpoints(sid)]
    assert store.context_snapshot(sid).checkpoint.id == second.checkpoint.id
    # /uncompact on one branch leaves the other's summary in use
    store.uncompact(sid)
    assert store.context_snapshot(sid).checkpoint.id == first.checkpoint.id
    store.switch_branch(sid, 2)
    assert store.context_snapshot(sid).checkpoint.id == mine.checkpoint.id


def test_undo_and_clear_on_one_branch_leave_the_other_as_it_was(store):
    sid = store.create_session("s").id
    for i in range(3):
        turn(store, sid, f"q{i}", f"a{i}")                     # 1..6
    store.rewind(sid, 5)                                       # branch 1: 1..4
    turn(store, sid, "q2, asked again", "a2 again")            # 7, 8 on branch 1
    assert store.branches(sid)[1].turns == 1
    store.undo_last_turn(sid)                                  # takes 7, 8 out
    assert store.branches(sid)[1].turns == 0                   # an undone turn is no turn
    store.undo_last_turn(sid)                                  # takes 3, 4 out on branch 1
    assert seqs(project(store.context_snapshot(sid)).raw) == [1, 2]
    store.clear_context(sid)
    assert project(store.context_snapshot(sid)).raw == ()
    store.switch_branch(sid, 0)
    assert seqs(project(store.context_snapshot(sid)).raw) == [1, 2, 3, 4, 5, 6]
    assert not any(m.retracted for m in store.history(sid))
    store.switch_branch(sid, 1)
    assert store.uncompact(sid).uncleared                      # the clear, undone there
    assert seqs(project(store.context_snapshot(sid)).raw) == [1, 2]


def test_a_rewind_before_a_clear_takes_the_context_from_before_the_clear(store):
    sid = store.create_session("s").id
    for i in range(2):
        turn(store, sid, f"q{i}", f"a{i}")                     # 1..4
    store.clear_context(sid)                                   # floor 4
    turn(store, sid, "q2", "a2")                               # 5, 6
    store.rewind(sid, 3)                                       # before the clear
    assert store.session(sid).context_floor_seq == 0
    assert seqs(project(store.context_snapshot(sid)).raw) == [1, 2]
    store.switch_branch(sid, 0)
    assert store.session(sid).context_floor_seq == 4           # kept on the branch left


def test_search_and_recall_read_only_the_branch_in_use(store):
    sid = store.create_session("s").id
    turn(store, sid, "the deploy key is kestrel", "noted")     # 1, 2
    turn(store, sid, "the staging host is osprey-7", "noted")  # 3, 4
    store.rewind(sid, 3)
    turn(store, sid, "the staging host is heron-2", "noted")   # 5, 6
    assert [h.seq for h in store.search.messages(sid, "staging host")] == [5]
    assert store.search.messages(sid, "osprey-7") == []
    assert store.search.count(sid, "osprey") == 0
    store.switch_branch(sid, 0)
    assert [h.seq for h in store.search.messages(sid, "staging host")] == [3]


def test_a_message_of_another_branch_cannot_be_read_back_or_pinned_by_its_number(
        store, tmp_path):
    """Seqs are shared across branches, words are not: `history_search seq=N` and a pin
    from message N see only the branch in use (found in review: the model could read the
    branch edited away by trying nearby numbers)."""
    import json

    from picochat.tools.base import ToolContext
    from picochat.tools.registry import run_tool

    sid = store.create_session("s").id
    turn(store, sid, "hello", "hi")                                      # 1, 2
    append_message(store, sid, "user", "the db password is hunter2-SECRET", turn_id="t3")
    store.rewind(sid, 3)
    turn(store, sid, "never mind", "ok")                                  # 4, 5
    assert store.message(sid, 3) is None and store.message(sid, 4) is not None
    read = run_tool("history_search", json.dumps({"seq": 3}), ToolContext(store, sid, tmp_path))
    assert "hunter2" not in read.content
    store.switch_branch(sid, 0)
    assert store.message(sid, 3).content.endswith("hunter2-SECRET")
    assert store.message(sid, 4) is None


def test_an_answer_lands_with_its_question_whatever_another_process_rewound(store):
    """Two processes on one file: A's question is written, B rewinds, then A's answer comes:
    it goes on A's question's branch, not on the one B made current (found in review)."""
    other = open_store(store.path)
    try:
        sid = store.create_session("s").id
        turn(store, sid, "q1", "a1")                                      # 1, 2
        turn(store, sid, "q2", "a2")                                      # 3, 4
        append_message(store, sid, "user", "q3: deploy to prod?", turn_id="t5")   # 5
        other.rewind(sid, 3)                                              # branch 1: 1, 2
        append_message(store, sid, "assistant", "a3: yes, deploying", turn_id="t5")
        assert seqs(store.history(sid, branch=0)) == [1, 2, 3, 4, 5, 6]
        assert seqs(store.history(sid)) == [1, 2]                         # branch 1: untouched
        assert seqs(project(store.context_snapshot(sid)).raw) == [1, 2]
    finally:
        other.close()


def test_a_recovered_answer_goes_to_its_question_s_branch(store):
    """An answer streaming when its process died, recovered after a rewind elsewhere: it is
    saved under its question, on that branch, and stays out of the branch in use."""
    from picochat.prepare import prepare

    sid = store.create_session("s").id
    turn(store, sid, "q1", "a1")
    turn(store, sid, "q2", "a2")
    append_message(store, sid, "user", "q3", turn_id="t5")               # 5
    store.drafts.save(sid, "t5", "the long answer to q3 so f")
    store.rewind(sid, 3)
    got = store.drafts.recover(prepare, alive=lambda pid, start: False)
    assert [(m.seq, m.retracted) for m in got] == [(6, False)]
    assert seqs(store.history(sid, branch=0)) == [1, 2, 3, 4, 5, 6]
    assert seqs(store.history(sid)) == [1, 2]


def test_a_compaction_built_before_a_rewind_cannot_commit(store):
    sid = store.create_session("s").id
    for i in range(3):
        turn(store, sid, f"q{i}", f"a{i}")
    built_at = store.session(sid).context_generation
    store.rewind(sid, 3)
    with pytest.raises(StaleGeneration):
        store.commit_context_checkpoint(sid, built_at, NewCheckpoint(
            None, "a summary of 1..4", 5, 6, "manual", "offline", "offline", 100, 10))
    assert store.checkpoints(sid) == []


def test_a_database_from_schema_16_migrates_onto_branch_0(tmp_path):
    path = tmp_path / "old.db"
    conn = database_at(path, 16)
    old_session(conn)                                          # 's_a': 1 user, 2 answer
    conn.execute("INSERT INTO context_checkpoints (id, session_id, generation, summary, "
                 "first_retained_seq, source_max_seq, trigger_reason, provider_kind, model, "
                 "tokens_before, tokens_after, created_at) VALUES ('cp_old', 's_a', 1, "
                 "'an old summary', 2, 2, 'manual', 'offline', 'offline', 10, 5, 1)")
    conn.execute("UPDATE sessions SET active_context_checkpoint_id = 'cp_old', "
                 "context_generation = 1 WHERE id = 's_a'")
    conn.close()
    store = open_store(path)
    try:
        assert store.session("s_a").branch == 0
        assert [c.id for c in store.checkpoints("s_a")] == ["cp_old"]
        assert store.context_snapshot("s_a").checkpoint.id == "cp_old"
        assert seqs(store.history("s_a")) == [1, 2]
        assert SCHEMA_VERSION >= 17
    finally:
        store.close()


# --- the state machine ---------------------------------------------------------------------------


class Branching(RuleBasedStateMachine):
    """The model: each (session, branch)'s path, the rows it reads in order, each row named
    by its token (`traced.py`: its seq, plus its session's tag); and what every row was
    written with. Forks make new sessions from the one in use, at any turn's end.
    Invariants after every step, for every session: the store's history of each branch is
    its path; the context is a tail of the branch in use; the summary in use, its facts and
    the timeline come only from rows on it; and no row ever changed."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="branches-")
        self.store = open_store(Path(self.dir) / "b.db")
        self.sid = self.store.create_session("s").id
        self.tags = {self.sid: 0}
        self.paths: dict[tuple[str, int], list[int]] = {(self.sid, 0): []}
        self.current = {self.sid: 0}
        self.written: dict[int, str] = {}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def key(self, message) -> int:
        """A row's token number: which session wrote it, and its seq."""
        return self.tags[message.session_id] * TAG + message.seq

    @property
    def path(self) -> list[int]:
        return self.paths[(self.sid, self.current[self.sid])]

    @rule(words=st.lists(st.integers(1, 60), min_size=1, max_size=3))
    def talk_some(self, words: list[int]) -> None:
        self.talk(words)

    def talk(self, words: list[int]) -> None:
        for n in words:
            u, a = turn(self.store, self.sid, "ask " + "word " * n, "reply " + "word " * n,
                        tag=self.tags[self.sid])
        for m in self.store.history(self.sid)[-2 * len(words):]:
            self.path.append(self.key(m))
            self.written[self.key(m)] = m.content

    @precondition(lambda self: self.path)
    @rule(data=st.data(), recent=st.booleans())
    def rewind(self, data, recent: bool) -> None:
        """To any message of the user's in the context, or (`recent`) one of the newest two:
        those are the ones after a summary's cut, which the new branch then carries."""
        path = self.path
        users = [m for m in self.store.history(self.sid)
                 if m.role == "user" and not m.retracted and m.seq > self._floor()]
        if not users:
            return
        chosen = data.draw(st.sampled_from(users[-2:] if recent else users))
        session = self.store.rewind(self.sid, chosen.seq).session
        self.paths[(self.sid, session.branch)] = path[:path.index(self.key(chosen))]
        self.current[self.sid] = session.branch
        event("rewind: " + ("a summary carried" if session.active_context_checkpoint_id
                            else "no summary") + (" in a fork" if self.tags[self.sid] else ""))

    @rule(data=st.data())
    def switch(self, data) -> None:
        branch = data.draw(st.sampled_from(sorted(b for s, b in self.paths if s == self.sid)))
        self.current[self.sid] = self.store.switch_branch(self.sid, branch).branch

    @precondition(lambda self: self.path)
    @rule(data=st.data(), newest=st.booleans())
    def fork(self, data, newest: bool) -> None:
        """A fork of the session in use at the end of any turn on its branch (`newest`: the
        default, its newest), which then becomes the session in use."""
        ends = [m for m in self.store.history(self.sid) if m.role == "assistant"]
        chosen = None if newest else data.draw(st.sampled_from(ends))
        done = self.store.fork_session(self.sid, at=None if chosen is None else chosen.seq)
        path = self.path
        upto = len(path) if chosen is None else path.index(self.key(chosen)) + 1
        self.sid = done.session.id
        self.tags[self.sid] = len(self.tags)
        self.paths[(self.sid, 0)] = path[:upto]
        self.current[self.sid] = 0
        event("fork: " + ("a summary carried" if done.checkpoint else "no summary"))

    @precondition(lambda self: len(self.tags) > 1)
    @rule(data=st.data())
    def pick_session(self, data) -> None:
        self.sid = data.draw(st.sampled_from(list(self.tags)))  # in the order made

    @rule(everything=st.booleans(), more=st.integers(0, 3), then=st.integers(0, 2),
          reason=st.sampled_from(["manual", "auto", "overflow"]), down=st.booleans())
    def compact(self, everything: bool, more: int, then: int, reason: str, down: bool) -> None:
        """`more` turns first (a compaction needs a few turns to fold), `then` after (a rewind
        to one of them carries the summary); any trigger, the summarizer up or down."""
        if more:
            self.talk([40] * more)
        outcome = compact(self.store, self.sid, everything, reason, down)
        event(f"compact {reason}{' (summarizer down)' if down else ''}: {outcome.status}"
              + (" degraded" if outcome.degraded else ""))
        if then:
            self.talk([20] * then)

    @rule()
    def undo(self) -> None:
        self.store.undo_last_turn(self.sid)

    @rule()
    def clear(self) -> None:
        self.store.clear_context(self.sid)

    @rule()
    def uncompact(self) -> None:
        self.store.uncompact(self.sid)

    def _floor(self) -> int:
        return self.store.session(self.sid).context_floor_seq

    @invariant()
    def each_branch_reads_its_own_path(self) -> None:
        for (sid, branch), path in self.paths.items():
            assert self.store.session(sid).branch == self.current[sid]
            assert [self.key(m) for m in self.store.history(sid, branch=branch)] == path

    @invariant()
    def the_context_and_its_summary_come_from_this_path_alone(self) -> None:
        for sid, branch in self.current.items():
            path = self.paths[(sid, branch)]
            snapshot = self.store.context_snapshot(sid)
            projection = project(snapshot)
            live = [m for m in self.store.history(sid) if not m.retracted]
            start = max(snapshot.session.context_floor_seq + 1,
                        snapshot.checkpoint.first_retained_seq if snapshot.checkpoint else 0)
            assert [self.key(m) for m in projection.raw] == [
                self.key(m) for m in live if m.seq >= start]
            assert set(self.key(m) for m in projection.raw) <= set(path)
            assert snapshot.checkpoint_problem is None  # no branch is left pointing astray
            on_path = {m.seq for m in self.store.history(sid)}
            in_use = [snapshot.checkpoint] if snapshot.checkpoint else []
            for cp in self.store.checkpoints(sid) + in_use:
                assert cp.session_id == sid  # a fork's summaries are its own copies
                assert {int(n) for n in TOKEN.findall(cp.summary)} <= set(path), cp.id
                assert {row.seq for row in cp.ledger.rows} <= on_path, cp.id
            for _, text in self.store.search.timeline_entries(sid):
                assert {int(n) for n in TOKEN.findall(text)} <= set(path)

    @invariant()
    def no_row_was_rewritten(self) -> None:
        every = {}
        for sid, branch in self.paths:
            every.update({self.key(m): m.content for m in self.store.history(sid, branch)})
        assert {k: every[k] for k in self.written} == self.written


TestBranching = Branching.TestCase
TestBranching.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                  suppress_health_check=[HealthCheck.too_slow])


# --- from the shell ------------------------------------------------------------------------------


def test_branches_history_and_export_read_each_branch_from_the_shell(run_cli, cli_store):
    """`picochat branches` lists them, `history --branch N` reads one, `export --all-branches`
    writes every branch whole; a branch the session lacks is one line and exit 2."""
    import json

    for i in range(2):
        assert run_cli("ask", "-s", "w", f"the staging host is osprey-{i}").status == 0
    sid = cli_store.find_session("w").id
    cli_store.rewind(sid, 3)
    turn(cli_store, sid, "the staging host is heron-2", "noted")

    listed = run_cli("branches", "-s", "w")
    assert listed.status == 0
    assert "* Branch 1 (leaves branch 0 after message 2, in use): 1 turn" in listed.stdout
    assert "Branch 0 (the start): 2 turns" in listed.stdout
    as_json = json.loads(run_cli("branches", "-s", "w", "--json").stdout)
    assert [(b["branch"], b["current"]) for b in as_json] == [(0, False), (1, True)]

    mine = run_cli("history", "-s", "w").stdout
    assert "heron-2" in mine and "osprey-1" not in mine
    other = run_cli("history", "-s", "w", "--branch", "0").stdout
    assert "osprey-1" in other and "heron-2" not in other
    missing = run_cli("history", "-s", "w", "--branch", "9")
    assert missing.status == 2 and "has no branch 9" in missing.stderr
    assert "Traceback" not in missing.stderr

    every = json.loads(run_cli("export", "-s", "w", "--format", "json",
                               "--all-branches").stdout)
    assert [b["branch"] for b in every["branches"]] == [0, 1]
    contents = [" ".join(m["content"] for m in b["messages"]) for b in every["branches"]]
    assert "osprey-1" in contents[0] and "heron-2" not in contents[0]
    assert "heron-2" in contents[1] and "osprey-1" not in contents[1]
    md = run_cli("export", "-s", "w", "--format", "md", "--all-branches").stdout
    assert md.index("# Branch 0 (the start)") < md.index("# Branch 1 (leaves branch 0")
