"""The slash-command table: every command the hints, F1 and the palette offer has a handler,
and no handler hides without a command to reach it."""

from __future__ import annotations

from picochat.tui import commands, slash


def test_every_listed_command_has_a_handler_and_every_handler_a_listing():
    assert set(commands.HANDLERS) == set(slash.BY_NAME)
    assert all(callable(h) for h in commands.HANDLERS.values())


async def test_undo_speaks_of_messages_and_names_a_summary_only_when_one_was_in_use(store):
    """/undo with no summary in use says nothing of one; with one that covered the turn, it
    says the model now reads those messages as they are."""
    from tests.test_tui import SIZE, make_app, say, settle, texts
    from picochat.tui.chat import Notice

    session = store.create_session("t")
    for i in range(2):
        store.append_message(session.id, "user", f"q{i}", turn_id=f"t{i}")
        store.append_message(session.id, "assistant", f"a{i}", turn_id=f"t{i}")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/undo")
        await settle(pilot, app, lambda: any("Took back" in t for t in texts(app, Notice)))
        [line] = [t for t in texts(app, Notice) if "Took back" in t]
        assert line == ("Took back your last turn (messages 3–4): the model no longer reads "
                        "it; it stays in the history")
        assert "summary" not in line and "checkpoint" not in line and "#" not in line
