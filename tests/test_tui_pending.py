"""Where the answer will appear, a live line says what the turn is doing and for how long:
waiting for the first words, or compacting; the answer's first words replace it."""

from __future__ import annotations

import asyncio
import re

from picochat.providers.base import Finish, ModelInfo, Provider, TextDelta, Usage
from picochat.providers.offline import OfflineProvider
from picochat.tui.chat import AssistantMessage, ChatView, Notice
from picochat.tui.pending import Pending
from tests.helpers.tui import SIZE, answered, make_app, say
from tests.helpers.waiting import settle


class Held(Provider):
    """Answers only once `release` is set: a model that takes its time to start."""

    def __init__(self) -> None:
        self.info = ModelInfo("test", "held")
        self.release = asyncio.Event()
        self.summary_release = asyncio.Event()

    async def stream(self, request):
        if request.purpose == "summary":  # the offline model's summary, once released
            await self.summary_release.wait()
            async for event in OfflineProvider(0).stream(request):
                yield event
            return
        await self.release.wait()
        yield TextDelta("Here it is.")
        yield Usage(10, 2)
        yield Finish()


def line(app) -> str:
    return " ".join(str(p.render()) for p in app.query(Pending))


async def test_waiting_for_the_first_words_shows_a_live_line_that_the_answer_replaces(store):
    provider = Held()
    app = make_app(store, provider)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "hello")
        await settle(pilot, app, lambda: "waiting for the answer" in line(app))
        chat = app.query_one(ChatView)
        assert list(chat.children)[-1] is app.query_one(Pending)  # where the answer will be
        # it counts: a second goes by on its clock (at least one; more on a busy machine)
        await settle(pilot, app, lambda: re.search(r" [1-9]\d*s · ", line(app)))
        assert "Esc stops" in line(app)
        provider.release.set()
        await settle(pilot, app, lambda: not app.worker.busy and answered(app, store))
        assert not app.query(Pending)
        assert app.query(AssistantMessage)


async def test_a_manual_compaction_shows_that_it_is_compacting_until_it_ends(store):
    provider = Held()
    provider.release.set()
    app = make_app(store, provider)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        for i in range(6):
            await say(pilot, f"question {i}: the build uses port {9000 + i} " + "filler " * 30)
        await settle(pilot, app, lambda: len(store.history(app.session.id)) == 12
                     and not app.worker.busy)
        await say(pilot, "/compact")
        await settle(pilot, app, lambda: "compacting the context" in line(app))
        assert "Esc" not in line(app)  # a manual compaction is not stopped by Esc
        provider.summary_release.set()
        await settle(pilot, app, lambda: not app.query(Pending) and any(
            "compact" in str(n.render()).lower() for n in app.query(Notice)))


async def test_a_message_larger_than_the_whole_window_is_not_sent_and_goes_back(store):
    """It could never be answered, and once saved it would be in every later request."""
    from picochat.config import Config, ModelConfig
    from picochat.models import resolve_model
    from picochat.tui.app import PicochatApp
    from picochat.tui.prompt import Prompt
    from tests.helpers.tui import texts

    config = Config(default_model="tiny", models={
        "tiny": ModelConfig("tiny", "offline", token_limit=2000)})
    app = PicochatApp(store, store.create_session("w"), resolve_model(config, "tiny"),
                      OfflineProvider(0), config)
    huge = "the deploy log says port 8443 is busy; " * 800  # about 9,000 tokens
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, huge)
        await settle(pilot, app, lambda: any("Not sent" in t for t in texts(app, Notice)))
        [line] = [t for t in texts(app, Notice) if "Not sent" in t]
        assert "more than the model's whole window of 2,000" in line
        assert app.query_one(Prompt).text == huge
        assert store.history(app.session.id) == []  # nothing saved
        # typed as //…: it comes back as typed, so Enter sends it again and runs no command
        app.query_one(Prompt).clear()
        await say(pilot, "//compact " + huge)
        await settle(pilot, app, lambda: len([t for t in texts(app, Notice)
                                              if "Not sent" in t]) == 2)
        assert app.query_one(Prompt).text == "//compact " + huge
        assert store.history(app.session.id) == [] and not store.checkpoints(app.session.id)
        # counted in tokens, not characters: 1,000 crabs are about 3,000 tokens
        crabs = "🦀" * 1000
        app.query_one(Prompt).clear()
        await say(pilot, crabs)
        await settle(pilot, app, lambda: len([t for t in texts(app, Notice)
                                              if "Not sent" in t]) == 3)
        assert app.query_one(Prompt).text == crabs
        assert store.history(app.session.id) == []
