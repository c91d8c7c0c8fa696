"""The compaction preview in the app (issue 34, item 2): `/compact --preview` shows what would
be folded, the summary, the facts and the gate's verdict; Enter commits exactly that, `e` edits
the summary through the same gate, Esc drops it. With `[context_compaction] preview = true`
every automatic compaction is such a preview first."""

from __future__ import annotations

from textual.widgets import Static, TextArea

from picochat.config import CompactionConfig, Config, ModelConfig
from picochat.models import resolve_model
from picochat.tui.app import PicochatApp
from picochat.tui.compaction_preview import PreviewScreen, SummaryEditor
from tests.helpers.conversations import plant_services, seed
from tests.helpers.scripted import Recorder, well_formed
from tests.helpers.storage import append_message
from picochat.tui.turn_view import REVIEWING
from tests.helpers.tui import chat_once, screen, status
from tests.helpers.waiting import settle

CONFIG = Config(context_compaction=CompactionConfig(keep_recent_tokens=300))
SUMMARY = well_formed("Run the services on their ports.")
JUNK = "Sure! Here is what you talked about: [bold]ports[/bold] and services."


def app_with(store, summaries, config=CONFIG, model="offline", turns=12,
             chatter=0) -> PicochatApp:
    """A session of `turns` turns that each state facts, then `chatter` turns of filler."""
    session = store.create_session("demo")
    plant_services(store, session.id, turns)
    seed(store, session.id, chatter, start=turns)
    return PicochatApp(store, session, resolve_model(config, model),
                       Recorder(summaries=list(summaries)), config)


def on_top(app, kind) -> bool:
    return isinstance(app.screen, kind) and app.screen.is_mounted


def part(app, selector) -> str:
    """What a part of the screen on top reads, as plain text (the rows are a grid)."""
    from rich.console import Console

    shown = app.screen.query_one(selector, Static).render()
    inner = getattr(shown, "_renderable", shown)  # a rich renderable Textual wraps
    if isinstance(getattr(inner, "plain", None), str):
        return inner.plain
    console = Console(width=96, color_system=None, record=True, file=open("/dev/null", "w"))
    console.print(inner)
    return console.export_text()


def notices(app) -> list[str]:
    return [text for kind, text in screen(app) if kind == "notice"]


async def open_preview(pilot, app, command="/compact --preview"):
    await settle(pilot, app, lambda: app.ready)
    await app.run_command(command)
    await settle(pilot, app, lambda: on_top(app, PreviewScreen), what="no preview was shown")
    await pilot.pause()


async def test_enter_commits_exactly_the_summary_the_preview_showed(store):
    app = app_with(store, [SUMMARY])
    async with app.run_test(size=(120, 40)) as pilot:
        await open_preview(pilot, app)
        rows = part(app, "#pv-rows")
        assert "Folds" in rows and "Gate" in rows and "passed" in rows
        assert "Run the services on their ports." in part(app, "#pv-summary")
        assert "+ #" in part(app, "#pv-facts") and "listens on port" in part(app, "#pv-facts")
        assert store.active_checkpoint(app.session.id) is None  # nothing yet
        shown = app.screen.preview
        await pilot.press("enter")
        await settle(pilot, app, lambda: store.active_checkpoint(app.session.id) is not None,
                     what="Enter did not commit")
        cp = store.active_checkpoint(app.session.id)
        assert cp.summary == shown.summary and cp.ledger.rows == shown.ledger.rows
        await settle(pilot, app, lambda: any("Context compacted" in n for n in notices(app)))


async def test_esc_drops_it_and_nothing_is_written(store):
    app = app_with(store, [SUMMARY])
    async with app.run_test(size=(120, 40)) as pilot:
        await open_preview(pilot, app)
        await pilot.press("escape")
        await settle(pilot, app, lambda: any("Preview dropped" in n for n in notices(app)))
        assert store.active_checkpoint(app.session.id) is None
        assert store.compaction_wait(app.session.id) is None  # /compact is not held back
        assert app.is_running and not on_top(app, PreviewScreen)


async def test_an_edit_the_gate_refuses_stays_with_its_reason_and_a_fixed_one_commits(store):
    app = app_with(store, [SUMMARY])
    async with app.run_test(size=(120, 40)) as pilot:
        await open_preview(pilot, app)
        await pilot.press("e")
        await settle(pilot, app, lambda: on_top(app, SummaryEditor))
        editor = app.screen.query_one("#ed-text", TextArea)
        assert "Run the services on their ports." in editor.text
        editor.load_text(JUNK)
        await pilot.press("ctrl+s")
        await settle(pilot, app, lambda: "Refused:" in part(app, "#ed-verdict"),
                     what="the gate's reason was not shown")
        assert on_top(app, SummaryEditor)  # the edit stays, to be fixed
        editor.load_text(SUMMARY.replace("Run the services", "Run the twelve services"))
        await pilot.press("ctrl+s")
        await settle(pilot, app, lambda: on_top(app, PreviewScreen))
        await settle(pilot, app, lambda: "your edit" in part(app, "#pv-rows"))
        assert "Run the twelve services" in part(app, "#pv-summary")
        await pilot.press("enter")
        await settle(pilot, app, lambda: store.active_checkpoint(app.session.id) is not None)
        assert "Run the twelve services" in store.active_checkpoint(app.session.id).summary


async def test_a_refused_model_summary_cannot_be_committed_but_can_be_fixed(store):
    app = app_with(store, [JUNK], turns=3, chatter=12)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_preview(pilot, app)
        assert "refused" in part(app, "#pv-rows")
        assert "[bold]ports[/bold]" in part(app, "#pv-summary")  # literally, not as markup
        await pilot.press("enter")  # refused: Enter commits nothing
        await settle(pilot, app, lambda: any("The gate refused this summary" in str(n.message)
                                             for n in app._notifications))
        assert on_top(app, PreviewScreen)
        assert store.active_checkpoint(app.session.id) is None
        await pilot.press("e")
        await settle(pilot, app, lambda: on_top(app, SummaryEditor))
        assert "Refused:" in part(app, "#ed-verdict")  # why, before any edit
        assert "ctrl+r" in part(app, "#ed-verdict")  # and a way out
        await pilot.press("ctrl+r")  # picochat's own extract of the same turns
        editor = app.screen.query_one("#ed-text", TextArea)
        await settle(pilot, app, lambda: editor.text.startswith("## Objective"))
        assert "listens on port" in editor.text
        assert "Refused" not in part(app, "#ed-verdict")
        await pilot.press("ctrl+s")
        await settle(pilot, app, lambda: on_top(app, PreviewScreen))
        await pilot.press("enter")
        await settle(pilot, app, lambda: store.active_checkpoint(app.session.id) is not None)


async def test_a_turn_that_arrives_after_the_preview_makes_it_stale(store):
    app = app_with(store, [SUMMARY])
    async with app.run_test(size=(120, 40)) as pilot:
        await open_preview(pilot, app)
        # another picochat (or a queued message) writes a turn while the preview is open
        append_message(store, app.session.id, "user", "Also: the cache runs on 6380.",
                       turn_id="late")
        await pilot.press("enter")
        await settle(pilot, app, lambda: any("stale" in n for n in notices(app)),
                     what="the stale preview was not said")
        [line] = [n for n in notices(app) if "stale" in n]
        assert "1 new message since" in line and "/compact --preview again" in line
        assert store.active_checkpoint(app.session.id) is None


async def test_ctrl_k_does_nothing_over_the_preview(store):
    app = app_with(store, [SUMMARY, SUMMARY])
    async with app.run_test(size=(120, 40)) as pilot:
        await open_preview(pilot, app)
        await pilot.press("ctrl+k")
        await pilot.press("escape")
        await settle(pilot, app, lambda: any("Preview dropped" in n for n in notices(app)))
        await settle(pilot, app, lambda: not app.worker.busy)
        assert store.active_checkpoint(app.session.id) is None  # no /compact ran


# --- automatic compaction as a preview --------------------------------------------------------

TURNS = 50
TINY = {"tiny": ModelConfig(name="tiny", model="offline", token_limit=3000)}
APPROVE = Config(models=TINY, context_compaction=CompactionConfig(
    reserve_tokens=1000, keep_recent_tokens=300, preview=True))


def over_threshold(store) -> PicochatApp:
    app = app_with(store, [SUMMARY], APPROVE, "tiny", turns=TURNS)
    assert app.worker.info().budget.should_compact(True)
    return app


async def send(pilot, app, text):
    from tests.helpers.tui import say

    await settle(pilot, app, lambda: app.ready)
    await say(pilot, text)


async def test_with_preview_on_an_automatic_compaction_waits_for_enter(store):
    app = over_threshold(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, app, "one more question")
        await settle(pilot, app, lambda: on_top(app, PreviewScreen),
                     what="the automatic compaction was not shown first")
        assert "Automatic compaction" in str(app.screen.query_one("#pv-box").border_title)
        await settle(pilot, app, lambda: status(app).startswith(REVIEWING),
                     what="the bar did not say the compaction waits for the user")
        assert store.active_checkpoint(app.session.id) is None
        assert len(store.history(app.session.id)) == 2 * TURNS + 1  # the turn waits
        await pilot.press("enter")
        await settle(pilot, app, lambda: not app.worker.busy and len(
            store.history(app.session.id)) == 2 * TURNS + 2, what="the turn did not go on")
        cp = store.active_checkpoint(app.session.id)
        assert cp is not None and cp.trigger_reason == "auto"


async def test_a_dropped_automatic_preview_lets_the_turn_go_on_and_does_not_ask_again(store):
    app = over_threshold(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, app, "one more question")
        await settle(pilot, app, lambda: on_top(app, PreviewScreen))
        await pilot.press("escape")
        await settle(pilot, app, lambda: not app.worker.busy and len(
            store.history(app.session.id)) == 2 * TURNS + 2, what="the turn did not go on")
        assert store.active_checkpoint(app.session.id) is None
        await settle(pilot, app, lambda: any("dropped its preview" in str(n.message)
                                             for n in app._notifications))
        await chat_once(pilot, app, store, "and another")  # not asked again at once
        assert not on_top(app, PreviewScreen)
        assert store.active_checkpoint(app.session.id) is None
