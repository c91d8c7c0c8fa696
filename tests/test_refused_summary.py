"""A summary the gate refuses is visible (issue 34, item 3): the checkpoint panel shows the last
one with the gate's reason and, folded, what the model wrote, until a summary passes. The
model's text is hostile: it is shown as plain text, never as markup or escapes."""

from __future__ import annotations

from textual.widgets import Static

from picochat.config import CompactionConfig, Config
from picochat.models import resolve_model
from picochat.tui.app import PicochatApp
from picochat.tui.panel import CheckpointPanel
from tests.helpers.scripted import Recorder, well_formed
from tests.helpers.conversations import seed
from tests.helpers.waiting import settle

CONFIG = Config(context_compaction=CompactionConfig(keep_recent_tokens=300))
JUNK = ("Sure! Here is what you talked about: [bold]ports[/bold] and \x1b[31mred\x1b[0m "
        "services. [@click=app.quit]Click[/] for more.")


def app_with(store, summaries: list) -> PicochatApp:
    session = store.create_session("demo")
    seed(store, session.id, 6)
    return PicochatApp(store, session, resolve_model(CONFIG, "offline"),
                       Recorder(summaries=summaries), CONFIG)


def shown(app: PicochatApp, part: str) -> str:
    return str(app.query_one(CheckpointPanel).query_one(part, Static).render())


def refused_shown(app: PicochatApp) -> bool:
    panel = app.query_one(CheckpointPanel)
    return bool(panel.children) and panel.query_one("#cp-refused").display


async def test_the_panel_shows_the_refused_summary_until_one_passes(store):
    app = app_with(store, [JUNK, well_formed("Track which port each service uses.",
                                             Exact_facts="- service 0 listens on 8000")])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await app.run_command("/compact")
        await settle(pilot, app, lambda: app.worker.refused is not None,
                     what="the summary was not refused")
        assert app.worker.info().checkpoint is None  # nothing committed
        await pilot.press("f2")
        await settle(pilot, app, lambda: refused_shown(app), what="the panel hid the refusal")
        why = shown(app, "#cp-refused")
        assert "None of the summary headings" in why or "none of the summary headings" in why
        assert "not used" in why
        assert "summary_model" in why  # what to do about it
        text = shown(app, "#cp-refused-text")
        assert "[bold]ports[/bold]" in text and "[@click=app.quit]" in text  # literally
        assert "\x1b" not in text
        await app.run_command("/compact")  # this one passes: the refusal is history
        await settle(pilot, app, lambda: app.worker.info().checkpoint is not None,
                     what="the second summary was not committed")
        await settle(pilot, app, lambda: not refused_shown(app),
                     what="the panel still shows the old refusal")
        assert app.worker.refused is None
        assert app.is_running  # the click action in the model's text never ran


async def test_a_refusal_while_the_panel_is_open_shows_at_once(store):
    app = app_with(store, [JUNK])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await pilot.press("f2")
        await settle(pilot, app, lambda: bool(app.query_one(CheckpointPanel).children))
        assert not refused_shown(app)
        await app.run_command("/compact")
        await settle(pilot, app, lambda: refused_shown(app),
                     what="an open panel did not show the refusal")
