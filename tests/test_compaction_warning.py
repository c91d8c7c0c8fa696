"""Compaction the user sees coming (issue 34, item 1).

Past 85 % of the auto-compaction point the bar says how many turns are left and that ctrl+k
compacts now, and one notice says so with how to steer the summary: once per crossing, not once
per turn. With auto-compaction off, the same warning says when the window fills. `/info` and
`picochat info --json` carry the same forecast.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from picochat.budget import SOFT_SHARE, Forecast, compaction_forecast
from picochat.config import CompactionConfig, Config, ModelConfig
from picochat.context_usage import forecast_text
from picochat.models import resolve_model
from picochat.providers.offline import OfflineProvider
from picochat.tui.app import PicochatApp
from picochat.tui.status import Figures, StatusBar, gauge_text
from tests.helpers.storage import append_message
from tests.helpers.waiting import settle


# --- the forecast --------------------------------------------------------------------------------

def test_below_the_soft_point_there_is_no_warning():
    assert compaction_forecast(840, 1000, True, [100, 100]) is None
    assert compaction_forecast(0, 0, True, []) is None


def test_past_it_the_turn_that_reaches_the_point_is_counted_from_recent_turns():
    # 150 left, turns of 100: the next turn leaves 50, the one after reaches it
    assert compaction_forecast(850, 1000, True, [100, 100, 100]) == Forecast(2, True)
    # only the last three turns count: an early huge paste does not hide the warning
    assert compaction_forecast(900, 1000, True, [5000, 10, 10, 10]) == Forecast(11, True)
    assert compaction_forecast(990, 1000, False, [100]) == Forecast(1, False)


def test_over_the_point_it_is_the_next_turn_and_before_any_turn_it_is_soon():
    assert compaction_forecast(1200, 1000, True, [50]) == Forecast(1, True)
    assert compaction_forecast(900, 1000, True, []) == Forecast(None, True)


@given(st.integers(1, 100_000), st.lists(st.integers(1, 5000), min_size=1, max_size=6),
       st.floats(SOFT_SHARE, 1.0))
def test_more_context_never_means_more_turns_left(threshold, turns, share):
    used = int(threshold * share)
    now = compaction_forecast(used, threshold, True, turns)
    later = compaction_forecast(used + max(turns), threshold, True, turns)
    if now is not None and now.in_turns is not None:
        assert later is not None and later.in_turns is not None
        assert 1 <= later.in_turns <= now.in_turns


def test_the_words():
    assert forecast_text(Forecast(3, True)) == "compacting in about 3 turns"
    assert forecast_text(Forecast(1, True)) == "compacting at the next turn"
    assert forecast_text(Forecast(None, True)) == "compacting soon"
    assert forecast_text(Forecast(4, False)) == "the window fills in about 4 turns"


def test_the_bar_says_it_first_and_keeps_it_as_it_narrows():
    figures = Figures(880, 1000, 2000, True, "compacting in about 2 turns")
    assert gauge_text(figures, 0) == ("context 88% full · compacting in about 2 turns · "
                                      "ctrl+k compacts now · window 2,000")
    assert "compacting in about 2 turns" in gauge_text(figures, 2)
    assert gauge_text(figures, 3) == "88%"
    over = Figures(1200, 1000, 2000, True, "compacting at the next turn")
    assert "over the 1,000 auto-compact point" in gauge_text(over, 0)  # as before


# --- in the app -----------------------------------------------------------------------------------

TINY = Config(models={"tiny": ModelConfig(name="tiny", model="offline", token_limit=3000)},
              context_compaction=CompactionConfig(reserve_tokens=1000, keep_recent_tokens=300))


def app_for(store, config: Config = TINY) -> PicochatApp:
    return PicochatApp(store, store.create_session("work"), resolve_model(config, "tiny"),
                       OfflineProvider(0), config)


def fill_to(app: PicochatApp, share: float) -> None:
    """Turns appended (as another process would) until the context passes `share` of the
    threshold; then the app reads its figures again."""
    store, sid = app.worker.store, app.session.id
    threshold = app.worker.info().budget.limits.threshold
    i = 0
    while app.worker.info().budget.used_tokens < share * threshold:
        append_message(store, sid, "user", f"Service {i} listens on port {8000 + i}. " * 6,
                       turn_id=f"t{i}")
        append_message(store, sid, "assistant", f"Noted: service {i} on {8000 + i}.",
                       turn_id=f"t{i}")
        i += 1
    app.refresh_status()


def notices(app: PicochatApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def warned(app: PicochatApp) -> list[str]:
    """The compaction warnings noticed so far."""
    return [n for n in notices(app) if "/compact FOCUS" in n]


def bar(app: PicochatApp) -> str:
    return str(app.query_one(StatusBar).render())


async def test_the_warning_shows_once_per_crossing_and_ctrl_k_compacts(store):
    app = app_for(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        fill_to(app, 0.5)
        assert "compacts now" not in bar(app) and not notices(app)
        fill_to(app, 0.9)
        await settle(pilot, app, lambda: "ctrl+k compacts now" in bar(app),
                     what="the bar never warned")
        assert "compacting in about" in bar(app) or "compacting at the next turn" in bar(app)
        await settle(pilot, app, lambda: warned(app), what="no notice")
        warned_now = warned(app)
        assert len(warned_now) == 1 and "ctrl+k compacts now" in warned_now[0]
        app.refresh_status()  # another turn's refresh: no second notice for this crossing
        await pilot.pause()
        assert len(warned(app)) == 1
        await pilot.press("ctrl+k")
        await settle(pilot, app, lambda: app.worker.info().checkpoint is not None,
                     what="ctrl+k never compacted")
        await settle(pilot, app, lambda: "compacts now" not in bar(app),
                     what="the warning stayed after the compaction")
        fill_to(app, 0.9)  # crossing again: said again
        await settle(pilot, app, lambda: len(warned(app)) == 2,
                     what="the second crossing was not said")


async def test_with_auto_compaction_off_it_warns_of_the_window(store):
    config = Config(models=TINY.models, context_compaction=CompactionConfig(
        enabled=False, reserve_tokens=1000, keep_recent_tokens=300))
    app = app_for(store, config)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        fill_to(app, 0.9)
        await settle(pilot, app, lambda: "the window fills" in bar(app),
                     what="no warning with auto-compaction off")
        await settle(pilot, app, lambda: any("The window fills" in n for n in notices(app)),
                     what="no notice with auto-compaction off")


def test_info_json_and_the_card_carry_the_forecast(cli_store, config_file, run_cli):
    config_file.parent.mkdir(parents=True)
    config_file.write_text('default_model = "tiny"\n[models.tiny]\nmodel = "offline"\n'
                           'token_limit = 3000\n[context_compaction]\nreserve_tokens = 1000\n'
                           "keep_recent_tokens = 300\n", encoding="utf-8")
    session = cli_store.create_session("work")
    append_message(cli_store, session.id, "user", "Our Redis runs on 6380.", turn_id="t0")
    quiet = json.loads(run_cli("info", "-s", "work", "--json").stdout)
    assert quiet["compaction_warning"] is None and quiet["compaction_in_turns"] is None
    i = 1
    while True:
        info = json.loads(run_cli("info", "-s", "work", "--json").stdout)
        if info["used_tokens"] >= 0.9 * info["compression_threshold_tokens"]:
            break
        for j in range(i, i + 3):
            append_message(cli_store, session.id, "user", f"Service {j} listens on port "
                           f"{8000 + j}. " * 6, turn_id=f"t{j}")
        i += 3
    assert info["compaction_in_turns"] >= 1
    assert info["compaction_warning"].startswith("compacting ")
    card = run_cli("info", "-s", "work").stdout
    assert f"({info['compaction_warning']})" in card  # the text card says the same


def test_one_pasted_log_among_the_recent_turns_does_not_say_the_next_turn():
    # 300 left; turns of 60 with one 1,200-token paste among the last three: the sixth turn,
    # not "at the next turn" (the mean, 440, said 1)
    assert compaction_forecast(3_700, 4_000, True, [60, 1_200, 60]) == Forecast(6, True)
