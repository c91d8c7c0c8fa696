"""Races in the app, through Textual's pilot: what happens when the user acts while the
worker is busy. Each race must end in a defined state, shown on screen in the order it
happened, with nothing lost from the raw log.

  * messages sent while an answer streams queue, then run in order;
  * `/compact` during a turn waits for it and keeps the turn (raw tail or summary);
  * `/clear` during a compaction waits for it (the worker runs one job at a time), then
    clears: the checkpoint is committed, then made inactive by the clear;
  * quitting mid-stream exits promptly and keeps the partial answer, marked interrupted;
  * Esc and, at once, a new message: the partial is saved, the new turn runs.

The providers hold an answer mid-stream on an event (tests/helpers/scripted.py `Hold`, or the
fake OpenAI server's ("hold", ...)), so nothing here depends on timing: every wait is for a
state.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from textual import events

from picochat.config import Config, ModelConfig
from picochat.messages import COMPLETE, INTERRUPTED
from picochat.models import create_provider, resolve_model
from picochat.storage import open_store
from picochat.tui.app import PicochatApp
from picochat.tui.chat import (
    AssistantMessage,
    ChatView,
    CheckpointDivider,
    Notice,
    UserMessage,
)
from tests.helpers.conversations import rows_of
from tests.helpers.fakes.openai import FakeOpenAI
from tests.helpers.scripted import Hold, Recorder, Streaming, waiter
from tests.helpers.tui import (
    SIZE,
    conversation,
    idle,
    make_app,
    say,
    screen,
    status,
    texts,
    type_keys,
)
from tests.helpers.waiting import WAIT_S, settle
from tests.helpers.storage import append_message

QUEUED_COMPACT = "/compact is queued: it runs when the current answer ends"


def _filled_session(store, turns: int = 6):
    """Earlier turns, each with a fact the offline summary keeps (a port, a host id)."""
    session = store.create_session("t")
    for i in range(turns):
        append_message(store, session.id, "user", f"q{i}: service {i} listens on port {9100 + i} "
                       + "words " * 40, turn_id=f"x{i}")
        append_message(store, session.id, "assistant", f"a{i}: noted, host node-{i}a "
                       + "words " * 40, turn_id=f"x{i}")
    return session


# --- 1. messages sent while an answer streams ---------------------------------------------------

async def test_messages_sent_while_an_answer_streams_queue_and_run_in_order(store):
    first = Hold("the first answer starts here", "and ends naming alpha-1")
    provider = Streaming(turns=[first, "the second answer names beta-2",
                                "the third answer names gamma-3"])
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        sid = app.session.id
        await say(pilot, "question one")
        await settle(pilot, app, lambda: first.reached.is_set() and app.query(AssistantMessage))
        # typed fast, while the first answer is open mid-stream
        type_keys(app, "question two\nquestion three\n")
        await settle(pilot, app, lambda: len(app.query(UserMessage)) == 3)
        await settle(pilot, app, lambda: "2 queued" in status(app))
        one, two, three = app.query(UserMessage)
        assert not one.has_class("queued")
        assert two.has_class("queued") and three.has_class("queued")
        assert two.border_subtitle.startswith("queued")
        assert app.worker.busy and app.worker.queued == 2
        # nothing of the queued turns is sent or stored before the answer ends
        assert rows_of(store, sid) == [("user", "question one", COMPLETE)]
        assert len(provider.turn_requests) == 1

        first.release.set()
        await settle(pilot, app, lambda: len(store.history(sid)) == 6 and idle(app))
        assert not app.query(".queued") and status(app) == ""
        expected = [
            ("user", "question one"),
            ("assistant", "the first answer starts here and ends naming alpha-1"),
            ("user", "question two"),
            ("assistant", "the second answer names beta-2"),
            ("user", "question three"),
            ("assistant", "the third answer names gamma-3"),
        ]
        assert rows_of(store, sid) == [(role, text, COMPLETE) for role, text in expected]
        assert [m.seq for m in store.history(sid)] == [1, 2, 3, 4, 5, 6]
        # each queued turn ran after the one before it had ended: its request held it
        assert provider.turn_requests[1].messages[-2]["content"].strip().endswith("alpha-1")
        assert provider.turn_requests[2].messages[-2]["content"].strip().endswith("beta-2")
        assert conversation(app) == expected
        assert [w.seq for w in app.query(UserMessage)] == [1, 3, 5]
        assert not any(n.has_class("error") for n in app.query(Notice))
    reopened = open_store(store.path)  # durable: a fresh connection reads the same rows
    try:
        assert rows_of(reopened, sid) == [(role, text, COMPLETE) for role, text in expected]
    finally:
        reopened.close()


# --- 2. /compact during a turn ------------------------------------------------------------------

async def test_compact_during_a_turn_waits_for_it_and_keeps_the_turn(store):
    session = _filled_session(store)
    earlier = [(m.seq, m.role, m.content) for m in store.history(session.id)]
    turn = Hold("The release tag", "is v4.2.1 on host cn-west-12")
    app = make_app(store, provider=Streaming(turns=[turn]))
    async with app.run_test(size=SIZE) as pilot:
        sid = session.id
        await settle(pilot, app, app.transcript_ready.is_set)
        await say(pilot, "which release tag ships today?")
        await settle(pilot, app, turn.reached.is_set)
        await say(pilot, "/compact")
        await settle(pilot, app, lambda: QUEUED_COMPACT in texts(app, Notice))
        await settle(pilot, app, lambda: "1 queued" in status(app))
        assert not store.checkpoints(sid)                 # not while the answer streams
        assert app.worker.busy

        turn.release.set()
        await settle(pilot, app, lambda: any("Context compacted" in t
                                             for t in texts(app, Notice)))
        await settle(pilot, app, lambda: idle(app))
        assert status(app) == "" and app.query(CheckpointDivider)
        [cp] = store.checkpoints(sid)
        history = store.history(sid)
        assert len(history) == 14                         # nothing added, nothing lost
        assert [(m.seq, m.role, m.content) for m in history[:12]] == earlier
        user, answer = history[-2:]
        assert (user.role, user.content) == ("user", "which release tag ships today?")
        assert answer.role == "assistant" and answer.status == COMPLETE
        assert answer.content.strip() == "The release tag is v4.2.1 on host cn-west-12"
        assert cp.source_max_seq == answer.seq            # it ran after the whole turn
        assert store.session(sid).active_context_checkpoint_id == cp.id

        # the turn that just ended is in the context: in the raw tail, or in the summary
        projection = app.worker.projection()
        raw = "\n".join(m.content for m in projection.raw)
        context = (projection.summary or "") + "\n" + raw
        for fact in ("v4.2.1", "cn-west-12"):
            assert fact in context, fact
        if answer.seq >= cp.first_retained_seq:
            assert answer.seq in [m.seq for m in projection.raw]
        # and the earlier turns' facts survive in the summary
        assert 1 < cp.first_retained_seq and projection.summary
        for i in range(6):
            if 2 * i + 1 < cp.first_retained_seq:
                assert f"port {9100 + i}" in projection.summary

        # on screen the compaction's card comes after the answer it waited for, and the
        # divider sits right above the first message of the raw tail
        rows = screen(app)
        answer_at = rows.index(("assistant", answer.content.strip()))
        card_at = next(i for i, (kind, text) in enumerate(rows)
                       if kind == "notice" and "Context compacted" in text)
        assert answer_at < card_at
        divider_at = rows.index(("divider", cp.id))
        seqs = [getattr(w, "seq", None) for w in app.query_one(ChatView).children]
        assert seqs[divider_at + 1] == cp.first_retained_seq


# --- 3. /clear during a compaction ---------------------------------------------------------------

async def test_clear_during_a_compaction_waits_for_it_then_clears(store):
    session = _filled_session(store)
    summary_running, release = asyncio.Event(), asyncio.Event()
    provider = Recorder(summaries=[waiter(release, then=summary_running.set)])
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        sid = session.id
        await settle(pilot, app, app.transcript_ready.is_set)
        generation = store.session(sid).context_generation
        await say(pilot, "/compact")
        await settle(pilot, app, summary_running.is_set)
        await say(pilot, "/clear")
        # the worker runs one job at a time: the clear waits behind the compaction, visibly
        await settle(pilot, app, lambda: "compacting…" in status(app)
                     and "1 queued" in status(app))
        # "1 queued" is the clear waiting in the worker's queue behind the compaction, which
        # is held on `release`: from here nothing can run it before release, so the state
        # below is the one it waits in (no fixed pause needed to give it a chance to go wrong)
        assert not any("Context cleared" in t for t in texts(app, Notice))
        assert store.session(sid).context_floor_seq == 0      # not cleared yet
        assert store.session(sid).context_generation == generation
        assert not store.checkpoints(sid)

        release.set()
        await settle(pilot, app, lambda: any("Context cleared" in t for t in texts(app, Notice)))
        await settle(pilot, app, lambda: idle(app))
        assert status(app) == ""
        # the compaction committed first (it was not overtaken, so not stale), then the clear
        # made the whole context start afresh: no active checkpoint, nothing raw in context
        [cp] = store.checkpoints(sid)
        after = store.session(sid)
        assert after.active_context_checkpoint_id is None
        assert after.context_floor_seq == 12
        assert after.context_generation == generation + 2
        assert app.worker.info().as_dict()["raw_messages_in_context"] == 0
        assert app.worker.projection().summary is None
        assert len(provider.summary_requests) == 1
        # the user reads it in that order, and no divider claims a checkpoint is active
        notices = [t for kind, t in screen(app) if kind == "notice"]
        compacted = next(i for i, t in enumerate(notices) if "Context compacted" in t)
        cleared = next(i for i, t in enumerate(notices) if "Context cleared" in t)
        assert compacted < cleared
        assert not app.query(CheckpointDivider)
        assert not any(n.has_class("error") for n in app.query(Notice))
        # the raw log is untouched and still on screen
        assert len(store.history(sid)) == 12
        assert len(app.query(UserMessage)) == 6


# --- 4. quitting mid-stream ----------------------------------------------------------------------

@pytest.mark.parametrize("how", ["/quit", "ctrl+q"])
async def test_quitting_mid_stream_keeps_the_partial_answer_marked_interrupted(store, how):
    turn = Hold("half of the answer names delta-4", "and this part never arrives")
    app = make_app(store, provider=Streaming(turns=[turn]))
    async with app.run_test(size=SIZE) as pilot:
        sid = app.session.id
        await say(pilot, "a question left running")
        await settle(pilot, app, lambda: turn.reached.is_set() and app.query(AssistantMessage))
        await say(pilot, "and one more thing")  # queued behind the held answer
        await settle(pilot, app, lambda: app.worker.queued == 1)
        if how == "ctrl+q":
            await pilot.press("ctrl+q")
        else:
            await say(pilot, how)
        # the held answer would never end on its own: an app that waited for it never exits
        await settle(pilot, app, lambda: not app.is_running, what="the app did not quit")
    assert app.return_code == 0
    assert not turn.release.is_set()
    await _assert_partial_kept(store, sid, "a question left running",
                               "half of the answer names delta-4", unsent="and one more thing")


async def test_quitting_while_the_fake_server_holds_the_stream(
        store, monkeypatch, fake_openai: FakeOpenAI):
    """The same through litellm and a real HTTP stream: the held connection is dropped, not
    waited for."""
    monkeypatch.setenv("FAKE_API_KEY", "test-key")
    config = Config(models={"fake": ModelConfig(
        name="fake", model="openai/fake-model", api_base=fake_openai.base_url,
        api_key_env="FAKE_API_KEY", token_limit=8192)})
    resolved = resolve_model(config, "fake")
    held = threading.Event()
    fake_openai.script(("hold", "half of the answer names epsilon-5", held,
                        "and this part never arrives"))
    session = store.create_session("t")
    app = PicochatApp(store, session, resolved, create_provider(resolved), config)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app, lambda: app.ready and not any(
                w.group == "warm-up" and not w.is_finished for w in app.workers), timeout=90)
            await say(pilot, "a question left running")
            await settle(pilot, app, lambda: "epsilon-5" in "".join(
                "".join(a.parts) for a in app.query(AssistantMessage)))
            await say(pilot, "/quit")
            await settle(pilot, app, lambda: not app.is_running, what="the app did not quit")
        assert app.return_code == 0
        # the client left the held stream: `disconnected` is set only when the client goes
        # away while the server still holds it. An app that waited for the stream would have
        # seen the server end it at HOLD_LIMIT_S instead, and this would never be set.
        assert await asyncio.to_thread(fake_openai.disconnected.wait, WAIT_S)
    finally:
        held.set()
    await _assert_partial_kept(store, session.id, "a question left running",
                               "half of the answer names epsilon-5")


async def _assert_partial_kept(store, sid: str, question: str, partial: str,
                               unsent: str | None = None) -> None:
    """After the app has exited: the database holds the question and the partial answer,
    marked interrupted (and a message still queued at the quit, saved but never sent); a
    reopened app shows the partial answer marked so."""
    fresh = open_store(store.path)
    try:
        user, answer, *rest = fresh.history(sid)
        assert (user.role, user.content, user.status) == ("user", question, COMPLETE)
        assert answer.role == "assistant" and answer.status == INTERRUPTED
        assert answer.content.strip() == partial
        assert [(m.role, m.content) for m in rest] == ([("user", unsent)] if unsent else [])
    finally:
        fresh.close()
    reopened = make_app(store, provider=Recorder())
    async with reopened.run_test(size=SIZE) as pilot:
        await settle(pilot, reopened, reopened.transcript_ready.is_set)
        assert reopened.session.id == sid
        assert conversation(reopened) == [("user", question), ("assistant", partial)] + (
            [("user", unsent)] if unsent else [])
        [shown] = reopened.query(AssistantMessage)
        assert shown.has_class("interrupted") and shown.seq == answer.seq
        assert shown.border_subtitle.startswith("interrupted")


# --- 5. Esc, then at once a new message ----------------------------------------------------------

LONG = "\n\n".join(f"## Part {i}\n\n- item {i}a\n- item {i}b\n\nSome *text* for part {i}."
                   for i in range(40)) + "\n\nthe first answer got as far as zeta-6"


@pytest.mark.parametrize("burst", [False, True], ids=["streamed", "burst"])
async def test_escape_then_an_immediate_send_saves_the_partial_and_runs_the_new_turn(store,
                                                                                     burst):
    """With `burst` the partial answer arrives in one read just before Esc, so the screen is
    still drawing it when the stop and the next question come in."""
    partial = LONG if burst else "the first answer got as far as zeta-6"
    turn = Hold(partial, "but never further", burst=burst)
    second = Hold("the second answer", "names eta-7")
    provider = Streaming(turns=[turn, second])
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        sid = app.session.id
        await say(pilot, "question one")
        if burst:
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while not turn.reached.is_set():  # no pause: act before the screen catches up
                assert asyncio.get_running_loop().time() < deadline, "never streamed"
                await asyncio.sleep(0)  # a bare yield to the loop, not a wait for a time
        else:
            await settle(pilot, app, lambda: turn.reached.is_set()
                         and app.query(AssistantMessage))
        app.post_message(events.Key("escape", None))
        type_keys(app, "question two\n")                 # in the same breath
        await settle(pilot, app, lambda: second.reached.is_set() and len(app.query(
            AssistantMessage)) == 2)
        # the new answer is the one running now: the bar says so, and the footer offers Esc
        await settle(pilot, app, lambda: len(app.query(Notice)) == 1)
        await settle(pilot, app, lambda: status(app).startswith("answering…"),
                     what="the bar never said the new answer runs")
        assert status(app).startswith("answering…")
        assert app.check_action("stop", ()) is True
        assert not app.query(".queued")
        second.release.set()
        await settle(pilot, app, lambda: len(store.history(sid)) == 4 and idle(app))
        assert not app.query(".queued") and status(app) == ""
        assert rows_of(store, sid) == [
            ("user", "question one", COMPLETE),
            ("assistant", partial.strip(), INTERRUPTED),
            ("user", "question two", COMPLETE),
            ("assistant", "the second answer names eta-7", COMPLETE),
        ]
        assert not turn.release.is_set()
        # the second request saw the partial answer as what had been said
        sent = provider.turn_requests[1].messages
        assert sent[-1] == {"role": "user", "content": "question two"}
        assert "zeta-6" in sent[-2]["content"]
        assert conversation(app) == [
            ("user", "question one"),
            ("assistant", partial.strip()),
            ("user", "question two"),
            ("assistant", "the second answer names eta-7"),
        ]
        first_answer, second_answer = app.query(AssistantMessage)
        assert first_answer.has_class("interrupted")
        assert not second_answer.has_class("interrupted")
        # the "stopped" line belongs to the first answer: it comes before the next question
        rows = screen(app)
        stopped = next(i for i, (kind, text) in enumerate(rows)
                       if kind == "notice" and "Stopped" in text)
        assert "partial answer is saved" in rows[stopped][1]
        assert rows.index(("assistant", partial.strip())) < stopped
        assert stopped < rows.index(("user", "question two"))
