"""Pictures of the app (pytest-textual-snapshot): the chat view, the checkpoint panel, the
/info card, the sessions list and the light theme. Ids and clocks are fixed so a picture
changes only when what the user sees changes. Update with `pytest --snapshot-update`."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from picochat.config import CompactionConfig, Config, ModelConfig, UiConfig
from picochat.models import resolve_model
from picochat.providers.base import ModelInfo, Provider
from picochat.providers.offline import OfflineProvider
from picochat.storage import context as context_module
from picochat.storage import rows as rows_module
from picochat.storage.store import open_store
from picochat.tui.app import PicochatApp
from picochat.tui.chat import ChatView, CheckpointDivider, UserMessage
from picochat.tui.panel import CheckpointPanel
from picochat.tui.pending import Pending
from picochat.tui.prompt import Prompt
from picochat.tui.screens import CardScreen
from picochat.tui.status import StatusBar
from tests.helpers.waiting import WAIT_S, settle
from tests.helpers.storage import append_message

SIZE = (110, 34)
CONFIG = Config(context_compaction=CompactionConfig(keep_recent_tokens=300))


class _CountingUUID:
    def __init__(self) -> None:
        self.n = itertools.count(1)

    def uuid4(self):
        value = next(self.n)
        return type("U", (), {"hex": f"{value:012x}" + "0" * 20})()


@pytest.fixture
def fixed_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ids = _CountingUUID()  # one count for session and checkpoint ids, as before the split
    monkeypatch.setattr(rows_module, "uuid", ids)  # session ids
    monkeypatch.setattr(context_module, "uuid", ids)
    ticks = itertools.count(1_796_000_000_000, 1_000)
    s = open_store(tmp_path / "snap.db", clock=lambda: next(ticks))
    yield s
    s.close()


def app_with_history(store, turns: int = 3, config: Config = CONFIG,
                     context: int = 12) -> PicochatApp:
    session = store.create_session("demo")
    for i in range(turns):
        append_message(store, session.id, "user", f"Question {i}: which port does service "
                       f"{i} use? " + "Some context. " * context, turn_id=f"t{i}")
        append_message(store, session.id, "assistant", f"Service **{i}** listens on port "
                       f"`{8000 + i}`.\n\n- started by `svc-{i}.service`\n- owner: "
                       "team blue", turn_id=f"t{i}")
    return PicochatApp(store, session, resolve_model(config, "offline"), OfflineProvider(0),
                       config)


def at_the_end(app: PicochatApp) -> bool:
    """The transcript is laid out and shows its newest line (it opens scrolled to the end)."""
    chat = app.query_one(ChatView)
    shown = [w for w in chat.children if w.display]
    if not shown or chat.region.height == 0:
        return False
    last, view = shown[-1].region, chat.region
    return last.height > 0 and view.y < last.bottom <= view.bottom


async def steady(pilot) -> None:
    """The picture has stopped changing: two looks at the screen, with the app's queues
    drained between them, show the same frame (a refresh scheduled after a layout, a footer
    recomposed for a narrow screen, a page of older messages: each would show as a change)."""
    app = pilot.app
    shot = None
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        now = app.export_screenshot()
        if now == shot:
            return
        assert asyncio.get_running_loop().time() < deadline, "the screen never held still"
        shot = now


async def compact(pilot) -> None:
    app = pilot.app
    future = app.worker.compact(None)
    await future
    await app.context_moved()
    # the divider drawn where the kept messages begin, and the view back at the end
    await settle(pilot, app, lambda: any(d.region.height for d in app.query(CheckpointDivider))
                 and at_the_end(app), what="no divider, or the view left the end")


def snap(snap_compare, app: PicochatApp, before=None, press=(), size=SIZE,
         shown=lambda app: True) -> bool:
    """Compare a picture taken after `before` and `press`, once `shown(app)` holds and the
    screen has stopped changing, with the prompt's cursor steady (a blinking cursor would make
    the picture depend on the moment it is taken)."""
    async def run_before(pilot) -> None:
        app = pilot.app
        app.query_one(Prompt).cursor_blink = False
        # the transcript mounted and the figures counted (tiktoken loads in a thread)
        await settle(pilot, app, lambda: app.ready and bar_counted(app), what="never ready")
        await settle(pilot, app, lambda: at_the_end(app), what="the transcript never settled")
        if before is not None:
            await before(pilot)
        await pilot.press(*press)
        await settle(pilot, app, lambda: shown(app), what="the picture never showed")
        await steady(pilot)

    return snap_compare(app, terminal_size=size, run_before=run_before)


def bar_counted(app: PicochatApp) -> bool:
    """The top bar shows the context's figures (not "counting…")."""
    return "counting" not in str(app.query_one(StatusBar).render())


def test_chat_view(snap_compare, fixed_store):
    assert snap(snap_compare, app_with_history(fixed_store))


@pytest.mark.parametrize("size", [(120, 40), (80, 24), (60, 24)])
def test_checkpoint_panel_after_compact(snap_compare, fixed_store, size):
    async def before(pilot) -> None:
        await compact(pilot)
        await pilot.press("f2")

    def shown(app) -> bool:  # open, filled, its list focused; the narrower transcript back
        panel = app.query_one(CheckpointPanel)  # at its very end after re-wrapping (under load
        chat = app.query_one(ChatView)          # the picture was once taken a line short)
        return (panel.is_open and panel.region.width > 0 and bool(panel.children)
                and "Summary 1" in str(panel.query_one("#cp-meta").render())
                and app.focused is panel.query_one("#cp-list")
                and chat.scroll_y >= chat.max_scroll_y)

    # enough context that a summary (with its ledger of ports and ids) is smaller than it
    assert snap(snap_compare, app_with_history(fixed_store, turns=6, context=60), before,
                size=size, shown=shown)


def test_info_card(snap_compare, fixed_store):
    assert snap(snap_compare, app_with_history(fixed_store), press=["f3"],
                shown=lambda app: isinstance(app.screen, CardScreen)
                and app.screen.title_text == "Context (/info)")


def test_sessions_list(snap_compare, fixed_store, monkeypatch):
    """`/sessions`: last active, size, model and how each began; typing filters."""
    import datetime as dt

    from picochat.tui import session_picker

    monkeypatch.setattr(session_picker, "ZONE", dt.timezone.utc)
    monkeypatch.setattr(session_picker, "clock",
                        lambda: dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.timezone.utc))
    older = fixed_store.create_session("older work")
    append_message(fixed_store, older.id, "user", "Which port does the staging Redis use?",
                   turn_id="o1")

    async def before(pilot) -> None:
        await pilot.app.run_command("/sessions")

    def shown(app) -> bool:
        return (isinstance(app.screen, session_picker.SessionPicker) and footer_drawn(app)
                and bool(app.screen.query("#sp-list"))
                and app.screen.query_one("#sp-list").option_count == 2)

    assert snap(snap_compare, app_with_history(fixed_store), before, shown=shown)


def test_light_theme(snap_compare, fixed_store):
    config = Config(context_compaction=CONFIG.context_compaction,
                    ui=UiConfig(theme="picochat-light"))
    assert snap(snap_compare, app_with_history(fixed_store, config=config))


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_first_run_welcome(snap_compare, fixed_store, size):
    """An empty session on the offline model: the welcome, the top bar and the prompt."""
    session = fixed_store.create_session("chat-1")
    app = PicochatApp(fixed_store, session, resolve_model(CONFIG, "offline"),
                      OfflineProvider(0), CONFIG)
    assert snap(snap_compare, app, size=size)


class _StillClock:
    """A monotonic clock that stands still: the elapsed time and the spinner frame a picture
    shows must not depend on the moment it is taken."""
    NOW = 1_000.0

    @staticmethod
    def monotonic() -> float:
        return _StillClock.NOW


@pytest.mark.parametrize("size", [(120, 40), (80, 24), (50, 24)])
def test_top_bar_while_answering(snap_compare, fixed_store, monkeypatch, size):
    """A question waiting for its answer with two more queued: the running state (spinner,
    elapsed time, what Esc does, the queue) and a short gauge share the top bar at every
    width from 50 columns, and the transcript shows the live line and the queued messages."""
    from picochat.tui import pending, status
    monkeypatch.setattr(status, "time", _StillClock)
    monkeypatch.setattr(pending, "time", _StillClock)
    app = app_with_history(fixed_store, turns=1)
    app.worker.provider = Unanswered()

    async def before(pilot) -> None:
        for n, text in enumerate(("first question", "second question", "third question")):
            prompt = pilot.app.query_one(Prompt)
            prompt.load_text(text)
            await pilot.press("enter")
            # sent, and shown under the one before it (the first answers nothing, so the two
            # after it wait in the queue, in order)
            await settle(pilot, pilot.app, lambda: len(pilot.app.query(UserMessage)) == n + 2)

    def shown(app) -> bool:  # the live line under the first, the other two marked queued
        users = app.query(UserMessage)
        return (app.worker.queued == 2 and bool(app.query(Pending))
                and all(u.has_class("queued") for u in users[-2:])
                and "2 queued" in str(app.query_one(StatusBar).render()))

    assert snap(snap_compare, app, before, size=size, shown=shown)


class Unanswered(Provider):
    """A model that never answers: the question waits until the app ends (no time runs)."""
    info = ModelInfo("test", "unanswered")

    async def stream(self, request):
        await asyncio.get_running_loop().create_future()  # never done; cancelled at exit
        yield  # an async generator, like every provider's stream


WARN_CONFIG = Config(models={"tiny": ModelConfig(name="tiny", model="offline",
                                                 token_limit=3000)},
                     context_compaction=CompactionConfig(reserve_tokens=1000,
                                                         keep_recent_tokens=300))


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_compaction_warning_in_the_bar(snap_compare, fixed_store, size):
    """Past 85 % of the auto-compaction point (issue 34): the bar and one notice say it is
    coming, that ctrl+k compacts now, and how to steer it."""
    session = fixed_store.create_session("demo")
    for i in range(19):
        append_message(fixed_store, session.id, "user", f"Service {i} listens on port "
                       f"{8000 + i}. " * 6, turn_id=f"t{i}")
        append_message(fixed_store, session.id, "assistant", f"Noted: service {i} on "
                       f"{8000 + i}.", turn_id=f"t{i}")
    app = PicochatApp(fixed_store, session, resolve_model(WARN_CONFIG, "tiny"),
                      OfflineProvider(0), WARN_CONFIG)
    usage = app.worker.info()
    assert 0.85 <= usage.budget.used_tokens / usage.budget.limits.threshold < 1  # the setup

    def shown(app) -> bool:
        return ("compacting" in str(app.query_one(StatusBar).render())
                and any("/compact FOCUS" in str(n.message) for n in app._notifications))

    assert snap(snap_compare, app, size=size, shown=shown)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_checkpoint_panel_with_a_refused_summary(snap_compare, fixed_store, size):
    """The gate refused the model's summary (issue 34): the panel says why, what to do, and
    folds what the model wrote."""
    from tests.helpers.conversations import seed
    from tests.helpers.scripted import Recorder

    session = fixed_store.create_session("demo")
    seed(fixed_store, session.id, 6)
    junk = "Sure! Here is what you talked about: ports and services."
    app = PicochatApp(fixed_store, session, resolve_model(CONFIG, "offline"),
                      Recorder(summaries=[junk]), CONFIG)

    async def before(pilot) -> None:
        await pilot.app.run_command("/compact")
        await settle(pilot, pilot.app, lambda: pilot.app.worker.refused is not None,
                     what="the summary was not refused")
        await pilot.press("f2")

    def shown(app) -> bool:
        panel = app.query_one(CheckpointPanel)
        return (panel.is_open and bool(panel.children) and panel.query_one("#cp-refused").display
                and app.focused is panel.query_one("#cp-list"))

    assert snap(snap_compare, app, before, size=size, shown=shown)


def footer_drawn(app: PicochatApp) -> bool:
    """The chat screen's footer, under a modal, has its keys again (it is recomposed after the
    focus moves, a beat after the modal is drawn)."""
    from textual.widgets import Footer

    keys = [k for footer in app.screen.query(Footer) for k in footer.children] or \
        list(app.screen_stack[0].query_one(Footer).children)
    return bool(keys) and all(k.region.width > 0 for k in keys)


def preview_app(store, summary: str) -> PicochatApp:
    from tests.helpers.conversations import plant_services
    from tests.helpers.scripted import Recorder

    session = store.create_session("demo")
    plant_services(store, session.id, 12)
    return PicochatApp(store, session, resolve_model(CONFIG, "offline"),
                       Recorder(summaries=[summary]), CONFIG)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_compaction_preview(snap_compare, fixed_store, size):
    """`/compact --preview` (issue 34): what it folds, tokens before and after, the gate's
    verdict, the facts it adds, and the summary, before anything is written."""
    from picochat.tui.compaction_preview import PreviewScreen
    from tests.helpers.scripted import well_formed

    app = preview_app(fixed_store, well_formed(
        "Run the twelve services, each on its own port.",
        Decisions="- one config file per service, under /etc/svc"))

    async def before(pilot) -> None:
        await pilot.app.run_command("/compact --preview")

    assert snap(snap_compare, app, before, size=size,
                shown=lambda app: isinstance(app.screen, PreviewScreen) and footer_drawn(app))


def test_summary_editor_with_an_edit_the_gate_refuses(snap_compare, fixed_store):
    """The summary editor after ctrl+s on a text the gate refuses: the reason under it."""
    from textual.widgets import TextArea

    from picochat.tui.compaction_preview import PreviewScreen, SummaryEditor
    from tests.helpers.scripted import well_formed

    app = preview_app(fixed_store, well_formed("Run the twelve services."))

    async def before(pilot) -> None:
        app = pilot.app
        await app.run_command("/compact --preview")
        await settle(pilot, app, lambda: isinstance(app.screen, PreviewScreen))
        await pilot.press("e")
        await settle(pilot, app, lambda: isinstance(app.screen, SummaryEditor))
        editor = app.screen.query_one("#ed-text", TextArea)
        editor.cursor_blink = False
        editor.load_text("Sure! We talked about the twelve services and their ports.\n"
                         "Each one has its own config file.")
        await pilot.press("ctrl+s")

    def shown(app) -> bool:
        return (isinstance(app.screen, SummaryEditor) and footer_drawn(app)
                and "Refused" in str(app.screen.query_one("#ed-verdict").render()))

    assert snap(snap_compare, app, before, size=(120, 40), shown=shown)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_context_bar(snap_compare, fixed_store, size):
    """`/context` (issue 34): one stacked bar of the window and a table of its parts."""
    from picochat.tui.context_view import ContextScreen

    async def before(pilot) -> None:
        await compact(pilot)
        await pilot.app.run_command("/context")

    def shown(app) -> bool:
        return (isinstance(app.screen, ContextScreen) and bool(app.screen.query("#ctx-bar"))
                and footer_drawn(app))

    assert snap(snap_compare, app_with_history(fixed_store, turns=6, context=60), before, size=size,
                shown=shown)


def test_a_wide_code_block_scrolled_to_its_end(snap_compare, fixed_store):
    """Issue 35.8: a code line wider than the screen, selected and scrolled to its end (the
    focus mark, the thin bar under it, ←→ in the footer)."""
    from picochat.tui.answer import CodeFence

    session = fixed_store.create_session("demo")
    wide = "ports = [" + ", ".join(str(8000 + i) for i in range(40)) + "]  # LAST-PORT"
    append_message(fixed_store, session.id, "user", "Which ports?", turn_id="t0")
    append_message(fixed_store, session.id, "assistant",
                   f"These:\n\n```python\n{wide}\nshort = 1\n```\n\nThat is all.", turn_id="t0")
    app = PicochatApp(fixed_store, session, resolve_model(CONFIG, "offline"),
                      OfflineProvider(0), CONFIG)

    def shown(app) -> bool:
        fence = app.query_one(CodeFence)
        return app.focused is fence and fence.scroll_x == fence.max_scroll_x > 0

    assert snap(snap_compare, app, press=["alt+up", "end"], size=(80, 24), shown=shown)


async def edit_the_second_question(pilot) -> None:
    """Issue 36: alt+↑, up to the second question, e, an edit, Enter: a new branch."""
    from picochat.tui.chat import Notice, UserMessage

    app = pilot.app
    await pilot.press("alt+up")
    while not (isinstance(app.focused, UserMessage) and app.focused.text.startswith(
            "Question 1")):
        await pilot.press("up")
    await pilot.press("e", "end", *" (asked again)", "enter")
    await settle(pilot, app, lambda: app.session.branch == 1 and not app.worker.busy
                 and any(str(n.render()).startswith("Branch 1 starts here")
                         for n in app.query(Notice))
                 and at_the_end(app), what="the edit never became a branch")


def test_a_new_branch_in_the_transcript_and_the_panel(snap_compare, fixed_store):
    """Issue 36: the notice where the branch starts, the bar naming it, and the panel's list
    of branches."""
    async def before(pilot) -> None:
        await edit_the_second_question(pilot)
        await pilot.press("f2")

    def shown(app) -> bool:
        panel = app.query_one(CheckpointPanel)
        return (panel.is_open and bool(panel.query("#cp-branches"))
                and panel.query_one("#cp-branches").display
                and "leaves branch 0" in str(panel.query_one("#cp-branches").render()))

    assert snap(snap_compare, app_with_history(fixed_store), before, size=(120, 40),
                shown=shown)


def test_the_branch_picker(snap_compare, fixed_store, monkeypatch):
    """Issue 36: ctrl+b lists the branches: where each leaves, its turns, how it began."""
    import datetime as dt

    from picochat.tui import session_picker
    from picochat.tui.branch_picker import BranchPicker

    monkeypatch.setattr(session_picker, "ZONE", dt.timezone.utc)
    monkeypatch.setattr(session_picker, "clock",
                        lambda: dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.timezone.utc))

    async def before(pilot) -> None:
        await edit_the_second_question(pilot)
        await pilot.press("ctrl+b")

    def shown(app) -> bool:
        return (isinstance(app.screen, BranchPicker) and footer_drawn(app)
                and app.screen.query_one("#bp-list").option_count == 2)

    assert snap(snap_compare, app_with_history(fixed_store), before, size=(80, 24),
                shown=shown)
