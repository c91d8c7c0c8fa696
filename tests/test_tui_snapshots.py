"""Pictures of the app (pytest-textual-snapshot): the chat view, the checkpoint panel, the
/info card, the sessions list and the light theme. Ids and clocks are fixed so a picture
changes only when what the user sees changes. Update with `pytest --snapshot-update`."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from picochat.config import CompactionConfig, Config, UiConfig
from picochat.models import resolve_model
from picochat.providers.offline import OfflineProvider
from picochat.storage import store as store_module
from picochat.storage.store import open_store
from picochat.tui.app import PicochatApp
from picochat.tui.prompt import Prompt

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
    monkeypatch.setattr(store_module, "uuid", _CountingUUID())
    ticks = itertools.count(1_796_000_000_000, 1_000)
    s = open_store(tmp_path / "snap.db", clock=lambda: next(ticks))
    yield s
    s.close()


def app_with_history(store, turns: int = 3, config: Config = CONFIG,
                     context: int = 12) -> PicochatApp:
    session = store.create_session("demo")
    for i in range(turns):
        store.append_message(session.id, "user", f"Question {i}: which port does service "
                             f"{i} use? " + "Some context. " * context, turn_id=f"t{i}")
        store.append_message(session.id, "assistant", f"Service **{i}** listens on port "
                             f"`{8000 + i}`.\n\n- started by `svc-{i}.service`\n- owner: "
                             "team blue", turn_id=f"t{i}")
    return PicochatApp(store, session, resolve_model(config, "offline"), OfflineProvider(0),
                       config)


async def compact(pilot) -> None:
    app = pilot.app
    future = app.worker.compact(None)
    await future
    await app.checkpoint_moved()
    await pilot.pause(0.3)
    await pilot.wait_for_scheduled_animations()


def snap(snap_compare, app: PicochatApp, before=None, press=(), size=SIZE) -> bool:
    """Compare a picture taken after `before` and `press`, with the prompt's cursor steady
    (a blinking cursor would make the picture depend on the moment it is taken)."""
    async def run_before(pilot) -> None:
        pilot.app.query_one(Prompt).cursor_blink = False
        while not pilot.app.ready:
            await pilot.pause(0.05)
        if before is not None:
            await before(pilot)
        await pilot.press(*press)
        await pilot.pause(0.2)
        await pilot.wait_for_scheduled_animations()

    return snap_compare(app, terminal_size=size, run_before=run_before)


def test_chat_view(snap_compare, fixed_store):
    assert snap(snap_compare, app_with_history(fixed_store))


@pytest.mark.parametrize("size", [(120, 40), (80, 24), (60, 24)])
def test_checkpoint_panel_after_compact(snap_compare, fixed_store, size):
    async def before(pilot) -> None:
        await compact(pilot)
        await pilot.press("f2")
        await pilot.pause(0.3)

    # enough context that a summary (with its ledger of ports and ids) is smaller than it
    assert snap(snap_compare, app_with_history(fixed_store, turns=6, context=60), before,
                size=size)


def test_info_card(snap_compare, fixed_store):
    assert snap(snap_compare, app_with_history(fixed_store), press=["f3"])


def test_sessions_list(snap_compare, fixed_store):
    fixed_store.create_session("older work")

    async def before(pilot) -> None:
        await pilot.app.run_command("/sessions")

    assert snap(snap_compare, app_with_history(fixed_store), before)


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
    from tests.test_tui import Slow
    monkeypatch.setattr(status, "time", _StillClock)
    monkeypatch.setattr(pending, "time", _StillClock)
    app = app_with_history(fixed_store, turns=1)
    app.worker.provider = Slow(["never"], gap=3600)   # the answer never comes

    async def before(pilot) -> None:
        for text in ("first question", "second question", "third question"):
            prompt = pilot.app.query_one(Prompt)
            prompt.load_text(text)
            await pilot.press("enter")
            await pilot.pause(0.1)
        while pilot.app.worker.queued < 2:
            await pilot.pause(0.05)

    assert snap(snap_compare, app, before, size=size)
