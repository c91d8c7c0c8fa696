"""Config changes without a restart (issue 35, item 6): `/reload`, or saving the file (an editor
in another pane), reads it again and what changed applies (the session reopens with it, the
transcript stays), said key by key; a file that does not load changes nothing."""

from __future__ import annotations

from picochat.config import CompactionConfig, Config, ModelConfig, ToolsConfig, config_changes
from picochat.paths import Paths
from tests.helpers.scripted import Hold, Streaming
from tests.helpers.tui import SIZE, make_app, say, texts
from tests.helpers.waiting import settle


def app_with_file(store, tmp_path, text: str):
    """An app whose config file (in `tmp_path`) holds `text`, read as at start."""
    paths = Paths(data_dir=tmp_path / "data", config_file=tmp_path / "config.toml",
                  log_file=tmp_path / "log")
    paths.config_file.write_text(text, encoding="utf-8")
    app = make_app(store)
    app.paths = paths
    app.config_loaded()
    return app, paths


def notices(app) -> list[str]:
    from picochat.tui.chat import Notice

    return texts(app, Notice)


def test_the_changes_are_said_key_by_key():
    old = Config(context_compaction=CompactionConfig(keep_recent_tokens=300))
    new = Config(models={"m": ModelConfig("m", "offline", token_limit=4096)},
                 context_compaction=CompactionConfig(keep_recent_tokens=300,
                                                     summary_model="offline"))
    assert config_changes(old, new) == [
        "context_compaction.summary_model: (unset) → \"offline\"",
        "models.m.model: (unset) → \"offline\"",
        "models.m.token_limit: (unset) → 4096",
    ]
    assert config_changes(new, new) == []
    # in the file's words: TOML's true and false, its strings and lists
    tools = Config(context_compaction=CompactionConfig(keep_recent_tokens=300, preview=True),
                   tools=ToolsConfig(enabled=["read_file"]))
    assert config_changes(old, tools) == [
        "context_compaction.preview: false → true",
        'tools.enabled: ["history_search", "timeline_recall", "read_file"] → ["read_file"]',
    ]


async def test_reload_applies_a_summary_model_set_in_the_file_and_refuses_a_bad_file(
        store, tmp_path):
    app, paths = app_with_file(store, tmp_path,
                               "[context_compaction]\nkeep_recent_tokens = 300\n")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/reload")
        await settle(pilot, app, lambda: any("has not changed" in n for n in notices(app)))
        assert app.worker.summary_model is None  # the chat model writes the summaries
        paths.config_file.write_text('[context_compaction]\nkeep_recent_tokens = 300\n'
                                     'summary_model = "offline"\n', encoding="utf-8")
        await say(pilot, "/reload")
        await settle(pilot, app, lambda: any(n.startswith("Reloaded") for n in notices(app)))
        [said] = [n for n in notices(app) if n.startswith("Reloaded")]
        assert "context_compaction.summary_model: (unset) → \"offline\"" in said
        assert app.worker.summary_model is not None and app.worker.summary_model.offline
        assert app.worker.info().summary_model is not None  # /info says it too
        paths.config_file.write_text("[context_compaction]\nkeep_recent_tokens = -1\n",
                                     encoding="utf-8")
        await say(pilot, "/reload")
        await settle(pilot, app, lambda: any(n.startswith("Not reloaded") for n in
                                             notices(app)))
        [bad] = [n for n in notices(app) if n.startswith("Not reloaded")]
        assert "keep_recent_tokens" in bad and "(line 2)" in bad
        assert app.config.context_compaction.summary_model == "offline"  # kept


def save(paths, text: str, stamp: int) -> None:
    """An editor in another pane saves the file; `stamp`: its modification time, unlike any
    before it however fast the test runs."""
    import os

    paths.config_file.write_text(text, encoding="utf-8")
    os.utime(paths.config_file, ns=(stamp, stamp))


async def test_a_config_file_saved_meanwhile_applies_unasked_once_nothing_runs(store, tmp_path):
    first = Hold("held", "done")
    app, paths = app_with_file(store, tmp_path, "[ui]\ntheme = \"picochat-dark\"\n")
    app.worker.provider = Streaming(turns=[first, "two"])
    waits = lambda: [str(n.message) for n in app._notifications  # noqa: E731
                     if "it applies once" in str(n.message)]
    applied = lambda: [n for n in notices(app) if "was saved; applied" in n]  # noqa: E731
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "hello")
        await settle(pilot, app, lambda: first.reached.is_set())
        save(paths, "[context_compaction]\nsummary_model = \"offline\"\n", 1)
        await settle(pilot, app, lambda: len(waits()) == 1, what="the wait was never said")
        assert "once the running answer ends" in waits()[0]
        assert app.worker.summary_model is None and not applied()  # not under a running turn
        first.release.set()
        await settle(pilot, app, lambda: len(applied()) == 1, what="never applied")
        assert "context_compaction.summary_model: (unset) → \"offline\"" in applied()[0]
        assert app.worker.summary_model is not None and app.worker.summary_model.offline
        assert len(waits()) == 1  # said once

        # a save that does not load: one line, the config in use stays; fixed, it applies
        save(paths, "[context_compaction]\nkeep_recent_tokens = -1\n", 2)
        bad = lambda: [n for n in notices(app) if "does not load" in n]  # noqa: E731
        await settle(pilot, app, lambda: len(bad()) == 1, what="the bad save was never said")
        assert "keep_recent_tokens" in bad()[0] and "(line 2)" in bad()[0]
        assert app.config.context_compaction.summary_model == "offline"
        save(paths, "[context_compaction]\nsummary_model = \"offline\"\n"
             "keep_recent_tokens = 500\n", 3)
        await settle(pilot, app, lambda: len(applied()) == 2)
        assert "context_compaction.keep_recent_tokens: 20000 → 500" in applied()[1]
        assert app.worker.compaction.keep_recent_tokens == 500  # the worker runs with it
        assert len(bad()) == 1

        # saved again unchanged: nothing to say
        save(paths, paths.config_file.read_text(encoding="utf-8"), 4)
        await settle(pilot, app, lambda: app._config_stamp == app._config_file_stamp())
        assert len(applied()) == 2 and len(bad()) == 1


async def test_a_save_under_an_open_window_waits_for_it_to_close(store, tmp_path):
    """Seen in tmux: a save made as /context closed was said to wait "once nothing runs"
    when nothing ran; a wait is said only when it lasts, and says what it waits for."""
    from picochat.tui.screens import CardScreen

    app, paths = app_with_file(store, tmp_path, "[ui]\ntheme = \"picochat-dark\"\n")
    waits = lambda: [str(n.message) for n in app._notifications  # noqa: E731
                     if "it applies once" in str(n.message)]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await pilot.press("f3")
        await settle(pilot, app, lambda: isinstance(app.screen, CardScreen))
        save(paths, "[context_compaction]\nsummary_model = \"offline\"\n", 1)
        await settle(pilot, app, lambda: len(waits()) == 1, what="the wait was never said")
        assert waits() == ["The config file changed: it applies once this window closes"]
        assert app.worker.summary_model is None
        await pilot.press("escape")
        await settle(pilot, app, lambda: app.worker.summary_model is not None,
                     what="never applied once the window closed")


async def test_the_app_s_own_theme_save_is_not_a_change_to_tell(store, tmp_path):
    app, paths = app_with_file(store, tmp_path, "[ui]\ntheme = \"picochat-dark\"\n")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/theme picochat-light")
        await settle(pilot, app, lambda: any("Theme: picochat-light" in n for n in notices(app)))
        await say(pilot, "hello")
        await settle(pilot, app, lambda: not app.worker.busy and len(store.history(
            app.session.id)) == 2)
        assert not [n for n in app._notifications if "config file changed" in str(n.message)]
        assert not [n for n in notices(app) if "was saved" in n]  # nor applied as a change
