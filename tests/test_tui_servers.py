"""The app with servers that are busy or refuse tools (issue 20): the wait shows, where the
answer will appear and in the top bar, Esc ends it; a refusal of tools is said once."""

from __future__ import annotations

import pytest

from picochat.config import Config, ModelConfig
from picochat.models import create_provider, resolve_model
from picochat.tui.app import PicochatApp
from picochat.tui.chat import AssistantMessage, Notice
from picochat.tui.status import StatusBar
from tests.helpers.fakes.openai import FakeOpenAI
from tests.helpers.tui import idle, say, texts
from tests.helpers.waiting import settle

SIZE = (120, 40)


def outcomes(app) -> int:
    """Answers and notices on screen: a turn that ended shows at least one of them."""
    return len(app.query(AssistantMessage)) + len(app.query(Notice))


async def send_and_wait(pilot, app, text: str) -> None:
    """Send `text` and wait until its turn has ended: something of it is on screen (its
    answer, or the notice saying why there is none) and nothing is running or queued."""
    before = outcomes(app)
    await say(pilot, text)
    await settle(pilot, app, lambda: outcomes(app) > before and idle(app),
                 what=f"the turn of {text!r} never ended")


@pytest.fixture
def app_for(store, monkeypatch):
    monkeypatch.setenv("FAKE_API_KEY", "test-key")

    def make(fake: FakeOpenAI) -> PicochatApp:
        config = Config(default_model="fake", models={"fake": ModelConfig(
            name="fake", model="openai/fake-model", api_base=fake.base_url,
            api_key_env="FAKE_API_KEY", token_limit=8192)})
        resolved = resolve_model(config, "fake")
        session = store.create_session("busy")
        return PicochatApp(store, session, resolved, create_provider(resolved), config)
    return make


async def test_a_busy_server_shows_the_wait_then_the_answer(app_for, fake_openai):
    fake_openai.script(("status", 429, {"error": {"message": "slow down"}},
                        {"Retry-After": "2"}))
    app = app_for(fake_openai)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready, timeout=60)
        await say(pilot, "hello")
        await settle(pilot, app, lambda: "sending again in" in app.query_one(StatusBar).state)
        assert any("sending once more in 2 s" in t for t in texts(app, Notice))
        assert "Esc stops" in app.query_one(StatusBar).state
        await settle(pilot, app, lambda: texts(app, AssistantMessage) and idle(app))
        assert texts(app, AssistantMessage)[-1] == "Hello from fake"
        assert len(fake_openai.requests) == 2


async def test_esc_during_the_wait_stops_the_turn_and_sends_nothing_more(
        app_for, fake_openai, store):
    fake_openai.script(("status", 503, {"error": {"message": "busy"}}, {"Retry-After": "20"}))
    app = app_for(fake_openai)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready, timeout=60)
        await say(pilot, "hello")
        await settle(pilot, app, lambda: "sending again in 2" in app.query_one(StatusBar).state)
        # a countdown from 20 s
        await pilot.press("escape")
        # the turn's closing line: after it the wait is over and nothing more can be sent (a
        # wait Esc did not end would send again and answer, never showing this line)
        await settle(pilot, app, lambda: any("Stopped before any answer arrived" in t
                                             for t in texts(app, Notice)) and idle(app),
                     what="Esc did not stop the wait")
        assert len(fake_openai.requests) == 1
        assert [m.role for m in store.history(app.session.id)] == ["user"]


async def test_a_server_that_refuses_tools_is_told_once(app_for, fake_openai):
    fake_openai.refuse_tools = (400, "tools param requires --jinja flag")
    app = app_for(fake_openai)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready, timeout=60)
        for text in ("hello", "again"):
            await send_and_wait(pilot, app, text)
        notices = [t for t in texts(app, Notice) if "refuses requests that offer tools" in t]
        assert len(notices) == 1
        assert texts(app, AssistantMessage) == ["Hello from fake", "Hello from fake"]
        assert [bool(b.get("tools")) for b in fake_openai.requests] == [True, False, False]


async def test_a_new_session_in_the_same_app_still_reaches_the_server(app_for, fake_openai):
    """Closing the old session's worker closes litellm's HTTP clients; the next session's
    requests must get fresh ones, not "the client has been closed"."""
    app = app_for(fake_openai)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready, timeout=60)
        await say(pilot, "hello")
        await settle(pilot, app, lambda: texts(app, AssistantMessage) and idle(app))
        first = app.session.id
        done = {"/new second": lambda: app.session.name == "second"
                and "second" in str(app.query_one(StatusBar).render()),
                "/model fake": lambda: any(t.startswith("Model: ") for t in texts(app, Notice))}
        for command, witness in done.items():
            await say(pilot, command)
            await settle(pilot, app, lambda: witness() and idle(app),
                         what=f"{command} never took effect")
            await send_and_wait(pilot, app, "again")
            assert texts(app, AssistantMessage)[-1] == "Hello from fake", texts(app, Notice)
        assert app.session.id != first
        assert len(fake_openai.requests) == 3
