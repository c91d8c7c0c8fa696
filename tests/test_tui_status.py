"""The top bar (issue 22, items 3 and 10): at 120, 80 and 50 columns what runs (spinner,
elapsed time, what Esc does, the queued count) stays on screen in full while the session and
model names and the gauge's words give way; the gauge keeps at least its percentage; the full
line names its three numbers; and the gauge is legible (WCAG 4.5:1) in every bundled theme."""

from __future__ import annotations

import asyncio
import re

import pytest
from rich.cells import cell_len
from textual.app import App, ComposeResult
from textual.color import Color

from picochat.config import CompactionConfig, Config, ModelConfig, UiConfig
from picochat.models import resolve_model
from picochat.providers.offline import OfflineProvider
from picochat.tui.app import PicochatApp
from picochat.tui.status import StatusBar
from picochat.tui.themes import bundled_dir, load_themes
from tests.helpers.conversations import long_session
from tests.helpers.scripted import Hold, Recorder, Streaming, waiter
from tests.helpers.tui import contrast, say, type_keys
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message

WIDTHS = (120, 80, 50)
SPIN = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"  # a braille spinner: any frame of it
TINY = Config(models={"tiny": ModelConfig(name="tiny", model="offline", token_limit=3000)},
              context_compaction=CompactionConfig(reserve_tokens=1000, keep_recent_tokens=300))


def bar_row(app) -> str:
    """The bar as the terminal shows it: its row, cut at the screen's edge."""
    return "".join(segment.text for segment in app.query_one(StatusBar).render_line(0))


def fits(app, width: int) -> bool:
    """Nothing of the bar's line is cut at the screen's edge."""
    return cell_len(str(app.query_one(StatusBar).render()).rstrip()) <= width


def running_for_a_second(app) -> bool:
    """The bar's state (today's words or the app's older line) says 1 s or more, 2 queued."""
    return bool(re.search(r"[1-9]\d*s .*2 queued", app.query_one(StatusBar).state))


def spinning(row: str) -> bool:
    return any(frame in row for frame in SPIN)


async def queue_two_and_read_the_bar(pilot, app, typed: str) -> str:
    """Type two messages behind what runs; once it has run a second, the bar's row."""
    type_keys(app, typed)
    await settle(pilot, app, lambda: app.worker.queued == 2)
    await settle(pilot, app, lambda: running_for_a_second(app))
    # and the row as the terminal shows it says so too
    await settle(pilot, app, lambda: re.search(r"[1-9]\d*s .*2 queued", bar_row(app)),
                 what="the bar's row never showed the time and the queue")
    return bar_row(app)


@pytest.mark.parametrize("width", WIDTHS)
async def test_an_answer_and_two_queued_messages_stay_in_the_bar(store, width):
    """The default window (128,000) and a long session name: at 120 columns "queued" was
    cut, at 80 "answering…" was, at 50 the gauge too."""
    hold = Hold("the first answer starts here", "and ends")
    app = PicochatApp(store, store.create_session("release planning for the spring"),
                      resolve_model(Config(), "offline"), Streaming(turns=[hold]), Config())
    async with app.run_test(size=(width, 24)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "question one")
        await settle(pilot, app, hold.reached.is_set)
        row = await queue_two_and_read_the_bar(pilot, app, "question two\nquestion three\n")
        assert re.search(r"answering…? [1-9]\d*s · 2 queued", row), row
        assert spinning(row), row
        assert fits(app, width), str(app.query_one(StatusBar).render())
        usage = app.worker.info().budget
        if width >= 80:
            assert "answering… " in row  # the full words
        if width == 120:
            assert f"{usage.used_tokens:,}/{usage.limits.threshold:,} tokens" in row
            assert f"window {usage.limits.window:,}" in row
            assert "release planning" in row
        else:  # the gauge shortens: percentage and figures in thousands
            assert re.search(r"\b\d+% · \d+(\.\d)?k?/\d+(\.\d)?k\b", row), row
        hold.release.set()
        await settle(pilot, app, lambda: app.worker.queued == 0 and not app.worker.busy)


@pytest.mark.parametrize("width", WIDTHS)
async def test_an_auto_compaction_says_what_esc_does_with_queued_messages(store, width):
    release = asyncio.Event()
    summarizing = asyncio.Event()
    app = PicochatApp(store, long_session(store), resolve_model(TINY, "tiny"),
                      Recorder(summaries=[waiter(release, then=summarizing.set)]), TINY)
    async with app.run_test(size=(width, 24)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "one more question")  # over the threshold: compacts first
        await settle(pilot, app, summarizing.is_set)
        row = await queue_two_and_read_the_bar(pilot, app, "second\nthird\n")
        assert re.search(r"compacting…? [1-9]\d*s · Esc cancels · 2 queued", row), row
        assert spinning(row), row
        assert re.search(r"\b\d+%", row), row  # the gauge, if only its percentage
        assert fits(app, width), str(app.query_one(StatusBar).render())
        if width >= 80:
            assert "compacting… " in row and "tiny" in row
        release.set()
        await settle(pilot, app, lambda: not app.worker.busy and app.worker.queued == 0)
        # the worker is idle before the app has shown the last turn's end: wait for the bar
        # to say nothing runs (a busy machine once read it between the two)
        await settle(pilot, app, lambda: app.query_one(StatusBar).state == ""
                     and "compacting" not in bar_row(app))
        assert not spinning(bar_row(app))


async def test_the_full_line_names_the_gauges_three_numbers(store):
    app = PicochatApp(store, store.create_session("chat-1"), resolve_model(TINY, "tiny"),
                      OfflineProvider(0), TINY)
    async with app.run_test(size=(120, 24)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        b = app.worker.info().budget
        pct = round(100 * b.used_tokens / b.limits.threshold)
        assert (f"context {pct}% full · {b.used_tokens:,} of {b.limits.threshold:,} tokens "
                f"before auto-compact · window {b.limits.window:,}") in bar_row(app)
        assert bar_row(app).lstrip().startswith("picochat · chat-1 · tiny  offline ")


async def test_past_the_auto_compact_point_the_line_says_so_rather_than_a_percentage_full(
        store):
    """A context over the threshold (a window learned smaller, a long paste) once read
    "context 189% full · 1,932 of 1,024 tokens before auto-compact": now what it is."""
    app = PicochatApp(store, filled(store, "over", 2_600), resolve_model(TINY, "tiny"),
                      OfflineProvider(0), TINY)
    async with app.run_test(size=(120, 24)) as pilot:
        await settle(pilot, app, lambda: app.ready)
        b = app.worker.info().budget
        assert b.used_tokens > b.limits.threshold  # the case it means
        row = bar_row(app)
        assert (f"context {b.used_tokens:,} tokens, over the {b.limits.threshold:,} "
                f"auto-compact point · window {b.limits.window:,}") in row, row
        assert "% full" not in row


class BarOnly(App):
    def compose(self) -> ComposeResult:
        yield StatusBar()


class _StillClock:
    """A monotonic clock that stands still: the countdown a row shows must not depend on how
    long a busy machine takes between setting the retry and reading the row."""
    NOW = 1_000.0

    @staticmethod
    def monotonic() -> float:
        return _StillClock.NOW


async def test_the_app_can_drive_the_bar_by_setting_its_attributes(monkeypatch):
    """The attributes the app sets (no refresh call): a retry countdown at 50 columns."""
    from picochat.tui import status
    monkeypatch.setattr(status, "time", _StillClock)
    app = BarOnly()
    async with app.run_test(size=(50, 3)) as pilot:
        bar = app.query_one(StatusBar)
        bar.session_name, bar.model_name, bar.offline = "notes", "gpt-4.1", False
        bar.used, bar.threshold, bar.window = 45_210, 111_616, 128_000
        bar.activity, bar.stoppable, bar.queued = "waiting", True, 3
        bar.retry_at = bar.started + 20
        await settle(pilot, app, lambda: "3 queued" in bar_row(app),
                     what="the bar never showed what was set")
        row = bar_row(app)
        assert re.search(r"retry in (19|20)s · Esc stops · 3 queued", row), row
        assert "41%" in row and spinning(row)
        bar.activity, bar.queued = "", 0
        # idle: the names come back into the row (the positive witness of its new layout)
        await settle(pilot, app, lambda: "notes · gpt-4.1" in bar_row(app),
                     what="the bar never showed the idle line")
        row = bar_row(app)
        assert "retry" not in row and not spinning(row)
        assert "notes · gpt-4.1" in row and "41% · 45k/112k" in row


# --- item 10: the gauge's contrast --------------------------------------------------------------

def filled(store, name: str, words: int):
    session = store.create_session(name)
    append_message(store, session.id, "user", "fill " * words, turn_id="t1")
    append_message(store, session.id, "assistant", "ok", turn_id="t1")
    return session


THEMES = [theme.name for theme in load_themes(bundled_dir())[0]]


def gauge_part(text: str) -> bool:
    """A piece of the bar's row that is the gauge: its figures, or its warning (issue 34)."""
    return "tokens" in text or "% full" in text


@pytest.mark.parametrize("theme", THEMES)
async def test_the_gauge_is_legible_in_every_bundled_theme(store, theme):
    """Green (under 70% of the threshold), yellow (under 100%) and red (over), each against
    the bar's background as the screen paints them: at least 4.5:1 (WCAG AA)."""
    assert contrast((0x77, 0x77, 0x77), (255, 255, 255)) == pytest.approx(4.48, abs=0.01)
    config = Config(models=TINY.models, context_compaction=TINY.context_compaction,
                    ui=UiConfig(theme=theme))
    for name, words, low, high in (("ok", 10, 0.0, 0.7), ("near", 1_600, 0.7, 1.0),
                                   ("over", 2_600, 1.0, 9.0)):
        app = PicochatApp(store, filled(store, name, words), resolve_model(config, "tiny"),
                          OfflineProvider(0), config)
        async with app.run_test(size=(120, 24)) as pilot:
            await settle(pilot, app, lambda: app.ready)
            await settle(pilot, app, lambda: any(  # the gauge drawn with its figures
                gauge_part(s.text) for s in app.query_one(StatusBar).render_line(0)),
                what="the gauge never showed its figures")
            b = app.worker.info().budget
            assert low <= b.used_tokens / b.limits.threshold < high  # the case it means
            gauge = [s for s in app.query_one(StatusBar).render_line(0) if gauge_part(s.text)]
            assert gauge
            for segment in gauge:
                fg = segment.style.color.get_truecolor(app.ansi_theme)
                bg = segment.style.bgcolor.get_truecolor(app.ansi_theme)
                ratio = contrast(tuple(fg), tuple(bg))
                assert ratio >= 4.5, f"{theme} {name}: {segment.style} is {ratio:.2f}:1"


TEXT_COLOURS = ("warning", "error", "success", "primary", "secondary")  # written as text
GROUNDS = ("background", "surface", "panel")                           # what it is written on


@pytest.mark.parametrize("theme", load_themes(bundled_dir())[0], ids=lambda t: t.name)
def test_every_text_colour_of_a_bundled_theme_is_legible_on_every_ground(theme):
    """A warning line (an answer cut at the output limit), an error, the panel's titles: each
    at least 4.5:1 (WCAG AA) on the transcript, the panel and the cards alike."""
    for name in TEXT_COLOURS:
        fg = Color.parse(getattr(theme, name)).rgb
        for ground in GROUNDS:
            bg = Color.parse(getattr(theme, ground)).rgb
            ratio = contrast(fg, bg)
            assert ratio >= 4.5, f"{theme.name}: {name} on {ground} is {ratio:.2f}:1"
