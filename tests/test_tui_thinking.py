"""A reasoning model in the app: its thinking streams into an open block above the answer, the
block collapses once the answer starts, nothing of it is saved; an answer cut at the output
limit gets a line under it."""

from __future__ import annotations

import asyncio

from picochat.config import Config, ModelConfig
from picochat.models import create_provider, resolve_model
from picochat.providers.base import Finish, ModelInfo, Provider, TextDelta, ThinkingDelta, Usage
from picochat.tui.app import PicochatApp
from picochat.tui.chat import AssistantMessage, ChatView, Notice, UserMessage
from picochat.tui.thinking import ThinkingBlock, newest_lines
from tests.helpers.fakes.openai import FakeOpenAI
from tests.helpers.tui import SIZE, answered, chat_once, make_app, say
from tests.helpers.waiting import settle

STEPS = [f"Step {i}: check the {i}th port and note what it serves.\n" for i in range(1, 13)]


class Thinker(Provider):
    """Thinks in `STEPS`, then waits for `go` before it answers: a turn caught mid-thought."""

    def __init__(self) -> None:
        self.info = ModelInfo("test", "thinker")
        self.go = asyncio.Event()

    async def stream(self, request):
        for step in STEPS:
            yield ThinkingDelta(step)
            await asyncio.sleep(0)  # a yield to the loop between pieces, not a wait
        await self.go.wait()
        yield TextDelta("Port 8443 serves the ")
        yield TextDelta("admin UI.")
        yield Usage(10, 5)
        yield Finish()


async def test_thinking_shows_open_while_it_streams_then_collapses_above_the_answer(store):
    provider = Thinker()
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "which port is the admin UI?")
        await settle(pilot, app, lambda: app.query(ThinkingBlock))
        block = app.query_one(ThinkingBlock)
        await settle(pilot, app, lambda: "Step 12" in str(block._thought.render()))
        assert not block.collapsed and block.title.startswith("thinking… ")
        view = str(block._thought.render())
        assert "Step 1:" not in view and len(view.splitlines()) <= 6  # the newest lines only
        assert not app.query(AssistantMessage)

        provider.go.set()
        await settle(pilot, app, lambda: not app.worker.busy and answered(app, store))
        assert block.collapsed and block.title.startswith("thought for ")
        assert f"{len(''.join(STEPS)):,} characters" in block.title
        assert block.text == "".join(STEPS)
        chat = list(app.query_one(ChatView).children)
        answer = app.query_one(AssistantMessage)
        assert [type(w) for w in chat] == [UserMessage, ThinkingBlock, AssistantMessage]
        assert answer.text == "Port 8443 serves the admin UI."
        assert [m.content for m in store.history(app.session.id)] == [
            "which port is the admin UI?", "Port 8443 serves the admin UI."]

        block.query_one("CollapsibleTitle").focus()  # enter opens it again, all of it
        await pilot.press("enter")
        await settle(pilot, app, lambda: not block.collapsed)
        assert not block.collapsed and "Step 1:" in str(block._thought.render())
        await pilot.press("c")
        assert app.clipboard == "".join(STEPS)


def test_the_open_block_shows_the_newest_lines_at_its_width():
    text = "".join(STEPS)
    lines = str(newest_lines(text, 30)).splitlines()
    assert len(lines) == 6 and all(len(line) <= 30 for line in lines)
    assert lines[-1].strip().endswith("serves.")
    assert "Step 12" in "".join(lines) and "Step 1:" not in "".join(lines)


async def test_an_answer_cut_at_the_output_limit_gets_a_line_under_it(
        store, monkeypatch, fake_openai: FakeOpenAI):
    monkeypatch.setenv("FAKE_API_KEY", "test-key")
    config = Config(models={"fake": ModelConfig(
        name="fake", model="openai/fake-model", api_base=fake_openai.base_url,
        api_key_env="FAKE_API_KEY", token_limit=8192)})
    resolved = resolve_model(config, "fake")
    fake_openai.script(("length", ("reasoning", "Long plan.", "The first part of a long")))
    session = store.create_session("t")
    app = PicochatApp(store, session, resolved, create_provider(resolved), config)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready and not any(
            w.group == "warm-up" and not w.is_finished for w in app.workers), timeout=90)
        await chat_once(pilot, app, store, "write a long essay")
        await settle(pilot, app, lambda: app.query(Notice))
        chat = list(app.query_one(ChatView).children)
        assert [type(w) for w in chat] == [UserMessage, ThinkingBlock, AssistantMessage, Notice]
        note = chat[-1]
        assert note.has_class("warning")
        assert str(note.render()).startswith("cut at the output limit: ")
        assert app.query_one(AssistantMessage).text == "The first part of a long"
        assert store.history(app.session.id)[-1].content == "The first part of a long"
