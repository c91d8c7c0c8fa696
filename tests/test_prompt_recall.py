"""↑ in the prompt after a restart: the earlier prompts come from the database, and the first
press gives the most recent one, the next presses older ones (issue 22.1)."""

from __future__ import annotations

from picochat.tui.prompt import Prompt
from tests.helpers.tui import SIZE, chat_once, make_app
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message


async def test_up_after_a_restart_recalls_the_newest_prompt_first(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        for text in ("first prompt", "second prompt", "third prompt"):
            await chat_once(pilot, app, store, text)

    again = make_app(store)  # a new app on the same database: picochat started again
    async with again.run_test(size=SIZE) as pilot:
        await settle(pilot, again, lambda: again.ready)
        prompt = again.query_one(Prompt)
        prompt.focus()
        prompt.load_text("a draft")
        seen = []
        for _ in range(4):  # one press more than there are prompts: the oldest stays
            await pilot.press("up")
            seen.append(prompt.text)
        assert seen == ["third prompt", "second prompt", "first prompt", "first prompt"]
        await pilot.press("down")
        assert prompt.text == "second prompt"
        await pilot.press("down", "down")
        assert prompt.text == "a draft"  # past the newest: the text being written comes back


async def test_a_prompt_sent_after_the_restart_is_recalled_before_the_stored_ones(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "older, before the restart")
        await chat_once(pilot, app, store, "newer, before the restart")

    again = make_app(store)
    async with again.run_test(size=SIZE) as pilot:
        await settle(pilot, again, lambda: again.ready)
        await chat_once(pilot, again, store, "after the restart")
        prompt = again.query_one(Prompt)
        await pilot.press("up")
        assert prompt.text == "after the restart"
        await pilot.press("up")
        assert prompt.text == "newer, before the restart"
        await pilot.press("up")
        assert prompt.text == "older, before the restart"


def test_the_store_gives_earlier_prompts_oldest_first_and_the_newest_within_its_limit(store):
    """The order the prompt walks back from its end; a limit keeps the newest, not the oldest."""
    one, two = store.create_session("one"), store.create_session("two")
    for i in range(5):
        append_message(store, (one, two)[i % 2].id, "user", f"p{i}", turn_id=f"t{i}")
        append_message(store, (one, two)[i % 2].id, "assistant", f"a{i}", turn_id=f"t{i}")
    assert store.search.user_prompts() == ["p0", "p1", "p2", "p3", "p4"]
    assert store.search.user_prompts(limit=2) == ["p3", "p4"]


async def test_a_prompt_sent_twice_in_a_row_is_recalled_once_after_a_restart(store):
    session = store.create_session("t")
    for i, text in enumerate(("explain", "go on", "go on", "go on")):
        append_message(store, session.id, "user", text, turn_id=f"x{i}")
        append_message(store, session.id, "assistant", "ok", turn_id=f"x{i}")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        prompt = app.query_one(Prompt)
        prompt.focus()
        await pilot.press("up", "up")
        assert prompt.text == "explain"
