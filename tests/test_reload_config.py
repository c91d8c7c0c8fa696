"""`/reload` (issue 35, item 6): the config file is read again and what changed applies at once
(the session reopens with it), said key by key; a file that does not load changes nothing."""

from __future__ import annotations

from picochat.config import CompactionConfig, Config, ModelConfig, config_changes
from picochat.paths import Paths
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
        "context_compaction.summary_model: (unset) → 'offline'",
        "models.m.model: (unset) → 'offline'",
        "models.m.token_limit: (unset) → 4096",
    ]
    assert config_changes(new, new) == []


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
        assert "context_compaction.summary_model: (unset) → 'offline'" in said
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


async def test_a_config_file_changed_meanwhile_is_said_once_with_what_applies_it(store, tmp_path):
    import os

    app, paths = app_with_file(store, tmp_path, "[ui]\ntheme = \"picochat-dark\"\n")
    changed = lambda: [str(n.message) for n in app._notifications  # noqa: E731
                       if "The config file changed" in str(n.message)]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/info")
        await pilot.press("escape")
        assert changed() == []  # nothing changed: nothing said
        paths.config_file.write_text("[context_compaction]\nsummary_model = \"offline\"\n",
                                     encoding="utf-8")
        os.utime(paths.config_file, ns=(1, 1))  # a stamp unlike the first, however fast
        await say(pilot, "hello")
        await settle(pilot, app, lambda: len(changed()) == 1)
        await say(pilot, "again")
        await settle(pilot, app, lambda: not app.worker.busy)
        assert len(changed()) == 1  # once per change
        await say(pilot, "/reload")
        await settle(pilot, app, lambda: any(n.startswith("Reloaded") for n in notices(app)))
        assert app.worker.summary_model is not None


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
