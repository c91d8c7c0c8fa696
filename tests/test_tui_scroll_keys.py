"""Scrolling the transcript from the keyboard (issue 35, item 1): PageUp and PageDown did
nothing from the prompt, and ctrl+home / ctrl+end neither; the only way was alt+↑ then one
message per ↑. Now they scroll a page, go to the start (loading older pages) and back to the
newest message, from the prompt, and F1 lists them."""

from __future__ import annotations

from picochat.tui.chat import PAGE, ChatView, UserMessage
from picochat.tui.keys import help_rows
from picochat.tui.prompt import Prompt
from tests.helpers.tui import make_app
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message

SIZE = (100, 30)


def long_session(store, turns: int):
    session = store.create_session("long")
    for n in range(turns):
        append_message(store, session.id, "user", f"question {n}", turn_id=f"t{n}")
        append_message(store, session.id, "assistant", f"answer {n}\n\n" + "more words\n" * 3,
                       turn_id=f"t{n}")
    return session


async def test_page_keys_from_the_prompt_scroll_the_transcript_and_come_back(store):
    long_session(store, PAGE)  # two pages of messages: the older one loads at the top
    app = make_app(store, name="long")
    async with app.run_test(size=SIZE) as pilot:
        chat = app.query_one(ChatView)

        def at_bottom() -> bool:
            return chat.max_scroll_y > 0 and chat.scroll_y >= chat.max_scroll_y - 1

        await settle(pilot, app, lambda: app.ready and at_bottom())
        assert app.focused is app.query_one(Prompt)
        await pilot.press("pageup")  # the newest message leaves the view
        await settle(pilot, app, lambda: not at_bottom())
        assert app.query_one(Prompt).text == "" and app.focused is app.query_one(Prompt)
        for _ in range(10):  # as many pages down as it takes (an older page may have loaded)
            if at_bottom():
                break
            await pilot.press("pagedown")
            await pilot.pause()  # the key handled (no time): then look again
        assert at_bottom()

        shown = len(chat.query(UserMessage))
        await pilot.press("ctrl+home")  # the start: the older page loads there
        await settle(pilot, app, lambda: len(chat.query(UserMessage)) > shown)
        await settle(pilot, app, lambda: not at_bottom())

        await pilot.press("ctrl+end")  # the newest message, following new text again
        await settle(pilot, app, at_bottom)


async def test_typing_in_the_prompt_is_untouched_by_the_page_keys(store):
    long_session(store, 10)
    app = make_app(store, name="long")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        prompt = app.query_one(Prompt)
        prompt.load_text("a draft\nof two lines")
        await pilot.press("pageup", "pagedown", "ctrl+home", "ctrl+end")
        assert prompt.text == "a draft\nof two lines"


def test_f1_lists_the_scroll_keys():
    keys = dict(help_rows(()))
    assert "pageup / pagedown" in keys and "ctrl+home / ctrl+end" in keys
