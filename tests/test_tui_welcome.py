"""An empty session welcomes the user: who answers, how to reach a real model, the keys that
matter; a session with a history opens on its history, and the welcome is never stored."""

from __future__ import annotations

from picochat.config import Config, ModelConfig
from picochat.models import resolve_model
from picochat.providers.offline import OfflineProvider
from picochat.tui.app import PicochatApp
from picochat.tui.welcome import Welcome
from tests.helpers.tui import SIZE, chat_once, make_app
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message


def shown(app) -> str:
    return "\n".join(str(w.render()) for w in app.query(Welcome))


async def test_the_first_run_explains_the_offline_model_and_the_way_to_a_real_one(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        text = shown(app)
        assert "built-in offline model" in text
        assert "OPENAI_API_KEY" in text and "/model" in text and "config init" in text
        assert "F1 help" in text and "F2 checkpoints" in text and "ctrl+q quits" in text
        # the guarantee at this window (128,000: a 4,096-token share, 40 tokens a long line)
        assert "at least 102 of your statements kept with their subject" in text
        await chat_once(pilot, app, store, "hello")
        assert not app.query(Welcome)  # the conversation has begun: it goes
        assert all(m.content != text for m in store.history(app.session.id))


async def test_a_session_with_a_history_opens_without_the_welcome(store):
    session = store.create_session("t")
    append_message(store, session.id, "user", "earlier question", turn_id="a")
    append_message(store, session.id, "assistant", "earlier answer", turn_id="a")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        assert not app.query(Welcome)


async def test_a_real_model_is_named_with_its_window(store):
    config = Config(models={"big": ModelConfig("big", "openai/gpt-4o-mini", token_limit=64_000)})
    model = resolve_model(config, "big")
    app = PicochatApp(store, store.create_session("r"), model, OfflineProvider(0), config)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        text = shown(app)
        assert "You are talking to big, with a window of 64,000 tokens" in text
        assert "at least 102 of your statements kept with their subject" in text
        assert "offline" not in text
