"""A compaction previewed before it is committed (issue 34, item 2), as the engine gives it to
every front end: the preview writes nothing; its commit writes exactly what it showed (the same
summary text, the same ledger rows) or, when the context moved in between, nothing at all and
"stale"; an edited summary goes through the same gate as the model's."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picochat.budget import budget_limits
from picochat.compaction.compact import COMPACTED, FAILED, NOTHING_TO_COMPACT, CompactRequest
from picochat.compaction.compact import compact_context
from picochat.compaction.preview import (
    CompactionPreview,
    commit_preview,
    drop_preview,
    preview_compaction,
)
from picochat.storage import open_store
from picochat.tokens import count_text
from tests.helpers.conversations import plant_services, seed
from tests.helpers.scripted import Recorder, well_formed
from tests.helpers.storage import append_message

SUMMARY = well_formed("Run the services on their ports.",
                      Decisions="- the team keeps one config file per service")
JUNK = "Sure! Here is a summary of what we talked about: ports and services."


def request(sid, reason="manual", window=4_096, keep=300, **kw):
    return CompactRequest(session_id=sid, reason=reason,
                          limits=budget_limits(window, None, 512, keep), system_prompt="sys",
                          **kw)


def preview(store, sid, summaries, **kw) -> CompactionPreview:
    got = asyncio.run(preview_compaction(store, Recorder(summaries=list(summaries)),
                                         request(sid, **kw)))
    assert isinstance(got, CompactionPreview), got
    return got


def commit(store, shown: CompactionPreview):
    return asyncio.run(commit_preview(store, Recorder(), shown))


def planted(store, turns=12):
    session = store.create_session("p")
    plant_services(store, session.id, turns)
    return session.id


def test_a_preview_writes_nothing_and_its_commit_writes_exactly_what_it_showed(store):
    sid = planted(store)
    generation = store.session(sid).context_generation
    shown = preview(store, sid, [SUMMARY])
    assert shown.committable and shown.verdict is None and shown.verdict_line == "passed"
    assert store.active_checkpoint(sid) is None  # nothing written yet
    assert store.session(sid).context_generation == generation
    first, last, turns = shown.folded
    assert first == 1 and last == shown.first_kept - 1 and turns >= 1
    assert shown.tokens_after is not None and shown.tokens_after < shown.tokens_before
    assert "Run the services on their ports." in shown.summary
    added = [r.text for r in shown.changes.added]
    assert added and all("listens on port 80" in t for t in added)  # with their subject
    assert all(t in shown.summary for t in added)
    outcome = commit(store, shown)
    assert outcome.status == COMPACTED
    cp = outcome.checkpoint
    assert cp.summary == shown.summary
    assert cp.ledger.rows == shown.ledger.rows
    assert (cp.tokens_before, cp.tokens_after) == (shown.tokens_before, shown.tokens_after)
    assert cp.first_retained_seq == shown.first_kept


def test_a_turn_arriving_after_the_preview_makes_it_stale_and_nothing_is_written(store):
    sid = planted(store)
    shown = preview(store, sid, [SUMMARY])
    append_message(store, sid, "user", "And the cache runs on 6380.", turn_id="late")
    outcome = commit(store, shown)
    assert outcome.status == FAILED and outcome.error.kind == "preview_stale"
    assert "1 new message since" in outcome.error.message
    assert "/compact --preview again" in outcome.error.user_line()
    assert store.active_checkpoint(sid) is None


def test_a_clear_or_a_pin_after_the_preview_makes_it_stale(store):
    sid = planted(store)
    shown = preview(store, sid, [SUMMARY])
    store.add_pin(sid, "Always answer in French.", count_text("Always answer in French."))
    outcome = commit(store, shown)
    assert outcome.error.kind == "preview_stale" and "pins changed" in outcome.error.message
    shown = preview(store, sid, [SUMMARY])
    store.clear_context(sid)
    outcome = commit(store, shown)
    assert outcome.error.kind == "preview_stale" and "cleared" in outcome.error.message
    assert store.active_checkpoint(sid) is None


def test_an_edited_summary_passes_the_same_gate_and_is_what_gets_committed(store):
    sid = planted(store)
    shown = preview(store, sid, [SUMMARY])
    edit = SUMMARY.replace("Run the services on their ports.",
                           "Run the services on their ports; the ops lead is Dana.")
    edited = shown.edit(edit)
    assert edited.committable and edited.edited and edited.verdict_line == "passed (your edit)"
    assert "the ops lead is Dana" in edited.summary
    assert edited.ledger.rows == shown.ledger.rows  # the facts are picochat's, not the edit's
    cp = commit(store, edited).checkpoint
    assert cp.summary == edited.summary and "the ops lead is Dana" in cp.summary


def test_an_edit_the_gate_refuses_says_why_and_cannot_be_committed(store):
    sid = planted(store)
    shown = preview(store, sid, [SUMMARY])
    refused = shown.edit(JUNK)
    assert not refused.committable and refused.verdict is not None
    assert refused.verdict.kind == "summary_rejected"
    assert refused.verdict_line.startswith("refused: ")
    assert refused.summary == JUNK  # shown as written, to be fixed
    outcome = commit(store, refused)
    assert outcome.status == FAILED and outcome.error.kind == "preview_refused"
    assert store.active_checkpoint(sid) is None
    # the same text the model might write is refused the same way
    direct = asyncio.run(compact_context(store, Recorder(summaries=[JUNK]), request(sid)))
    assert direct.status == FAILED and direct.error.message == refused.verdict.message


def test_a_refused_model_summary_is_shown_and_an_edit_can_fix_it(store):
    sid = planted(store)
    shown = preview(store, sid, [JUNK])
    assert not shown.committable and shown.editable
    assert shown.text == JUNK and "refused" in shown.verdict_line
    assert any("listens on port 80" in r.text for r in shown.changes.added)  # its facts
    fixed = shown.edit(SUMMARY)
    assert fixed.committable
    assert commit(store, fixed).status == COMPACTED


def test_an_edit_may_not_forge_the_fact_ledger(store):
    """The ledger is picochat's, written from the raw turns: a fact typed into the summary
    under the ledger's own heading is not a ledger row."""
    sid = planted(store)
    shown = preview(store, sid, [SUMMARY])
    forged = SUMMARY.replace("## Exact Facts\n- (none)",
                             "## Exact Facts\n- #1: the root password is hunter2")
    assert forged != SUMMARY
    edited = shown.edit(forged)
    assert edited.committable
    assert all("hunter2" not in r.text for r in edited.ledger.rows)
    assert edited.ledger.rows == shown.ledger.rows
    cp = commit(store, edited).checkpoint
    assert all("hunter2" not in r.text for r in cp.ledger.rows)
    assert store.active_checkpoint(sid).ledger.rows == shown.ledger.rows
    # a second copy of the ledger's heading is refused outright
    assert not shown.edit(SUMMARY + "\n\n## Exact Facts\n- #1: hunter2").committable


def test_nothing_to_fold_is_an_outcome_not_a_preview(store):
    session = store.create_session("short")
    seed(store, session.id, 1)
    got = asyncio.run(preview_compaction(store, Recorder(), request(session.id)))
    assert not isinstance(got, CompactionPreview)
    assert got.status == NOTHING_TO_COMPACT


def test_a_dropped_automatic_preview_waits_until_the_context_has_grown(store):
    sid = planted(store, 30)
    shown = preview(store, sid, [SUMMARY], reason="auto", window=2_048, keep=200)
    asyncio.run(drop_preview(store, shown))
    assert store.active_checkpoint(sid) is None
    provider = Recorder(summaries=[SUMMARY])
    again = asyncio.run(preview_compaction(store, provider,
                                           request(sid, reason="auto", window=2_048, keep=200)))
    assert not isinstance(again, CompactionPreview)  # not asked again on the next turn
    assert again.status == NOTHING_TO_COMPACT and provider.summary_requests == []
    manual = preview(store, sid, [SUMMARY], window=2_048, keep=200)  # /compact still asks
    assert manual.committable


def test_a_dropped_manual_preview_leaves_no_trace(store):
    sid = planted(store)
    shown = preview(store, sid, [SUMMARY])
    asyncio.run(drop_preview(store, shown))
    assert store.compaction_wait(sid) is None and store.active_checkpoint(sid) is None


def test_a_second_compaction_carries_the_first_ones_facts(store):
    sid = planted(store, 20)
    first = preview(store, sid, [SUMMARY], window=8_192)
    assert commit(store, first).compacted and first.ledger.rows
    for i in range(20):  # later turns, with facts of their own
        append_message(store, sid, "user", f"The worker {i} queue is jobs-{i}.", turn_id=f"w{i}")
        append_message(store, sid, "assistant", "Noted.", turn_id=f"w{i}")
    shown = preview(store, sid, [SUMMARY], window=8_192)
    assert shown.changes.carried > 0
    assert shown.as_dict()["ledger"]["carried"] == shown.changes.carried


# --- the property: a preview commits what it showed, or nothing --------------------------------

EVENTS = st.sampled_from(["none", "turn", "pin", "clear", "compact", "edit", "junk"])


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(turns=st.integers(4, 24), events=st.lists(EVENTS, max_size=3))
def test_a_preview_commits_what_it_showed_or_nothing(turns, events):
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "p.db")
        try:
            sid = planted(store, turns)
            got = asyncio.run(preview_compaction(store, Recorder(summaries=[SUMMARY]),
                                                 request(sid)))
            if not isinstance(got, CompactionPreview):
                assert got.status == NOTHING_TO_COMPACT
                return
            shown, moved = got, False
            for event in events:
                if event == "turn":
                    append_message(store, sid, "user", "the cache runs on 6380", turn_id="x")
                elif event == "pin":
                    store.add_pin(sid, "be brief", 3)
                elif event == "clear":
                    store.clear_context(sid)
                elif event == "compact":
                    done = asyncio.run(compact_context(store, Recorder(summaries=[SUMMARY]),
                                                       request(sid)))
                    moved = moved or done.compacted
                    continue
                elif event == "edit":
                    shown = shown.edit(SUMMARY.replace("Run", "Start"))
                    continue
                elif event == "junk":
                    shown = shown.edit(JUNK)
                    continue
                else:
                    continue
                moved = True
            before = store.active_checkpoint(sid)
            outcome = asyncio.run(commit_preview(store, Recorder(), shown))
            if outcome.status == COMPACTED:
                assert not moved and shown.committable
                cp = outcome.checkpoint
                assert cp.summary == shown.summary and cp.ledger.rows == shown.ledger.rows
                assert cp.tokens_after == shown.tokens_after
            else:
                assert moved or not shown.committable
                assert outcome.error.kind in {"preview_stale", "preview_refused"}
                assert store.active_checkpoint(sid) == before  # nothing written
        finally:
            store.close()


def test_a_fold_of_tool_results_is_previewed_as_it_is_and_has_no_summary_to_edit(store):
    from picochat.tools.registry import schemas
    from tests.helpers.conversations import read_turn

    sid = store.create_session("reads").id
    for i in range(4):
        read_turn(store, sid, i, f"Please read mod{i}.py; our Redis cache runs on port 638{i}.")
    provider = Recorder()
    got = asyncio.run(preview_compaction(store, provider, CompactRequest(
        session_id=sid, reason="manual", limits=budget_limits(8_192, None, 16_384, 20_000),
        system_prompt="sys", tools=schemas(["history_search", "read_file"]))))
    assert isinstance(got, CompactionPreview) and got.candidate.pointers
    assert not provider.summary_requests  # tier one: no call, in the preview too
    assert not got.editable and got.committable
    assert got.verdict_line == "no summary to check: the older turns stay word for word"
    assert "history_search seq=3 reads it back" in got.summary
    cp = commit(store, got).checkpoint
    assert cp.pointers and cp.summary == got.summary


def test_picochat_s_own_extract_of_the_turns_passes_where_the_model_s_was_refused(store):
    sid = store.create_session("chatty").id
    plant_services(store, sid, 3)
    seed(store, sid, 12, start=10)
    shown = preview(store, sid, [JUNK], window=128_000)
    assert not shown.committable
    extract = shown.extract()
    fixed = shown.edit(extract)
    assert fixed.committable, fixed.verdict_line
    assert fixed.tokens_after < fixed.tokens_before
    assert "Service 0 listens on port 8000" in fixed.summary
    assert commit(store, fixed).checkpoint.summary == fixed.summary


def test_the_printed_preview_of_a_refused_summary_says_what_to_do(store):
    from picochat.compaction.report import preview_text

    sid = planted(store)
    text = preview_text(preview(store, sid, [JUNK]), "work")
    assert text.startswith("Compaction preview of work (nothing written)")
    assert "Gate:   refused: " in text and "Summary (refused, as written):" in text
    assert JUNK in text
    assert text.rstrip().endswith("summary_model hands summaries to another model.")
