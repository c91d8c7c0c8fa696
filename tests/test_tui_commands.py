"""The slash-command table: every command the hints, F1 and the palette offer has a handler,
and no handler hides without a command to reach it."""

from __future__ import annotations

from picochat.tui import commands, slash


def test_every_listed_command_has_a_handler_and_every_handler_a_listing():
    assert set(commands.HANDLERS) == set(slash.BY_NAME)
    assert all(callable(h) for h in commands.HANDLERS.values())


async def test_undo_speaks_of_messages_and_names_a_summary_only_when_one_was_in_use(store):
    """/undo with no summary in use says nothing of one (it used to name a checkpoint that
    was never there); it speaks of messages, not seqs."""
    from picochat.tui.chat import Notice
    from tests.helpers.conversations import short_turns
    from tests.helpers.tui import SIZE, make_app, say, texts
    from tests.helpers.waiting import settle

    short_turns(store, 2, "q{i}", "a{i}")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/undo")
        await settle(pilot, app, lambda: any("Took back" in t for t in texts(app, Notice)))
        [line] = [t for t in texts(app, Notice) if "Took back" in t]
        assert line == ("Took back your last turn (messages 3–4): the model no longer reads "
                        "it; it stays in the history")
        assert "summary" not in line and "checkpoint" not in line and "#" not in line


async def test_model_without_a_name_lists_the_configured_models(store):
    from picochat.config import Config, ModelConfig
    from picochat.models import resolve_model
    from picochat.providers.offline import OfflineProvider
    from picochat.tui.app import PicochatApp
    from picochat.tui.chat import Notice
    from tests.helpers.tui import SIZE, say, texts
    from tests.helpers.waiting import settle

    config = Config(default_model="small", models={
        "small": ModelConfig("small", "offline", token_limit=2000),
        "gpt": ModelConfig("gpt", "openai/gpt-4o-mini")})
    app = PicochatApp(store, store.create_session("m"), resolve_model(config, "small"),
                      OfflineProvider(0), config)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/model")
        await settle(pilot, app, lambda: any("Configured" in t for t in texts(app, Notice)))
        [card] = [t for t in texts(app, Notice) if "Configured" in t]
        assert "● small  ·  offline" in card and "  gpt  ·  openai/gpt-4o-mini" in card
        assert "window 2,000 tokens" in card


async def test_a_theme_picked_in_the_palette_is_remembered_in_the_config_file(store, tmp_path):
    """The palette's "Change theme" sets the app's theme; the next start must find it."""
    from picochat.config import load_config
    from picochat.paths import Paths
    from tests.helpers.tui import SIZE, make_app
    from tests.helpers.waiting import settle

    paths = Paths(data_dir=tmp_path / "data", config_file=tmp_path / "config.toml",
                  log_file=tmp_path / "log")
    paths.config_file.write_text('[ui]\ntheme = "picochat-dark"\n', encoding="utf-8")
    app = make_app(store)
    app.paths = paths
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        app.theme = "picochat-light"  # what the palette's theme picker does
        await settle(pilot, app, lambda: load_config(paths.config_file).ui.theme
                     == "picochat-light")  # written when the theme changed
    assert load_config(paths.config_file).ui.theme == "picochat-light"


async def test_a_line_that_lands_below_a_reader_who_scrolled_up_is_announced(store):
    """Feedback out of view gets a "new below" marker; going down to it removes it."""
    from picochat.tui.chat import ChatView, NewBelow
    from tests.helpers.conversations import long_session
    from tests.helpers.tui import SIZE, make_app, say
    from tests.helpers.waiting import settle

    long_session(store)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        chat = app.query_one(ChatView)
        await settle(pilot, app, lambda: chat.max_scroll_y > 0)  # laid out: there is a page
        chat.scroll_home(animate=False, immediate=True)
        chat.release_anchor()
        # the reader is up the page, the older messages that reaching the top asked for are
        # in (their marker gone) and the view is back where the reader was
        await settle(pilot, app, lambda: not chat.query(".older")
                     and chat.scroll_y < chat.max_scroll_y - 1 and not chat._older_lock.locked())
        await pilot.pause()
        await say(pilot, "/model")
        await settle(pilot, app, lambda: bool(app.query(NewBelow)))
        assert "new below" in str(app.query_one(NewBelow).render())
        chat.scroll_end(animate=False, immediate=True)
        await settle(pilot, app, lambda: not app.query(NewBelow))


async def test_the_apps_compact_card_speaks_of_messages_not_seqs(store):
    from picochat.tui.chat import Notice
    from tests.helpers.conversations import long_session
    from tests.helpers.tui import SIZE, make_app, say, texts
    from tests.helpers.waiting import settle

    long_session(store)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/compact")
        await settle(pilot, app, lambda: any("Context compacted" in t
                                             for t in texts(app, Notice)))
        [card] = [t for t in texts(app, Notice) if "Context compacted" in t]
        [cp] = store.checkpoints(app.session.id)
        assert f"{cp.tokens_before:,} → {cp.tokens_after:,} tokens" in card
        assert f"messages {cp.first_retained_seq} onward as they are" in card
        assert "seq" not in card and "->" not in card and "cp_" not in card
