"""`/clear` is undoable (issue 35, item 3): it only moves pointers, so `/uncompact` (and `picochat
compact --undo`) puts them back: the context from before the clear, its summary included, with
the messages sent since after it. Only the clear in force can be taken back, newest first."""

from __future__ import annotations

import asyncio
import json

from picochat.budget import budget_limits
from picochat.compaction.compact import CompactRequest, compact_context
from picochat.projection import restore
from tests.helpers.conversations import seed
from tests.helpers.scripted import Recorder, well_formed
from tests.helpers.storage import append_message
from tests.helpers.tui import make_app, say
from tests.helpers.waiting import settle


def compacted(store, sid):
    request = CompactRequest(session_id=sid, reason="manual",
                             limits=budget_limits(8_192, None, 1_024, 300), system_prompt="s",
                             everything=True)
    outcome = asyncio.run(compact_context(store, Recorder(summaries=[well_formed("Go on.")]),
                                          request))
    assert outcome.compacted
    return outcome.checkpoint


def test_uncompact_after_a_clear_brings_the_context_and_its_summary_back(store):
    sid = store.create_session("c").id
    seed(store, sid, 8)
    cp = compacted(store, sid)
    before = restore(store, sid)
    store.clear_context(sid)
    assert restore(store, sid).raw == () and restore(store, sid).summary is None
    append_message(store, sid, "user", "after the clear", turn_id="late")
    result = store.uncompact(sid)
    assert result.uncleared and result.undone is None and result.active == cp.id
    now = restore(store, sid)
    assert now.summary == before.summary and now.checkpoint_id == cp.id
    assert [m.seq for m in now.raw][:-1] == [m.seq for m in before.raw]
    assert now.raw[-1].content == "after the clear"  # what was said since stays, after it
    again = store.uncompact(sid)  # now the summary in use is undone, as before any clear
    assert again.undone == cp.id and not again.uncleared


def test_clears_are_taken_back_newest_first_and_a_later_clear_blocks_an_older_one(store):
    sid = store.create_session("c").id
    seed(store, sid, 2)
    store.clear_context(sid)
    seed(store, sid, 2, start=2)
    store.clear_context(sid)
    assert len(restore(store, sid).raw) == 0
    assert store.uncompact(sid).uncleared
    assert [m.content.split(":")[0] for m in restore(store, sid).raw] == [
        "question 2", "answer 2", "question 3", "answer 3"]
    assert store.uncompact(sid).uncleared
    assert len(restore(store, sid).raw) == 8  # back to the start
    nothing = store.uncompact(sid)
    assert not nothing.changed


def test_a_compaction_after_the_clear_is_undone_first(store):
    sid = store.create_session("c").id
    seed(store, sid, 4)
    store.clear_context(sid)
    seed(store, sid, 8, start=4)
    after = compacted(store, sid)
    first = store.uncompact(sid)
    assert first.undone == after.id and not first.uncleared
    second = store.uncompact(sid)
    assert second.uncleared and len(restore(store, sid).raw) == 24


def test_compact_undo_takes_back_a_clear_from_the_shell(run_cli):
    assert run_cli("ask", "-s", "w", "Our Redis runs on 6380.").status == 0
    cleared = run_cli("clear", "-s", "w")
    assert "`picochat compact -s w --undo` brings the context back." in cleared.stdout
    undone = run_cli("compact", "-s", "w", "--undo")
    assert undone.status == 0
    assert undone.stdout.startswith("Clear undone for w: the context from before")
    info = json.loads(run_cli("info", "-s", "w", "--json").stdout)
    assert info["raw_messages_in_context"] == 2
    again = json.loads(run_cli("compact", "-s", "w", "--undo", "--json").stdout)
    assert again["status"] == "nothing_to_uncompact"


async def test_the_app_says_clear_can_be_undone_and_uncompact_does_it(store):
    app = make_app(store)
    seed(store, app.session.id, 3)
    async with app.run_test(size=(110, 36)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/clear")
        await settle(pilot, app, lambda: app.worker.info().projection.raw == ())
        notices = lambda: [str(n.render()) for n in app.query("Notice")]  # noqa: E731
        await settle(pilot, app, lambda: any("/uncompact brings the context back" in n
                                             for n in notices()))
        await say(pilot, "/uncompact")
        await settle(pilot, app, lambda: any(n.startswith("Undid the /clear") for n in
                                             notices()))
        assert len(app.worker.info().projection.raw) == 6


def test_a_database_from_before_migrates_and_its_earlier_clears_stay_as_they_were(tmp_path):
    """Schema 16 adds the clears' record; a clear made before it cannot be taken back (what it
    moved was not kept), and one made after it can."""
    import sqlite3

    from picochat.storage import open_store
    from picochat.storage.schema import SCHEMA_VERSION
    from tests.helpers.storage import database_at

    path = tmp_path / "v15.db"
    conn = database_at(path, 15)
    conn.execute("INSERT INTO sessions (id, name, created_at, updated_at, context_floor_seq) "
                 "VALUES ('s_a', 'a', 1, 1, 0)")
    conn.close()
    store = open_store(path)
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 16
        conn.execute("UPDATE sessions SET context_floor_seq = 0 WHERE id = 's_a'")
        conn.close()
        seed(store, "s_a", 2)
        assert not store.uncompact("s_a").changed  # nothing recorded to take back
        store.clear_context("s_a")
        assert store.uncompact("s_a").uncleared
        assert len(restore(store, "s_a").raw) == 4
    finally:
        store.close()


def test_the_shell_numbers_summaries_as_the_panel_does(store):
    """`picochat checkpoints` showed the context generation ("5") where the panel says
    "Summary 4" (issue 35, item 8): both number summaries from the first now."""
    from picochat import render
    from picochat.compaction.report import headline, numbers

    sid = store.create_session("n").id
    seed(store, sid, 8)
    first = compacted(store, sid)
    store.clear_context(sid)  # a generation that made no summary
    seed(store, sid, 8, start=8)
    second = compacted(store, sid)
    checkpoints = store.checkpoints(sid)
    table = render.checkpoints_table(checkpoints, second.id).splitlines()
    assert table[0].split()[:2] == ["SUMMARY", "ID"]
    assert table[1].split()[:3] == ["*", "2", second.id]
    assert table[2].split()[:2] == ["1", first.id]
    assert second.generation != 2  # what the table showed before
    assert headline(second, numbers(checkpoints)[second.id], 0).startswith("Summary 2 ")
    assert render.checkpoint_json(second, second.id, 2)["summary_number"] == 2
