"""Typing where the focus is on the transcript or the panel goes to the prompt, in the order
it was typed (issue 35.8: once a message was stored as "second queued message, fixe", its
last letter left in the prompt). The view that received a key used to move the focus itself,
in its own task, and the keys the app forwarded meanwhile went straight to the prompt ahead
of the ones still on their way through the view ("seocnd"). The keys here arrive as a
terminal's reads do, unevenly (`type_unevenly`, seeded): every seed must give the text whole."""

from __future__ import annotations

import random

from textual import events

from picochat.tui.prompt import Prompt
from tests.helpers.panel import open_panel
from tests.helpers.tui import SIZE, chat_once, make_app, type_unevenly
from tests.helpers.waiting import settle

TEXT = "second queued message, fixed"


def _sent(store, app) -> list[str]:
    return [m.content for m in store.history(app.session.id) if m.role == "user"]


async def test_fast_typing_on_a_selected_message_is_sent_whole_and_in_order(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        await chat_once(pilot, app, store, "hello")
        prompt = app.query_one(Prompt)
        for seed in range(12):
            await pilot.press("alt+up")   # a message selected: the focus is on the transcript
            assert app.focused is not prompt
            count = len(_sent(store, app))
            text = f"{TEXT} {seed}"
            await type_unevenly(app, text + "\n", random.Random(seed))
            await settle(pilot, app, lambda: len(_sent(store, app)) == count + 1
                         and not app.worker.busy, what=f"seed {seed}: nothing was sent")
            assert _sent(store, app)[-1] == text, f"seed {seed}"
            assert prompt.text == "", f"seed {seed}: {prompt.text!r} was left behind"


async def test_fast_typing_into_the_open_panel_is_sent_whole_and_in_order(store):
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        prompt = app.query_one(Prompt)
        for seed in range(8):
            await open_panel(pilot, app)
            await settle(pilot, app, lambda: app.focused is not prompt)
            count = len(_sent(store, app))
            text = f"which port? {seed}"
            await type_unevenly(app, text + "\n", random.Random(100 + seed))
            await settle(pilot, app, lambda: len(_sent(store, app)) == count + 1
                         and not app.worker.busy, what=f"seed {seed}: nothing was sent")
            assert _sent(store, app)[-1] == text, f"seed {seed}"
            await pilot.press("f2")  # closed again: the next round opens it


async def test_a_paste_on_the_transcript_lands_in_the_prompt(store):
    """It was dropped: the transcript takes no paste, and nothing passed it on."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        await chat_once(pilot, app, store, "hello")
        prompt = app.query_one(Prompt)
        prompt.put("typed first, ")
        await pilot.press("alt+up")
        app.post_message(events.Paste("then pasted"))
        await settle(pilot, app, lambda: prompt.text == "typed first, then pasted",
                     what="the paste never reached the prompt")
        assert app.focused is prompt
