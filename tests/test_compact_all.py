"""`/compact all` and `picochat compact --all` (issue 22.11): a chat shorter than the tail kept
raw (20,000 tokens by default) has nothing to compact, and says how to fold it anyway; folding
it keeps only the newest turn raw, through the same checks and the same atomic commit."""

from __future__ import annotations

import asyncio
import json

from picochat.compaction import report
from picochat.compaction.compact import COMPACTED, FAILED, NOTHING_TO_COMPACT
from picochat.config import Config
from picochat.models import resolve_model
from picochat.projection import restore
from picochat.session import SessionWorker
from tests.helpers.conversations import talk
from tests.helpers.scripted import Recorder, waiter, well_formed
from tests.helpers.storage import append_message

OFFLINE = resolve_model(Config(), "offline")  # keep_recent_tokens: the default 20,000


def run_worker(store, sid, provider, *calls):
    """The outcomes of `worker.compact(**kw)` for each `kw` in `calls`, in one worker."""
    async def go():
        async with SessionWorker(store, sid, OFFLINE, provider, "sys") as worker:
            return [await worker.compact(**kw) for kw in calls], worker.limits
    return asyncio.run(go())


def test_a_short_chat_has_nothing_to_compact_and_the_line_names_compact_all(store):
    s = store.create_session("short")
    talk(store, s.id, 6)
    (outcome,), limits = run_worker(store, s.id, Recorder(), {})
    assert outcome.status == NOTHING_TO_COMPACT
    line = report.nothing_reason(outcome, limits)
    assert "20,000 tokens kept raw" in line and "use /compact all" in line


def test_compact_all_folds_everything_but_the_newest_turn(store):
    s = store.create_session("short")
    talk(store, s.id, 6)
    provider = Recorder(summaries=[well_formed("Answer the six questions.")])
    (outcome,), _ = run_worker(store, s.id, provider, {"focus": "ports", "everything": True})
    assert outcome.status == COMPACTED, outcome.error
    newest = [m for m in store.history(s.id) if m.turn_id == "t5"]
    cp = outcome.checkpoint
    assert cp.first_retained_seq == newest[0].seq and outcome.kept_turns == 1
    assert cp.trigger_reason == "manual" and not cp.degraded
    assert cp.tokens_after < cp.tokens_before
    assert restore(store, s.id).raw == tuple(newest)                  # only the newest turn raw
    assert store.session(s.id).active_context_checkpoint_id == cp.id
    assert len(store.history(s.id)) == 12                             # the raw log is all there
    [summary_request] = provider.summary_requests
    sent = "\n".join(str(m.get("content")) for m in summary_request.messages)
    assert "question 4" in sent and "question 5" not in sent and "ports" in sent


def test_compact_all_on_a_single_turn_has_nothing_to_fold_and_sends_nothing(store):
    s = store.create_session("one")
    talk(store, s.id, 1)
    provider = Recorder()
    (outcome,), limits = run_worker(store, s.id, provider, {"everything": True})
    assert outcome.status == NOTHING_TO_COMPACT and provider.requests == []
    line = report.nothing_reason(outcome, limits, fold_all=None)
    assert "single turn" in line and "/compact all" not in line


def test_an_answered_turn_and_an_unanswered_message_are_not_sent_to_compact_all(store):
    """Both stay raw whatever the command (the message waits for its answer), so the line
    does not offer /compact all, which would find nothing either."""
    s = store.create_session("waiting")
    talk(store, s.id, 1)
    append_message(store, s.id, "user", "a question whose answer failed", turn_id="t9")
    (plain, everything), limits = run_worker(store, s.id, Recorder(), {}, {"everything": True})
    assert plain.status == everything.status == NOTHING_TO_COMPACT
    line = report.nothing_reason(plain, limits)
    assert "unanswered" in line and "/compact all" not in line


def test_compact_all_still_refuses_a_summary_that_fails_the_gate(store):
    s = store.create_session("gate")
    talk(store, s.id, 6)
    provider = Recorder(summaries=["I could not summarize this."])  # no contract headings
    (outcome,), _ = run_worker(store, s.id, provider, {"everything": True})
    assert outcome.status == FAILED and outcome.error.kind == "summary_rejected"
    assert store.checkpoints(s.id) == []
    assert len(restore(store, s.id).raw) == 12                        # the old context stands


def test_compact_all_does_not_commit_over_a_clear_made_meanwhile(store):
    s = store.create_session("stale")
    talk(store, s.id, 6)

    async def go():
        release = asyncio.Event()
        provider = Recorder(summaries=[waiter(release, lambda: (store.clear_context(s.id),
                                                                release.set()))])
        async with SessionWorker(store, s.id, OFFLINE, provider, "sys") as worker:
            return await worker.compact(everything=True)

    outcome = asyncio.run(go())
    assert outcome.status == FAILED and outcome.error.kind == "stale_generation"
    assert store.checkpoints(s.id) == []


# --- the CLI -----------------------------------------------------------------------------------


def cli_chat(run_cli, turns):
    for i in range(turns):
        result = run_cli("ask", "--session", "s", f"Service {i} listens on port {8000 + i}; "
                         f"its config lives in /srv/svc{i}/app.toml. " * 4)
        assert result.status == 0, result.stderr


def test_cli_compact_names_all_and_compact_all_folds_the_short_chat(run_cli):
    cli_chat(run_cli, 4)
    result = run_cli("compact", "--session", "s")
    assert result.status == 0 and result.stdout == "Nothing to compact\n"
    assert "kept raw; use --all to fold all but the newest turn" in result.stderr

    result = run_cli("compact", "--session", "s", "--all")
    assert result.status == 0, result.stderr
    assert result.stdout.splitlines()[1].startswith("Kept 1 recent turn from message seq 7")
    data = json.loads(run_cli("checkpoints", "--session", "s", "--json").stdout)
    assert data[0]["active"] and data[0]["first_retained_seq"] == 7


def test_cli_compact_all_json_and_a_single_turn(run_cli):
    cli_chat(run_cli, 1)
    result = run_cli("compact", "--session", "s", "--all")
    assert result.status == 0 and result.stdout == "Nothing to compact\n"
    assert "single turn" in result.stderr and "--all" not in result.stderr
    cli_chat(run_cli, 2)
    data = json.loads(run_cli("compact", "--session", "s", "--all", "--json").stdout)
    assert data["status"] == "compacted" and data["kept_turns"] == 1
    assert data["first_retained_seq"] == 5 and data["tokens_after"] < data["tokens_before"]


async def test_compact_all_in_the_app_folds_what_plain_compact_keeps(store):
    """In the app: /compact on a short chat names /compact all, which then folds all but the
    newest turn."""
    from picochat.config import Config
    from picochat.tui.chat import Notice
    from tests.helpers.conversations import talk
    from tests.helpers.tui import SIZE, make_app, say, texts
    from tests.helpers.waiting import settle

    s = store.create_session("t")
    talk(store, s.id, 6)
    app = make_app(store, config=Config())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/compact")
        await settle(pilot, app, lambda: any("Nothing to compact" in t
                                             for t in texts(app, Notice)))
        assert any("use /compact all" in t for t in texts(app, Notice))
        await say(pilot, "/compact all")
        await settle(pilot, app, lambda: store.checkpoints(s.id))
        [cp] = store.checkpoints(s.id)
        assert cp.first_retained_seq == 11  # the newest of six turns stays raw
