"""The keys and slash commands tests/test_tui.py leaves out, through Textual's pilot: /stop,
/checkpoints and F2, F3, F1 and /help, /quit and ctrl+q, typing while an answer streams, and
one turn through the real litellm provider to the fake OpenAI server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import html
import re

import pytest
from textual import events

from picochat.config import Config, ModelConfig
from picochat.messages import INTERRUPTED
from picochat.models import create_provider, resolve_model
from picochat.providers.base import Finish, ModelInfo, Provider, TextDelta, Usage
from picochat.tui import slash
from picochat.tui.app import PicochatApp
from picochat.tui.chat import AssistantMessage, Notice
from picochat.tui.panel import CheckpointPanel
from picochat.tui.prompt import Prompt
from picochat.tui.screens import CardScreen
from picochat.tui.status import StatusBar
from tests.helpers.fakes.openai import FakeOpenAI
from tests.helpers.tui import SIZE, chat_once, make_app, say, texts
from tests.helpers.waiting import settle

MANY = ["one ", "two ", "three "] + ["more "] * 1000  # far more than a test waits for


class Unfinished(Provider):
    """Streams every piece but the last, then holds the answer open until `release` is set:
    however slow the machine, the answer cannot end before the test stops it. The gap only
    paces the pieces (the screen keeps changing while the test acts); no assertion depends
    on its length."""

    def __init__(self, pieces, gap=0.02):
        self.info = ModelInfo("test", "slow")
        self.pieces, self.gap = pieces, gap
        self.release = asyncio.Event()

    async def stream(self, request):
        for piece in self.pieces[:-1]:
            await asyncio.sleep(self.gap)  # pacing only (see above), not a wait
            yield TextDelta(piece)
        await self.release.wait()
        yield TextDelta(self.pieces[-1])
        yield Usage(10, 2)
        yield Finish()


def shown(app) -> str:
    """The screen as plain text (the screenshot without its SVG markup)."""
    return html.unescape(re.sub(r"<[^>]+>", "", app.export_screenshot())).replace("\xa0", " ")


def streaming(app, pieces: int = 3):
    """The answer has begun: at least `pieces` fragments are on screen."""
    return lambda: app.worker.busy and any(len(a.parts) >= pieces
                                           for a in app.query(AssistantMessage))


async def test_slash_stop_ends_the_answer_keeps_the_partial_and_says_so(store):
    app = make_app(store, provider=Unfinished(MANY))
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "tell me a long story")
        await settle(pilot, app, streaming(app))
        await say(pilot, "/stop")
        await settle(pilot, app, lambda: not app.worker.busy)
        await settle(pilot, app, lambda: any("Stopped" in t for t in texts(app, Notice)))
        assert any("partial answer is saved" in t for t in texts(app, Notice))
        user, partial = store.history(app.session.id)
        assert user.content == "tell me a long story"
        assert partial.status == INTERRUPTED and partial.content.startswith("one two three ")
        assert len(partial.content) < len("".join(MANY))   # it did not run to the end
        [answer] = app.query(AssistantMessage)
        assert answer.has_class("interrupted")
        assert "".join(answer.parts) == partial.content       # what is shown is what is kept
        assert app.query_one(Prompt).text == ""              # "/stop" is not left behind


async def test_checkpoints_command_and_f2_open_and_close_the_panel(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        panel = app.query_one(CheckpointPanel)
        assert not panel.has_class("open") and not panel.display
        await say(pilot, "/checkpoints")
        await settle(pilot, app, lambda: panel.has_class("open"))
        # drawn: laid out beside the chat and filled
        await settle(pilot, app, lambda: panel.region.width > 0 and "Context per turn"
                     in shown(app), what="the panel never showed")
        assert panel.display and panel.region.width > 0      # on screen, beside the chat
        assert "No summary in use" in str(panel.query_one("#cp-meta").render())
        assert "Context per turn" in shown(app)
        await say(pilot, "/checkpoints")
        await settle(pilot, app, lambda: not panel.has_class("open"))
        # the screen laid out again without it (its region gone), then what it shows
        await settle(pilot, app, lambda: panel.region.width == 0, what="the panel stayed")
        assert "Context per turn" not in shown(app)
        assert isinstance(app.focused, Prompt)                # back to typing
        await pilot.press("f2")
        assert panel.has_class("open")
        await pilot.press("f2")                               # from the panel's own list
        assert not panel.has_class("open") and isinstance(app.focused, Prompt)


async def test_f3_opens_the_info_card_and_escape_closes_it(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "something to count")
        await pilot.press("f3")
        await settle(pilot, app, lambda: isinstance(app.screen, CardScreen))
        assert app.screen.title_text == "Context (/info)"
        assert app.screen.rows == app.worker.info().rows()
        await settle(pilot, app, lambda: "Context (/info)" in shown(app),
                     what="the card was never drawn")
        await pilot.press("escape")
        await settle(pilot, app, lambda: not isinstance(app.screen, CardScreen))
        assert app.is_running                                 # Escape closed only the card
        await pilot.press("o", "k")
        assert app.query_one(Prompt).text == "ok"             # and typing goes on


@pytest.mark.parametrize("opener", ["f1", "/help"])
async def test_f1_and_help_open_a_card_listing_every_command_and_ctrl_j(store, opener):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        if opener.startswith("/"):
            await say(pilot, opener)
        else:
            await pilot.press(opener)
        await settle(pilot, app, lambda: isinstance(app.screen, CardScreen))
        assert app.screen.title_text == "Keys and commands"
        labels = [label for label, _ in app.screen.rows]
        for c in slash.COMMANDS:
            assert f"/{c.name} {c.args}".strip() in labels, c.name
        assert {"/stop", "/checkpoints", "/quit", "/export [md|json] [PATH] [--all-branches]"} <= set(labels)
        assert {"ctrl+j", "F1", "F2", "F3", "ctrl+q"} <= set(labels)
        assert any("queued" in label and "take the newest queued message back" in text
                   for label, text in app.screen.rows)  # up takes a queued message back
        await settle(pilot, app, lambda: "Keys and commands" in shown(app),
                     what="the card was never drawn")
        await pilot.press("escape")
        await settle(pilot, app, lambda: not isinstance(app.screen, CardScreen))
        assert app.query_one(Prompt).text == ""               # "/help" was not left behind


@pytest.mark.parametrize("how", ["/quit", "ctrl+q"])
async def test_quit_command_and_ctrl_q_end_the_app(store, how):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "a last word")
        assert app.is_running
        if how.startswith("/"):
            await say(pilot, how)
        else:
            await pilot.press(how)
        await settle(pilot, app, lambda: not app.is_running)
    assert app.return_code == 0
    assert [m.role for m in store.history(app.session.id)] == ["user", "assistant"]


async def test_ctrl_q_during_an_answer_quits_and_keeps_the_partial_answer(store):
    app = make_app(store, provider=Unfinished(MANY))
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "a question left running")
        await settle(pilot, app, streaming(app))
        await pilot.press("ctrl+q")                           # priority: even mid-answer
        await settle(pilot, app, lambda: not app.is_running)
    assert app.return_code == 0
    user, partial = store.history(app.session.id)
    assert user.content == "a question left running"
    assert partial.status == INTERRUPTED and partial.content.startswith("one two three ")


async def test_typing_while_an_answer_streams_edits_the_prompt_at_once(store):
    app = make_app(store, provider=Unfinished(MANY))
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "go on")
        await settle(pilot, app, streaming(app))
        prompt = app.query_one(Prompt)
        typed = ""
        for key, char in [(c, c) for c in "next one"] + [("ctrl+j", "\n"), ("x", "x")]:
            # as a terminal delivers keys: pilot.press would wait for a screen that streaming
            # never lets go idle
            app.post_message(events.Key(key, char))
            typed += char
            # the answer is held open until stopped: a key that waited for its end would never
            # show, and this wait would fail (its bound is for a failure, not a latency)
            await settle(pilot, app, lambda: prompt.text == typed,
                         what=f"{typed!r} never showed while the answer streamed")
            assert app.worker.busy, f"{typed!r} showed only once the answer had ended"
        [answer] = app.query(AssistantMessage)
        assert len("".join(answer.parts)) < len("".join(MANY))
        await pilot.press("escape")
        await settle(pilot, app, lambda: not app.worker.busy)
        assert prompt.text == "next one\nx"                   # stopping keeps the draft
        assert len(store.history(app.session.id)) == 2        # nothing else was sent


async def test_a_turn_through_litellm_to_the_fake_server(store, monkeypatch,
                                                         fake_openai: FakeOpenAI):
    monkeypatch.setenv("FAKE_API_KEY", "test-key")
    config = Config(models={"fake": ModelConfig(
        name="fake", model="openai/fake-model", api_base=fake_openai.base_url,
        api_key_env="FAKE_API_KEY", token_limit=8192)})
    resolved = resolve_model(config, "fake")
    reply = "Hello from the fake server, streamed in pieces."
    fake_openai.script(("text", reply))
    fake_openai.usage = {"prompt_tokens": 1234, "completion_tokens": 9}
    session = store.create_session("t")
    app = PicochatApp(store, session, resolved, create_provider(resolved), config)
    async with app.run_test(size=SIZE) as pilot:
        # litellm's import (a few seconds) runs in the background; the turn waits for it
        await settle(pilot, app, lambda: app.ready and not any(
            w.group == "warm-up" and not w.is_finished for w in app.workers), timeout=90)
        await chat_once(pilot, app, store, "hello, fake")
        assert "".join(app.query(AssistantMessage).last().parts) == reply
        assert [(m.role, m.content) for m in store.history(app.session.id)] == [
            ("user", "hello, fake"), ("assistant", reply)]
        [body] = fake_openai.requests
        assert body["model"] == "fake-model" and body["stream"] is True
        assert body["messages"][0] == {"role": "system", "content": config.agent.system_prompt}
        assert body["messages"][-1] == {"role": "user", "content": "hello, fake"}
        assert fake_openai.headers[0]["authorization"] == "Bearer test-key"
        budget = app.worker.info().budget
        assert "provider" in budget.usage_source
        assert budget.used_tokens >= 1234                     # the server's figure, plus the reply
        status = str(app.query_one(StatusBar).render())
        assert f"{budget.used_tokens:,} of " in status and " fake " in status
        assert "offline" not in status
        app.worker.calibration = None                         # the estimate alone differs
        assert app.worker.info().budget.used_tokens != budget.used_tokens


async def slash_c_typed(pilot, app) -> Prompt:
    """The app ready, and "/c" typed in its prompt (the start of four commands)."""
    await settle(pilot, app, lambda: app.ready)
    prompt = app.query_one(Prompt)
    prompt.focus()
    await pilot.press("/", "c")
    return prompt


async def test_tab_walks_the_commands_a_bare_slash_or_a_shared_start_could_be(store):
    """`/` and `/c` share no longer start: each Tab puts the next matching command in the
    prompt, in the order the hints list them; any other key ends the walk."""
    from tests.helpers.tui import SIZE, make_app
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        prompt = await slash_c_typed(pilot, app)
        walked = []
        for _ in range(6):
            await pilot.press("tab")
            walked.append(prompt.text)
        assert walked == ["/compact ", "/context", "/checkpoints", "/clear", "/copy",
                          "/compact "]
        await pilot.press("x")
        assert prompt.text == "/compact x"


async def test_the_arrows_walk_the_hints_and_the_pick_is_marked_in_the_list(store):
    """With the hints open, down/up (and shift+Tab) walk them, the list stays whole and the
    pick is shown reversed; with them closed, up recalls earlier prompts as before."""
    from tests.helpers.tui import SIZE, make_app, say
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        prompt = await slash_c_typed(pilot, app)
        hints = app.query_one("#hints")
        await pilot.press("down", "down", "down")
        assert prompt.text == "/checkpoints"
        await pilot.pause()
        shown = hints.content   # the Text it shows
        assert all(f"/{name}" in str(shown)
                   for name in ("compact", "context", "checkpoints", "clear", "copy"))
        marked = [shown.plain[s.start:s.end] for s in shown.spans if "reverse" in str(s.style)]
        assert any("/checkpoints" in m for m in marked)
        assert not any("/compact" in m for m in marked)
        await pilot.press("up", "up", "up")    # round the list, backwards
        assert prompt.text == "/copy"
        await pilot.press("shift+tab")
        assert prompt.text == "/clear"
        await pilot.press("escape")
        assert not hints.has_class("open")
        prompt.clear()
        await say(pilot, "an earlier prompt")
        await settle(pilot, app, lambda: not app.worker.busy)
        await pilot.press("up")                # no hints: the arrows recall again
        assert prompt.text == "an earlier prompt"


async def test_esc_closes_the_hints_and_a_shared_start_lists_what_it_could_be(store):
    from picochat.tui.chat import Notice
    from tests.helpers.tui import SIZE, make_app, say, texts
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        prompt = await slash_c_typed(pilot, app)
        assert app.query_one("#hints").has_class("open")
        await pilot.press("escape")
        assert not app.query_one("#hints").has_class("open")
        assert prompt.text == "/c"  # what was typed stays
        await say(pilot, "/c")
        await settle(pilot, app, lambda: any("could be" in t for t in texts(app, Notice)))
        [line] = [t for t in texts(app, Notice) if "could be" in t]
        assert line == ("/c could be /compact, /context, /checkpoints, /clear, /copy: type more "
                        "of it, or Tab")


async def test_ctrl_c_stops_a_running_answer(store):
    from tests.helpers.tui import SIZE, make_app, say
    app = make_app(store, provider=Unfinished(["word "] * 200, gap=0.05))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "talk for a while")
        await settle(pilot, app, lambda: app.conversation.running is not None)
        await settle(pilot, app, streaming(app))  # words of it on screen, more coming
        await pilot.press("ctrl+c")
        await settle(pilot, app, lambda: not app.worker.busy)
        [answer] = [m for m in store.history(app.session.id) if m.role == "assistant"]
        assert answer.status == "interrupted" and answer.content.count("word") < 200


async def test_tab_typed_in_the_same_burst_as_a_command_completes_it(store):
    """`/ex` and Tab typed at once (issue 35, item 8): the Tab came before the hints opened
    for `/ex`, and moved the focus out of the prompt instead of completing."""
    from textual import events

    from picochat.tui.prompt import Prompt
    from tests.helpers.tui import SIZE, make_app

    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        prompt = app.query_one(Prompt)
        prompt.focus()
        for char in "/ex":
            app.post_message(events.Key(char, char))
        app.post_message(events.Key("tab", "\t"))
        await settle(pilot, app, lambda: prompt.text == "/export ",
                     what="the burst's Tab did not complete /ex")
        assert app.focused is prompt


async def test_the_footer_offers_esc_for_what_it_does_and_never_stop_with_nothing_running(store):
    """The footer kept `esc Stop` when nothing ran (issue 35, item 8): with the slash hints
    open it says `esc Close hints`; idle, no esc at all; while an answer runs, `esc Stop`."""
    from picochat.tui.prompt import Prompt
    from tests.helpers.tui import SIZE, make_app

    def offered(app) -> set[str]:
        return {b.binding.description for b in app.active_bindings.values()
                if b.enabled and b.binding.key == "escape"}

    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        assert offered(app) == set()
        app.query_one(Prompt).focus()
        await pilot.press("/", "c")
        await settle(pilot, app, lambda: offered(app) == {"Close hints"})
        await pilot.press("escape")
        await settle(pilot, app, lambda: offered(app) == set())
