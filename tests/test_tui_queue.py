"""Queued messages taken back (issue 22.10): up in the empty prompt while an answer streams
takes the newest queued message back to edit; its turn is cancelled, nothing of it is sent
or saved, and the turns queued before it still run in order.

The first answer is held mid-stream (tests/helpers/scripted.py `Hold`): every wait is for a
state."""

from __future__ import annotations

from picochat.messages import COMPLETE
from picochat.tui.chat import QUEUED, Notice, UserMessage
from picochat.tui.prompt import Prompt
from tests.helpers.conversations import rows_of
from tests.helpers.scripted import Hold, Streaming
from tests.helpers.tui import SIZE, conversation, idle, make_app, say, status, texts
from tests.helpers.waiting import settle


async def _two_queued(pilot, app, first: Hold) -> None:
    """One answer streaming (held), two more messages queued behind it."""
    await settle(pilot, app, app.transcript_ready.is_set)
    await say(pilot, "question one")
    await settle(pilot, app, lambda: first.reached.is_set())
    await say(pilot, "question two")
    await say(pilot, "question three")
    await settle(pilot, app, lambda: len(app.query(UserMessage)) == 3
                 and "2 queued" in status(app))


def _users(app) -> list[str]:
    return [u.text for u in app.query(UserMessage)]


async def test_up_takes_back_the_newest_queued_message_to_edit_and_resend(store):
    first = Hold("the first answer starts", "and ends")
    provider = Streaming(turns=[first, "the second answer", "the third answer"])
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        sid = app.session.id
        await _two_queued(pilot, app, first)
        assert app.query(UserMessage)[2].border_subtitle == QUEUED

        def shot() -> str:
            return app.export_screenshot().replace("&#160;", " ")
        # on screen, under the message: it says how (drawn on the next refresh)
        await settle(pilot, app, lambda: "queued · ↑ edits" in shot(),
                     what="the queued hint never showed")
        assert "queued · ↑ edits" in shot()

        prompt = app.query_one(Prompt)
        await pilot.press("up")
        await settle(pilot, app, lambda: prompt.text == "question three")
        assert prompt.cursor_location == prompt.document.end
        assert _users(app) == ["question one", "question two"]   # gone from the transcript
        await settle(pilot, app, lambda: "1 queued" in status(app))
        assert app.worker.queued == 1

        await pilot.press("end", *" (edited)")
        await pilot.press("enter")
        await settle(pilot, app, lambda: _users(app)[-1] == "question three (edited)")
        await settle(pilot, app, lambda: "2 queued" in status(app))
        assert app.query(UserMessage)[-1].has_class("queued")  # the answer still runs

        first.release.set()
        await settle(pilot, app, lambda: len(store.history(sid)) == 6 and idle(app))
        expected = [("user", "question one"), ("assistant", "the first answer starts and ends"),
                    ("user", "question two"), ("assistant", "the second answer"),
                    ("user", "question three (edited)"), ("assistant", "the third answer")]
        assert rows_of(store, sid) == [(role, text, COMPLETE) for role, text in expected]
        assert conversation(app) == expected
        assert len(provider.turn_requests) == 3
        # no "Stopped" line, no failure: the taken-back turn left no trace on screen
        assert not any("Stopped" in t for t in texts(app, Notice))
        assert not any(n.has_class("error") for n in app.query(Notice))
        assert status(app) == ""

        # with nothing queued, up recalls earlier prompts as before
        await pilot.press("up")
        assert prompt.text == "question three (edited)"


async def test_up_again_takes_back_the_one_before_and_a_cleared_take_back_is_never_sent(store):
    first = Hold("the only answer", "ends here")
    provider = Streaming(turns=[first])
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        sid = app.session.id
        await _two_queued(pilot, app, first)
        prompt = app.query_one(Prompt)
        await pilot.press("up")
        await settle(pilot, app, lambda: prompt.text == "question three")
        await pilot.press("up")  # the next one back goes in front, as they were written
        await settle(pilot, app, lambda: prompt.text == "question two\n\nquestion three")
        assert _users(app) == ["question one"]
        await settle(pilot, app, lambda: app.worker.queued == 0
                     and "queued" not in status(app))

        prompt.clear()
        await pilot.pause()  # the prompt's change events handled: the take-back is dropped
        first.release.set()
        # the first answer saved and shown, and nothing left running or queued: a taken-back
        # turn that would still be sent would be queued here
        await settle(pilot, app, lambda: idle(app) and len(store.history(sid)) == 2)
        assert len(provider.turn_requests) == 1
        assert not any("Stopped" in t for t in texts(app, Notice))
    # the app has closed its worker: whatever it still had to send is gone by now
    assert len(provider.turn_requests) == 1
    # nor saved when the app quits (a message still queued then would be)
    assert [m.content for m in store.history(sid) if m.role == "user"] == ["question one"]


async def test_up_with_text_typed_recalls_prompts_even_while_messages_are_queued(store):
    """Only the empty prompt takes a message back: a draft being typed is never merged."""
    first = Hold("held", "done")
    app = make_app(store, provider=Streaming(turns=[first, "two", "three"]))
    async with app.run_test(size=SIZE) as pilot:
        await _two_queued(pilot, app, first)
        prompt = app.query_one(Prompt)
        prompt.load_text("a new draft")
        await pilot.press("up")
        assert prompt.text == "question three"  # the last prompt sent, recalled
        assert len(app.query(UserMessage)) == 3 and app.worker.queued == 2
        await pilot.press("down")
        assert prompt.text == "a new draft"
        first.release.set()
        await settle(pilot, app, lambda: idle(app))
