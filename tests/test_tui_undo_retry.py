"""/retry and /undo act on the turn in the context, and only on one the reader has seen
(issue 31, item 12).

/retry after /clear sent the question from before the clear: the model started afresh, and
got an old question the user had cleared away. /undo took back a turn another process wrote
(`picochat ask` on the same session) that the app never showed, and called it "your last turn".
Here another process's turn is written to the database while the app is open, as it would be.
"""

from __future__ import annotations

from textual.widgets import Static

from picochat.messages import Message
from picochat.storage.store import open_store
from picochat.tui.chat import Notice
from picochat.tui.screens import ConfirmScreen
from tests.helpers.scripted import Recorder
from tests.helpers.tui import SIZE, chat_once, idle, make_app, say, texts
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message

# what the other process's user typed: a link escape around its first word, a bidi control
ELSEWHERE = "\x1b]8;;https://x\x1b\\please\x1b]8;;\x1b\\ delete the old backups\u202e"


def written_elsewhere(store, session_id: str, turn_id: str = "ask-1") -> list[Message]:
    """A whole turn written by another picochat on the same database (`picochat ask`)."""
    other = open_store(store.path)
    try:
        return [append_message(other, session_id, "user", ELSEWHERE, turn_id=turn_id),
                append_message(other, session_id, "assistant", "Deleted them.", turn_id=turn_id)]
    finally:
        other.close()


def notices(app) -> list[str]:
    return texts(app, Notice)


def retracted(store, app) -> list[bool]:
    return [m.retracted for m in store.history(app.session.id)]


async def answered_command(pilot, app, command: str) -> list[str]:
    """Run `command` and wait until it has said something and nothing it started still runs:
    the notices it added."""
    before = len(notices(app))
    await say(pilot, command)
    await settle(pilot, app, lambda: len(notices(app)) > before and idle(app))
    return notices(app)[before:]


async def asked_or_done(pilot, app, command: str) -> None:
    """Run `command` and wait for its confirmation, or for the notice that it went ahead
    without one (what happened before the fix)."""
    before = len(notices(app))
    await say(pilot, command)
    await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen)
                 or len(app.screen_stack[0].query(Notice)) > before)


async def test_retry_after_clear_says_there_is_nothing_to_retry_and_sends_nothing(store):
    provider = Recorder()
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "what is two plus two?")
        assert (await answered_command(pilot, app, "/clear"))[0].startswith("Context cleared")
        said = await answered_command(pilot, app, "/retry")
        assert len(provider.turn_requests) == 1     # the question before the clear: not sent
        assert said == ["Nothing to retry: no question of yours is in the context"]
        assert retracted(store, app) == [False, False]  # and nothing taken back
        assert len(store.history(app.session.id)) == 2


async def test_undo_of_a_turn_the_app_never_showed_asks_first_naming_it(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "my own question")
        written_elsewhere(store, app.session.id)

        await asked_or_done(pilot, app, "/undo")
        assert isinstance(app.screen, ConfirmScreen), "took back an unseen turn unasked"
        question = str(app.screen.query_one(Static).render())
        assert "never showed" in question and "messages 3–4" in question
        assert "“please delete the old backups<U+202E>”" in question  # its words, cleaned
        assert "\x1b" not in question and "your last turn" not in question
        await pilot.press("n")
        await settle(pilot, app, lambda: not isinstance(app.screen, ConfirmScreen)
                     and idle(app))
        assert retracted(store, app) == [False] * 4  # no: nothing taken back

        await asked_or_done(pilot, app, "/undo")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot, app, lambda: any("Took back" in t for t in notices(app)))
        [line] = [t for t in notices(app) if "Took back" in t]
        assert line == ("Took back the turn another picochat wrote (messages 3–4): the model "
                        "no longer reads it; it stays in the history")
        assert retracted(store, app) == [False, False, True, True]

        # the app's own turn, shown, goes at once, as before (the undo shows the transcript
        # afresh: only its own notice is left)
        await say(pilot, "/undo")
        await settle(pilot, app, lambda: any("(messages 1–2)" in t for t in notices(app)))
        assert notices(app) == ["Took back your last turn (messages 1–2): the model no longer "
                                "reads it; it stays in the history"]
        assert not isinstance(app.screen, ConfirmScreen)


async def test_retry_and_copy_never_reach_a_turn_the_app_never_showed_unasked(store):
    provider = Recorder(turns=["Four."])
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "what is two plus two?")
        written_elsewhere(store, app.session.id)

        await say(pilot, "/copy")  # the answer on screen, not the one written elsewhere
        await settle(pilot, app, lambda: any("Copied the last answer" in str(n.message)
                                             for n in app._notifications))
        assert app.clipboard == "Four."

        await asked_or_done(pilot, app, "/retry")
        assert isinstance(app.screen, ConfirmScreen), "re-sent an unseen question unasked"
        assert "“please delete the old backups<U+202E>”" in \
            str(app.screen.query_one(Static).render())
        await pilot.press("y")
        await settle(pilot, app, lambda: len(provider.turn_requests) == 2 and idle(app))
        assert provider.turn_requests[-1].messages[-1]["content"] == ELSEWHERE
        assert retracted(store, app) == [False, False, True, True, False, False]


async def test_a_yes_to_a_turn_that_is_no_longer_the_newest_takes_nothing_back(store):
    """Another turn lands while the question is open: the one named is not the newest any
    more, and the yes must not take back a turn nobody was asked about."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "my own question")
        written_elsewhere(store, app.session.id)
        await asked_or_done(pilot, app, "/undo")
        assert isinstance(app.screen, ConfirmScreen)
        written_elsewhere(store, app.session.id, "ask-2")  # messages 5–6, while it is asked
        await pilot.press("y")
        await settle(pilot, app, lambda: any("Nothing taken back" in t for t in notices(app)))
        assert retracted(store, app) == [False] * 6


async def test_undoing_turn_after_turn_never_asks_about_one_read_with_the_transcript(store):
    """Long answers: after an undo the transcript is read again and mounts only the newest
    screens, so the turn before is a scroll away, not on screen. It was shown all the same
    (read with the transcript): it goes at once, as the user's."""
    session = store.create_session("t")
    for i in range(3):
        append_message(store, session.id, "user", f"question {i}", turn_id=f"x{i}")
        append_message(store, session.id, "assistant", f"answer {i}\n\n" + "a line\n\n" * 80,
                       turn_id=f"x{i}")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        for first in (5, 3, 1):
            await say(pilot, "/undo")
            await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen) or any(
                f"(messages {first}–{first + 1})" in t for t in notices(app)))
            assert not isinstance(app.screen, ConfirmScreen)
            assert notices(app)[-1].startswith(f"Took back your last turn (messages {first}–")
        assert retracted(store, app) == [True] * 6


async def test_a_turn_from_elsewhere_still_asks_once_a_refresh_shows_it(store):
    """The open app follows other writers (item 13): their turn appears on screen. It is
    still not the reader's own: /undo names it and asks before taking it back."""
    from picochat.tui.chat import AssistantMessage, ChatView

    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "my own question")
        written_elsewhere(store, app.session.id)
        await settle(pilot, app, lambda: "Deleted them." in [
            m.text for m in app.query_one(ChatView).query(AssistantMessage)])
        await asked_or_done(pilot, app, "/undo")
        assert isinstance(app.screen, ConfirmScreen)
        assert retracted(store, app) == [False, False, False, False]
