"""The app through Textual's pilot: chat, slash commands, keys, the checkpoint panel, and the
numbers it shows, which must be the engine's (the same as `picochat info`)."""

from __future__ import annotations

import asyncio
import json

from picochat.config import CompactionConfig, Config
from picochat.messages import INTERRUPTED
from picochat.models import resolve_model
from picochat.providers.base import Finish, ModelInfo, Provider, TextDelta, Usage
from picochat.providers.offline import OfflineProvider
from picochat.tui.app import PicochatApp
from picochat.tui.chat import AssistantMessage, ChatView, CheckpointDivider, Notice, UserMessage
from picochat.tui.panel import CheckpointPanel
from picochat.tui.prompt import Prompt
from picochat.tui.screens import CardScreen
from picochat.tui.status import StatusBar
from tests.helpers.conversations import long_session, short_turns
from tests.helpers.scripted import Recorder
from tests.helpers.tui import SIZE, SMALL_KEEP, Slow, answered, chat_once, make_app, say, texts
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message


async def test_a_message_streams_in_and_both_rows_are_saved(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "remember: the canary host is cn-west-12")
        users = app.query_one(ChatView).query(UserMessage)
        answers = app.query_one(ChatView).query(AssistantMessage)
        assert [u.seq for u in users] == [1] and [a.seq for a in answers] == [2]
        assert "cn-west-12" in store.history(app.session.id)[1].content
        assert app.query_one(Prompt).text == ""


async def test_status_bar_shows_the_same_numbers_as_picochat_info(store, run_cli, home):
    from picochat.storage.store import open_store

    db = home / "data" / "picochat.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    shared = open_store(db)
    try:
        app = make_app(shared, config=Config())
        async with app.run_test(size=SIZE) as pilot:
            await chat_once(pilot, app, shared, "hello there")
            await settle(pilot, app, lambda: app.ready)  # the figures are counted
            status = str(app.query_one(StatusBar).render())
            calibrated = app.worker.info().as_dict()
        result = run_cli("info", "--json", "--session", "t")
        assert result.status == 0, result.stderr
        card = json.loads(result.stdout)
        # a fresh process has no provider-reported figure yet: both are the stored estimate
        uncalibrated = app.worker
        uncalibrated.calibration = None
        mine = uncalibrated.info().as_dict()
        assert mine["used_tokens"] == card["used_tokens"]
        assert mine["compression_threshold_tokens"] == card["compression_threshold_tokens"]
        assert f"{calibrated['used_tokens']:,} of {card['compression_threshold_tokens']:,} " \
               f"tokens before auto-compact · window {card['effective_window_tokens']:,}" in status
        assert " offline " in status
    finally:
        shared.close()


async def test_compact_draws_the_divider_and_fills_the_panel(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        for i in range(8):
            await say(pilot, f"question {i}: the build uses port {9000 + i} " + "filler " * 30)
        await settle(pilot, app, lambda: len(store.history(app.session.id)) == 16
                     and not app.worker.busy)
        before = app.worker.info().budget.used_tokens
        await say(pilot, "/compact keep the ports")
        await settle(pilot, app, lambda: bool(store.checkpoints(app.session.id))
                     and app.query(CheckpointDivider)
                     and any("Context compacted" in t for t in texts(app, Notice))
                     and app.query_one(StatusBar).state == "")  # the command has ended
        await pilot.pause()
        [cp] = store.checkpoints(app.session.id)
        [divider] = app.query(CheckpointDivider)
        said = str(divider.render())
        assert f"messages {cp.first_retained_seq} onward" in said
        assert cp.id not in said and "gen " not in said and "#" not in said
        chat = app.query_one(ChatView)
        after = list(chat.children)[list(chat.children).index(divider) + 1]
        assert after.seq == cp.first_retained_seq        # the raw tail starts right below it
        assert all(isinstance(w, (UserMessage, AssistantMessage, Notice, CheckpointDivider))
                   for w in chat.children)
        assert len(chat.query(UserMessage)) == 8          # the raw history stays on screen
        assert any("Context compacted" in t for t in texts(app, Notice))
        assert app.worker.info().budget.used_tokens < before
        await pilot.press("f2")
        panel = app.query_one(CheckpointPanel)
        assert panel.has_class("open")
        # filled when it says it opened: the focus moves to its list then
        from textual.widgets import OptionList

        await settle(pilot, app, lambda: isinstance(app.focused, OptionList))
        meta = str(panel.query_one("#cp-meta").render())
        assert "Summary 1" in meta and f"{cp.tokens_before:,} → {cp.tokens_after:,}" in meta
        await say(pilot, "/uncompact")
        await settle(pilot, app, lambda: not app.query(CheckpointDivider))
        assert store.session(app.session.id).active_context_checkpoint_id is None


async def test_compact_during_a_turn_is_queued_and_runs_after_it(store):
    for i in range(6):
        append_message(store, store.create_session("t").id if i == 0 else
                       store.find_session("t").id, "user", f"q{i} " + "words " * 40,
                       turn_id=f"x{i}")
        append_message(store, store.find_session("t").id, "assistant", f"a{i} " + "words " * 40,
                       turn_id=f"x{i}")
    provider = _SlowThenOffline()
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "a slow question")
        await settle(pilot, app, lambda: app.worker.busy)
        await say(pilot, "/compact")
        await settle(pilot, app, lambda: any("queued" in t for t in texts(app, Notice)))
        assert not store.checkpoints(app.session.id)      # not while the turn runs
        assert app.worker.busy                            # (it is held open until now)
        provider.release.set()
        await settle(pilot, app, lambda: any("Context compacted" in t
                                             for t in texts(app, Notice)))
        [cp] = store.checkpoints(app.session.id)
        answer = store.history(app.session.id)[-1]
        assert answer.role == "assistant" and answer.status != INTERRUPTED
        assert cp.source_max_seq >= answer.seq            # it ran after the whole turn


class _SlowThenOffline(Provider):
    """A turn held open until `release` is set; summaries from the offline model."""

    def __init__(self):
        self.info = ModelInfo("offline", "offline")
        self.offline = OfflineProvider(0)
        self.release = asyncio.Event()

    async def stream(self, request):
        if request.purpose == "summary":
            async for event in self.offline.stream(request):
                yield event
            return
        async for event in Slow(["slow ", "but ", "sure"], gap=0,
                                hold=self.release).stream(request):
            yield event


async def test_escape_stops_the_answer_and_keeps_what_arrived(store):
    never = asyncio.Event()  # the answer stays open until Esc stops it
    app = make_app(store, provider=Slow(["one ", "two ", "three "], gap=0, hold=never))
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "go on")
        await settle(pilot, app, lambda: any(len(a.parts) >= 3 for a in
                                             app.query(AssistantMessage)))
        await pilot.press("escape")
        await settle(pilot, app, lambda: not app.worker.busy and any(
            "Stopped" in t for t in texts(app, Notice)))
        partial = store.history(app.session.id)[-1]
        assert partial.status == INTERRUPTED and partial.content.startswith("one two three ")


async def test_model_output_cannot_inject_markup_or_escapes(store):
    hostile = ["[red]x[/red] ", "[@click=app.quit]quit[/] ", "\x1b[2J\x1b]0;pwned\x07",
               "abc\u202edcba\u2066 done", " \x1b]0;split ti", "tle\x07 af", "ter \x1b[3", "1m"]
    app = make_app(store, provider=Slow(hostile, gap=0))
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "[bold]me[/bold] \x1b[31m")
        await settle(pilot, app, lambda: not app.worker.busy and answered(app, store))
        [answer] = app.query(AssistantMessage)
        shown = "".join(answer.parts)
        assert "[red]x[/red]" in shown and "[@click=app.quit]" in shown
        assert "\x1b" not in shown and "\x07" not in shown
        assert "\u202e" not in shown and "abc<U+202E>dcba<U+2066> done" in shown
        assert "title" not in shown and "after" in shown  # an escape split across pieces
        assert not shown.endswith("1m") and answer.text == shown
        [user] = app.query(UserMessage)
        assert str(user.render()) == "[bold]me[/bold] "
        assert app.is_running                             # nothing quit the app


async def test_unknown_command_suggests_the_nearest(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "/compcat")
        await settle(pilot, app, lambda: any("unknown command" in t for t in texts(app, Notice)))
        assert any("unknown command /compcat; did you mean /compact?" in t
                   for t in texts(app, Notice))
        assert store.history(app.session.id) == []        # nothing was sent


async def test_slash_completion_lists_commands_with_help(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("/", "c")
        await settle(pilot, app, lambda: "/compact" in str(app.query_one("#hints").render()))
        hints = str(app.query_one("#hints").render())
        assert "/compact" in hints and "/clear" in hints and "/info" not in hints
        assert "summarize older turns" in hints


async def test_info_and_help_open_cards_with_the_engines_rows(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "/info")
        await settle(pilot, app, lambda: isinstance(app.screen, CardScreen))
        assert app.screen.rows == app.worker.info().rows()
        await pilot.press("escape")
        await pilot.press("f1")
        await settle(pilot, app, lambda: isinstance(app.screen, CardScreen)
                     and app.screen.title_text == "Keys and commands")
        labels = [label for label, _ in app.screen.rows]
        assert "/compact [--preview] [focus|all]" in labels and "F2" in labels and "ctrl+j" in labels


async def test_up_recalls_the_previous_prompt_and_ctrl_j_adds_a_newline(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "first prompt")
        await pilot.press("up")
        assert app.query_one(Prompt).text == "first prompt"
        await pilot.press("down")
        assert app.query_one(Prompt).text == ""
        await pilot.press("a", "ctrl+j", "b")
        assert app.query_one(Prompt).text == "a\nb"
        app.query_one(Prompt).clear()
        # a burst, as a terminal delivers a fast typist or tmux send-keys: order is kept
        from textual import events

        for key, char in [("x", "x"), ("ctrl+j", "\n"), ("y", "y"), ("ctrl+j", "\n"),
                          ("z", "z")]:
            app.post_message(events.Key(key, char))
        await settle(pilot, app, lambda: len(app.query_one(Prompt).text) == 5)  # all arrived
        assert app.query_one(Prompt).text == "x\ny\nz"


async def test_clear_says_so_and_the_context_starts_afresh(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "something to forget")
        await say(pilot, "/clear")
        await settle(pilot, app, lambda: any("Context cleared" in t for t in texts(app, Notice)))
        assert app.worker.info().as_dict()["raw_messages_in_context"] == 0
        assert len(app.query_one(ChatView).query(UserMessage)) == 1  # still on screen


async def test_sessions_new_rename_switch_and_delete(store):
    app = make_app(store, name="first")
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "a message in the first session")
        await say(pilot, "/new second")
        await settle(pilot, app, lambda: app.session.name == "second"
                     and not app.query_one(ChatView).query(UserMessage))  # a fresh transcript
        await say(pilot, "/rename renamed")
        await settle(pilot, app, lambda: store.session(app.session.id).name == "renamed")
        assert "renamed" in str(app.query_one(StatusBar).render())
        await say(pilot, "/sessions")
        from picochat.tui.screens import ConfirmScreen
        from picochat.tui.session_picker import SessionPicker

        await settle(pilot, app, lambda: isinstance(app.screen, SessionPicker))
        await pilot.pause()
        first = store.find_session("first")
        await pilot.press("down", "enter")    # the list is newest first: the second row
        await settle(pilot, app, lambda: texts(app, UserMessage) == [
            "a message in the first session"])
        assert app.session.id == first.id
        await say(pilot, "/delete")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await settle(pilot, app, lambda: app.session.id != first.id)
        assert store.find_session("first") is None             # hidden from every list
        assert store.history(first.id)                          # its rows are kept


async def test_search_lists_matches_and_jumps_to_one_even_in_an_unloaded_page(store):
    from textual.widgets import OptionList

    from picochat.tui.screens import PickScreen

    session = store.create_session("t")
    append_message(store, session.id, "user", "the canary host is cn-west-12", turn_id="x0")
    append_message(store, session.id, "assistant", "Noted.", turn_id="x0")
    for i in range(1, 150):  # the fact is far above what the app mounts at open
        append_message(store, session.id, "user", f"question {i}", turn_id=f"x{i}")
        append_message(store, session.id, "assistant", f"answer {i}", turn_id=f"x{i}")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        assert not [w for w in app.query(UserMessage) if w.seq == 1]
        await say(pilot, "/search which host is the canary?")
        await settle(pilot, app, lambda: isinstance(app.screen, PickScreen))
        options = app.screen.query_one(OptionList)
        assert "message 1 · you: " in str(options.get_option_at_index(0).prompt)
        await pilot.press("enter")
        await settle(pilot, app, lambda: bool(app.query(".found")))
        [found] = app.query(".found")
        assert found.seq == 1 and isinstance(found, UserMessage)
        chat = app.query_one(ChatView)
        # the jump scrolls after the next refresh: wait for it to land on the message
        await settle(pilot, app, lambda: chat.scroll_y <= found.virtual_region.y
                     <= chat.scroll_y + chat.size.height)
        assert chat.scroll_y <= found.virtual_region.y <= chat.scroll_y + chat.size.height
        await say(pilot, "/search answer 149")  # a second search moves the mark
        await settle(pilot, app, lambda: isinstance(app.screen, PickScreen))
        await pilot.press("enter")
        await settle(pilot, app, lambda: [w.seq for w in app.query(".found")] == [300])


async def test_theme_switches_live_is_saved_and_a_bad_theme_file_is_only_a_notice(
        store, tmp_path):
    from picochat.config import load_config
    from picochat.paths import resolve_paths

    paths = resolve_paths(str(tmp_path / "data"), str(tmp_path / "cfg" / "config.toml"))
    paths.user_themes_dir.mkdir(parents=True)
    (paths.user_themes_dir / "broken.toml").write_text('name = "broken"\nprimary = "nope"\n')
    (paths.user_themes_dir / "mine.toml").write_text('name = "mine"\nprimary = "#ff0000"\n')
    session = store.create_session("t")
    model = resolve_model(SMALL_KEEP, "offline")
    app = PicochatApp(store, session, model, OfflineProvider(0), SMALL_KEEP, paths)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: any("broken.toml" in str(n.message)
                                             for n in app._notifications))  # said at mount
        assert app.theme == "picochat-dark"
        assert {"picochat-light", "picochat-high-contrast", "mine", "nord"} <= set(
            app.available_themes)
        assert "broken" not in app.available_themes
        assert any("broken.toml" in str(n.message) and "primary" in str(n.message)
                   for n in app._notifications)
        await say(pilot, "/theme picochat-light")
        await settle(pilot, app, lambda: any(t.startswith("Theme: picochat-light")
                                             for t in texts(app, Notice)))
        assert app.theme == "picochat-light"
        await say(pilot, "/theme picochat-lite")
        await settle(pilot, app, lambda: any("unknown theme" in t for t in texts(app, Notice)))
        assert any("did you mean picochat-light" in t for t in texts(app, Notice))
    assert load_config(paths.config_file).ui.theme == "picochat-light"


async def test_model_switch_follows_the_new_window(store, tmp_path):
    from picochat.config import ModelConfig

    config = Config(models={"tiny": ModelConfig(name="tiny", model="offline", token_limit=8192)})
    session = store.create_session("t")
    app = PicochatApp(store, session, resolve_model(config, "offline"), OfflineProvider(0),
                      config)
    async with app.run_test(size=SIZE) as pilot:
        assert app.worker.limits.window == 128_000
        await say(pilot, "/model tiny")
        await settle(pilot, app, lambda: app.worker.limits.window == 8192)
        assert "8,192" in str(app.query_one(StatusBar).render())
        assert store.session(session.id).model == "tiny"
        await say(pilot, "/model nonsense")
        await settle(pilot, app, lambda: any("unknown model" in t for t in texts(app, Notice)))
        assert any("unknown model 'nonsense'" in t for t in texts(app, Notice))
        assert app.worker.limits.window == 8192


async def test_retry_asks_the_last_question_again_and_copy_takes_the_answer(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "what is two plus two?")
        await say(pilot, "/retry")
        await settle(pilot, app, lambda: len(store.history(app.session.id)) == 4
                     and not app.worker.busy)
        rows = store.history(app.session.id)
        assert [m.retracted for m in rows] == [True, True, False, False]
        assert rows[2].content == "what is two plus two?"
        await say(pilot, "/copy")
        await settle(pilot, app, lambda: any("Copied the last answer" in str(n.message)
                                             for n in app._notifications))
        assert app.clipboard == rows[3].content


async def test_export_writes_the_whole_session(store, tmp_path):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "the canary host is cn-west-12")
        await say(pilot, f"/export json {tmp_path / 'out.json'}")
        await settle(pilot, app, lambda: any("Exported" in t and "out.json" in t
                                             for t in texts(app, Notice)))
        await say(pilot, f"/export md {tmp_path / 'out.md'}")
        await settle(pilot, app, lambda: any("Exported" in t and "out.md" in t
                                             for t in texts(app, Notice)))
        await say(pilot, f"/export md {tmp_path}")          # a folder: refused, said so
        await settle(pilot, app, lambda: any("export failed" in t for t in texts(app, Notice)))
        assert any("export failed" in t and "folder" in t for t in texts(app, Notice))
    data = json.loads((tmp_path / "out.json").read_text())
    assert [m["content"] for m in data["messages"]][0] == "the canary host is cn-west-12"
    assert "cn-west-12" in (tmp_path / "out.md").read_text()


class Held(Provider):
    """The first turn waits for `release`; later ones answer at once."""

    def __init__(self):
        self.info = ModelInfo("test", "held")
        self.release = asyncio.Event()
        self.calls = 0

    async def stream(self, request):
        self.calls += 1
        yield TextDelta(f"answer {self.calls} ")
        if self.calls == 1:
            await self.release.wait()
        yield Usage(10, 2)
        yield Finish()


async def test_a_message_typed_during_an_answer_is_queued_visibly(store):
    provider = Held()
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "first")
        await settle(pilot, app, lambda: app.worker.busy)
        await say(pilot, "second")
        await settle(pilot, app, lambda: len(app.query(UserMessage)) == 2)
        second = app.query(UserMessage)[1]
        assert second.has_class("queued") and second.border_subtitle.startswith("queued")

        def screenshot() -> str:
            return app.export_screenshot().replace("&#160;", " ")

        # drawn once the screen is laid out again with the subtitle
        await settle(pilot, app, lambda: "queued · ↑ edits" in screenshot())
        shot = screenshot()
        assert "queued · ↑ edits · sends after this answer" in shot  # on screen, under the message
        assert "1 queued" in str(app.query_one(StatusBar).render())
        provider.release.set()
        await settle(pilot, app, lambda: not second.has_class("queued"))
        await settle(pilot, app, lambda: len(store.history(app.session.id)) == 4
                     and not app.worker.busy)
        assert [m.content for m in store.history(app.session.id) if m.role == "user"] == [
            "first", "second"]


def palette_open(app) -> bool:
    """The command palette is up, its input taking the keys."""
    from textual.command import CommandInput, CommandPalette

    return isinstance(app.screen, CommandPalette) and isinstance(app.focused, CommandInput)


def palette_found(app, title: str) -> bool:
    """The palette's search for what was typed has ended, `title` first in its list and
    highlighted (what Enter runs)."""
    from textual.command import CommandList, CommandPalette

    screen = app.screen
    if not isinstance(screen, CommandPalette) or screen.query_one(
            "CommandInput").value != title:
        return False
    if any(w.node is screen and not w.is_finished for w in app.workers):  # still searching
        return False
    hits = screen.query_one(CommandList)
    return (hits.option_count > 0 and hits.highlighted == 0
            and str(hits.get_option_at_index(0).prompt).startswith(title))


async def test_the_command_palette_offers_every_slash_command(store):
    from picochat.tui import slash

    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert all(f"/{c.name}" in titles for c in slash.COMMANDS)
        await pilot.press("ctrl+p")
        await settle(pilot, app, lambda: palette_open(app))
        for ch in "/info":
            await pilot.press(ch)
        await settle(pilot, app, lambda: palette_found(app, "/info"))
        await pilot.press("enter")
        await settle(pilot, app, lambda: isinstance(app.screen, CardScreen))
        await pilot.press("escape")
        await pilot.press("ctrl+p")  # a command that needs a NAME waits in the prompt for it
        await settle(pilot, app, lambda: palette_open(app))
        for ch in "/rename":
            await pilot.press(ch)
        await settle(pilot, app, lambda: palette_found(app, "/rename"))
        await pilot.press("enter")
        await settle(pilot, app, lambda: app.query_one(Prompt).text == "/rename ")
        assert isinstance(app.focused, Prompt)


async def test_a_long_session_opens_with_the_newest_and_loads_older_on_scroll_up(store):
    short_turns(store, 250)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        from picochat.tui.chat import PAGE

        chat = app.query_one(ChatView)

        def shown() -> list[int]:
            return [w.seq for w in chat.children if getattr(w, "seq", None) is not None]

        # opened (not in the middle of its mount, whose end scrolls to the bottom), laid out
        # and at the bottom, as the reader first sees it
        await settle(pilot, app, lambda: app.transcript_ready.is_set() and bool(shown())
                     and 0 < chat.max_scroll_y <= chat.scroll_y)
        # two screens' worth (each message here is a margin row and a text row), not a page
        opened = len(shown())
        assert 2 * chat.size.height <= 2 * opened <= 2 * chat.size.height + 2 < 2 * PAGE
        assert f"{500 - opened} earlier messages" in str(chat.query_one(".older").render())
        assert texts(app, UserMessage)[-1] == "question 249"
        for expected in [*range(opened + PAGE, 500, PAGE), 500]:
            top = chat.query(UserMessage).first()
            chat.scroll_home(animate=False, immediate=True)
            # the page went in above, and the view scrolled back (after a refresh) so that
            # what was at the top is still where the reader looks; its load has ended
            await settle(pilot, app, lambda: len(shown()) == expected
                         and abs(top.virtual_region.y - chat.scroll_y) <= 2
                         and not chat._older_lock.locked())
            assert abs(top.virtual_region.y - chat.scroll_y) <= 2
            chat.scroll_end(animate=False, immediate=True)
            # back at the bottom, so that the next scroll home is a move to the top again
            await settle(pilot, app, lambda: 0 < chat.max_scroll_y <= chat.scroll_y)
        assert texts(app, UserMessage)[0] == "question 0"
        assert not chat.query(".older")
        assert shown() == sorted(shown()) == list(range(1, 501))


async def test_a_session_of_long_answers_opens_with_only_what_fills_two_screens(store):
    session = store.create_session("t")
    answer = "\n\n".join(f"Paragraph {j}: " + "word " * 60 for j in range(12))
    for i in range(30):
        append_message(store, session.id, "user", f"question {i}", turn_id=f"x{i}")
        append_message(store, session.id, "assistant", answer, turn_id=f"x{i}")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.query_one(ChatView)
        # laid out: a full screen, and more (its answers render after they mount)
        await settle(pilot, app, lambda: bool(chat.query(AssistantMessage))
                     and chat.virtual_size.height >= 1.5 * chat.size.height)
        # one answer is about 40 rows here: the newest one or two fill two screens
        assert 1 <= len(chat.query(AssistantMessage)) <= 2
        assert chat.query_one(".older")


async def test_auto_compaction_announces_itself_and_moves_the_divider(store):
    from picochat.config import ModelConfig

    config = Config(models={"tiny": ModelConfig(name="tiny", model="offline", token_limit=3000)},
                    context_compaction=CompactionConfig(reserve_tokens=1000,
                                                        keep_recent_tokens=300))
    session = long_session(store)
    app = PicochatApp(store, session, resolve_model(config, "tiny"), OfflineProvider(0), config)
    async with app.run_test(size=SIZE) as pilot:
        assert app.worker.info().budget.should_compact(True)
        await chat_once(pilot, app, store, "one more question")
        await settle(pilot, app, lambda: bool(app.query(CheckpointDivider)) and any(
            "auto compaction" in str(n.message) for n in app._notifications))
        [cp] = store.checkpoints(app.session.id)
        assert cp.trigger_reason == "auto"
        messages = [str(n.message) for n in app._notifications]
        assert f"auto compaction: {cp.tokens_before:,} → {cp.tokens_after:,} tokens" in messages
        assert not app.worker.info().budget.should_compact(True)


async def test_a_selected_message_or_code_block_is_copied_with_c(store):
    from picochat.tui.answer import CodeFence

    answer = "Run this:\n\n```python\nprint('hi')\n```\n\nThen check the log."
    app = make_app(store, provider=Recorder(turns=[answer]))
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "how do I say hi?")
        await pilot.press("alt+up")  # from the prompt to the newest item: the code block
        assert isinstance(app.focused, CodeFence)
        await pilot.press("c")
        assert app.clipboard.strip() == "print('hi')"
        await pilot.press("up")
        assert isinstance(app.focused, AssistantMessage)
        await pilot.press("c")
        assert app.clipboard == answer
        await pilot.press("up")
        assert isinstance(app.focused, UserMessage)
        await pilot.press("c")
        assert app.clipboard == "how do I say hi?"
        await pilot.press("enter")  # back to the prompt, which sends nothing
        assert isinstance(app.focused, Prompt)
        await pilot.press("alt+up", "o", "k")  # typing on a selected item goes to the prompt
        assert isinstance(app.focused, Prompt) and app.focused.text == "ok"
        assert len(store.history(app.session.id)) == 2
        await pilot.click(AssistantMessage)  # a click selects too
        assert isinstance(app.focused, (AssistantMessage, CodeFence))


async def test_system_prompt_is_saved_with_the_session_and_sent_first(store):
    provider = Recorder()
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "/system You answer in French.")
        await settle(pilot, app, lambda: store.session(app.session.id).system_prompt
                     == "You answer in French.")
        await chat_once(pilot, app, store, "hello")
        first = provider.turn_requests[-1].messages[0]
        assert first == {"role": "system", "content": "You answer in French."}
    reopened = make_app(store, provider=Recorder())
    async with reopened.run_test(size=SIZE) as pilot:
        assert reopened.worker.system_prompt == "You answer in French."
        await say(pilot, "/system")
        await settle(pilot, reopened, lambda: any("this session's own" in t
                                                  for t in texts(reopened, Notice)))
        await say(pilot, "/system default")
        await settle(pilot, reopened, lambda: store.session(reopened.session.id).system_prompt
                     is None)
        assert reopened.worker.system_prompt == SMALL_KEEP.agent.system_prompt


async def test_tool_calls_show_as_collapsible_blocks_with_their_result(store, tmp_path,
                                                                       monkeypatch):
    from textual.widgets import Collapsible

    from picochat.tui.chat import ToolBlock

    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("the canary host is cn-west-12\n")
    provider = Recorder(turns=[{"calls": [("c1", "read_file", '{"path": "notes.txt"}')],
                                "text": "Reading it. "}, "It says cn-west-12."])
    app = make_app(store, provider=provider)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "what is in notes.txt?")
        await settle(pilot, app, lambda: not app.worker.busy and
                     any(m.role == "tool" for m in store.history(app.session.id))
                     and len(provider.turn_requests) == 2 and answered(app, store))
        await pilot.pause()  # the block and the answer's last blocks are composed
        block = app.query_one(ToolBlock)
        # the line says what was read, as `ask` does (issue 31)
        assert str(block.title) == "⚙ read_file notes.txt · 30 chars (ok)" and block.collapsed
        assert "cn-west-12" in block.result
        block.query_one("CollapsibleTitle").focus()
        await pilot.press("enter")
        assert not block.collapsed
        await pilot.press("c")
        assert "cn-west-12" in app.clipboard
        assert "".join(app.query(AssistantMessage).last().parts) == "It says cn-west-12."
    reopened = make_app(store)  # the history shows the same block when the session reopens
    async with reopened.run_test(size=SIZE) as pilot:
        await settle(pilot, reopened, reopened.transcript_ready.is_set)
        assert len(reopened.query(ToolBlock)) == 1
        assert isinstance(reopened.query_one(ToolBlock), Collapsible)
        assert str(reopened.query_one(ToolBlock).title) == "⚙ read_file notes.txt · 30 chars (ok)"


async def test_an_overflow_compaction_announces_itself_and_the_answer_follows(store):
    from picochat.providers.errors import ContextOverflow

    session = long_session(store)
    provider = Recorder(turns=[ContextOverflow("maximum context length is 2500 tokens",
                                               window=2500), "Answered after all."])
    app = PicochatApp(store, session, resolve_model(SMALL_KEEP, "offline"), provider,
                      SMALL_KEEP)
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "one more question")
        await settle(pilot, app, lambda: bool(app.query(CheckpointDivider)) and any(
            "overflow compaction" in str(n.message) for n in app._notifications))
        [cp] = store.checkpoints(app.session.id)
        assert cp.trigger_reason == "overflow"
        messages = [str(n.message) for n in app._notifications]
        assert f"overflow compaction: {cp.tokens_before:,} → {cp.tokens_after:,} tokens" \
            in messages
        assert "".join(app.query(AssistantMessage).last().parts) == "Answered after all."
        assert len(provider.turn_requests) == 2


async def test_compacting_shows_its_elapsed_time_until_it_ends(store):
    import re

    from tests.helpers.scripted import waiter

    release = asyncio.Event()
    app = PicochatApp(store, long_session(store), resolve_model(SMALL_KEEP, "offline"),
                      Recorder(summaries=[waiter(release)]), SMALL_KEEP)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "/compact")
        bar = app.query_one(StatusBar)
        await settle(pilot, app, lambda: re.search(r"compacting… [1-9]\d*s", bar.state))
        assert "compacting…" in str(bar.render())
        release.set()
        await settle(pilot, app, lambda: bool(app.query(CheckpointDivider)))
        await settle(pilot, app, lambda: bar.state == "")
        assert any("Context compacted" in t for t in texts(app, Notice))


async def test_a_long_answer_streams_into_a_few_widgets_and_copies_as_one(store):
    from picochat.tui.answer import SEGMENT_CHARS, CodeFence, ProseBlock

    paragraph = "The canary host cn-west-12 keeps its port. " * 14
    code = "```python\nfirst = 1\n\n\nsecond = 2\n```\n\n"
    pieces = [paragraph + "\n\n" for _ in range(6)] + [code] + [paragraph + "\n\n"] * 6
    answer = "".join(pieces)
    long_session(store)
    app = make_app(store, provider=Slow(pieces, gap=0.001))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        chat = app.query_one(ChatView)
        await settle(pilot, app, lambda: chat.max_scroll_y > 0)  # laid out: there is a page
        chat.scroll_home(animate=False, immediate=True)  # the reader is up the page
        chat.release_anchor()  # (as a scroll by hand does); sending brings them back
        await chat_once(pilot, app, store, "tell me everything")
        await pilot.pause()
        # following the bottom, once laid out with the whole answer
        await settle(pilot, app, lambda: chat.scroll_y == chat.max_scroll_y)
        assert chat.scroll_y == chat.max_scroll_y
        message = chat.query(AssistantMessage).last()
        assert message.text == answer and message.rendered
        prose = list(message.query(ProseBlock))
        fences = list(message.query(CodeFence))
        # prose is cut into runs of a few thousand characters; the fence is never cut
        assert len(prose) >= len(answer) // (SEGMENT_CHARS + len(pieces[0]))
        assert len(prose) + len(fences) < 13  # not a widget per paragraph
        assert [f.code for f in fences] == ["first = 1\n\n\nsecond = 2\n"]
        assert "".join(p.source for p in prose).count("cn-west-12") == 12 * 14
        assert store.history(app.session.id)[-1].content == answer
        assert message.seq == store.history(app.session.id)[-1].seq
        message.focus()
        await pilot.press("c")
        assert app.clipboard == answer
        fences[0].focus()
        await pilot.press("c")
        assert app.clipboard == "first = 1\n\n\nsecond = 2\n"


async def test_the_panel_takes_focus_undoes_after_asking_and_tells_a_clear_apart(store):
    from textual.widgets import OptionList

    app = PicochatApp(store, long_session(store), resolve_model(SMALL_KEEP, "offline"),
                      OfflineProvider(0), SMALL_KEEP)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "/compact")
        await settle(pilot, app, lambda: bool(app.query(CheckpointDivider)))
        await pilot.press("f2")
        await settle(pilot, app, lambda: isinstance(app.focused, OptionList))
        meta = app.query_one("#cp-meta")
        assert "In use" in str(meta.render())
        await pilot.press("ctrl+z", "y")  # /uncompact from the panel, once confirmed
        await settle(pilot, app, lambda: not app.query(CheckpointDivider))
        assert any("Undid the last compaction: the model now reads the whole conversation" in t
                   for t in texts(app, Notice))
        await pilot.press("/", "c", "l")  # typing in the panel goes to the prompt
        assert isinstance(app.focused, Prompt) and app.focused.text == "/cl"
        app.focused.load_text("/clear")
        await pilot.press("enter")
        await settle(pilot, app, lambda: "/clear after message" in str(meta.render()))


async def test_tab_completes_hints_show_arguments_and_undo_says_what_it_did(store):
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one(Prompt)
        await pilot.press("/", "c", "o", "m")
        await settle(pilot, app, lambda: "/compact" in str(app.query_one("#hints").render()))
        assert "/compact [--preview] [focus|all]" in str(app.query_one("#hints").render())  # not eaten as markup
        await pilot.press("tab")
        assert prompt.text == "/compact "  # takes an argument: a space follows
        prompt.load_text("/und")
        await pilot.press("tab", "enter")
        await settle(pilot, app, lambda: any("Nothing to undo" in t for t in texts(app, Notice)))
        await chat_once(pilot, app, store, "a turn to take back")
        await say(pilot, "/undo")
        await settle(pilot, app, lambda: any("(messages 1–2)" in t for t in texts(app, Notice)))
        [user] = app.query(UserMessage)
        assert user.has_class("retracted") and "undone" in user.border_subtitle


async def test_a_terminal_grown_taller_than_what_is_shown_loads_older_messages(store):
    """Opened small, then made taller than the messages shown: there is nothing to scroll,
    so reaching the top can never ask for more; the view loads older pages itself, in
    order, until it can scroll again."""
    short_turns(store, 250)
    app = make_app(store)
    async with app.run_test(size=(100, 12)) as pilot:
        chat = app.query_one(ChatView)

        def shown() -> list[int]:
            return [w.seq for w in chat.children if getattr(w, "seq", None) is not None]

        await settle(pilot, app, lambda: bool(shown()) and chat.max_scroll_y > 0)
        opened = len(shown())
        await pilot.resize_terminal(100, 120)
        await settle(pilot, app, lambda: len(shown()) > opened and chat.max_scroll_y > 0)
        assert shown() == sorted(shown()) == list(range(shown()[0], 501))


async def test_a_newest_page_too_short_to_scroll_loads_older_messages_itself(store):
    """The newest page is forty rows, and a turn of tool calls shows only its results: the
    page fit the screen with "… earlier messages: scroll up" above it, and with nothing to
    scroll, no key could ever load them."""
    session = short_turns(store, 50)
    append_message(store, session.id, "user", "read the files", turn_id="tt")
    for j in range(20):
        call = {"id": f"c{j}", "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}
        append_message(store, session.id, "assistant", "", tool_calls=[call], turn_id="tt")
        append_message(store, session.id, "tool", f"contents {j}", tool_call_id=f"c{j}",
                       name="read_file", turn_id="tt", tool_status="ok")
    append_message(store, session.id, "assistant", "the newest answer", turn_id="tt")
    app = make_app(store)
    async with app.run_test(size=(100, 80)) as pilot:
        chat = app.query_one(ChatView)
        await settle(pilot, app, lambda: app.ready and (chat.max_scroll_y > 0
                                                         or not chat.query(".older")),
                     what="the view stayed too short to scroll, with older messages unread")
        shown = [w.seq for w in chat.children if getattr(w, "seq", None) is not None]
        assert len(shown) > 21  # more than the tool turn's results and its answer


async def test_a_compact_that_drops_facts_says_how_many_and_where_they_are(store):
    from picochat.config import ModelConfig
    from tests.helpers.conversations import plant_services

    config = Config(models={"small": ModelConfig("small", "offline", token_limit=2_048)},
                    context_compaction=CompactionConfig(keep_recent_tokens=200))
    session = store.create_session("t")
    plant_services(store, session.id)
    app = PicochatApp(store, session, resolve_model(config, "small"), OfflineProvider(0), config)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "/compact")
        await settle(pilot, app, lambda: any("Context compacted" in t
                                             for t in texts(app, Notice)))
        [cp] = store.checkpoints(session.id)
        assert cp.ledger.dropped > 0
        [card] = [t for t in texts(app, Notice) if "Context compacted" in t]
        assert (f"{cp.ledger.dropped:,} older exact facts dropped to fit; /search finds them "
                "in the raw history") in card


async def test_a_page_loaded_while_the_transcript_opens_keeps_the_newest_message_in_view(store):
    """Opening a long session, the view first showed the newest message, then settled some
    messages higher (11 of 32 opens): a page of older messages loaded while the newest were
    still laying out, and the view held its old offset instead of the bottom it follows."""
    import asyncio

    short_turns(store, 250)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.query_one(ChatView)
        await settle(pilot, app, lambda: app.ready and 0 < chat.max_scroll_y <= chat.scroll_y)
        newest = chat.children[-1]
        page = asyncio.ensure_future(chat.load_older())  # a page asked for as it opens
        newest.styles.height = 30  # meanwhile the newest lays out taller (Markdown settling)
        await page
        await settle(pilot, app, lambda: chat.scroll_y >= chat.max_scroll_y - 1,
                     what="the newest message is out of view")
