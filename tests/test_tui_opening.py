"""The screen first, then the session (issue 33, item 3): `picochat` draws its bar, prompt and
keys, then opens the database, the session and the model in a thread. Nothing a user does in
that moment is lost, and what fails there is said as any command says it.

Each test runs the app as the CLI starts it (`main([...])`, headless), with the opening held
at a gate until the test has looked at the screen: the tests wait for events, never for the
opening's length.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from textual.widgets import OptionList

from picochat import catalog
from picochat.cli import commands
from picochat.cli.main import main
from picochat.storage import open_store
from picochat.tui import app as tui_app, slash
from picochat.tui.chat import AssistantMessage, ChatView, UserMessage
from picochat.tui.panel import CheckpointPanel
from picochat.tui.prompt import Prompt
from picochat.tui.status import StatusBar
from tests.helpers.storage import append_message, dead_draft
from tests.helpers.tui import answered, conversation
from tests.helpers.waiting import WAIT_S, settle


class Opening:
    """The session's opening, held at `gate` until the test sets it; `passed` once it went
    on (or gave up waiting: a failure bound), `ended` once it returned or raised."""

    def __init__(self) -> None:
        self.gate, self.passed, self.ended = threading.Event(), threading.Event(), \
            threading.Event()
        self.left_behind = False  # the CLI returned while the opening was still held


@pytest.fixture
def opening(monkeypatch: pytest.MonkeyPatch) -> Opening:
    held = Opening()
    real = catalog.open_chat

    def gated(*args, **kwargs):
        try:
            held.gate.wait(WAIT_S)
            held.passed.set()
            return real(*args, **kwargs)
        finally:
            held.ended.set()

    monkeypatch.setattr(catalog, "open_chat", gated)
    return held


@pytest.fixture
def held(home: Path, monkeypatch: pytest.MonkeyPatch, opening: Opening):
    """`held(drive, *argv) -> status`: `picochat ARGV` as the CLI starts it, headless; the
    session opens once `drive(app, pilot, gate)` sets `gate` (or once the CLI has returned:
    an opening left behind then ends too)."""
    monkeypatch.setattr(commands, "has_terminal", lambda: True)

    def run(drive, *argv: str) -> int:
        async def app_run(app) -> None:
            async def driven() -> None:
                async with app.run_test(size=(100, 30)) as pilot:
                    await drive(app, pilot, opening.gate)
            await asyncio.wait_for(driven(), 2 * WAIT_S)  # a failure bound: a stuck app fails

        monkeypatch.setattr(tui_app.PicochatApp, "run", lambda self: asyncio.run(app_run(self)))
        try:
            return main(list(argv))
        finally:  # an opening a quit left behind ends here, not in the next test
            opening.left_behind = not opening.passed.is_set()
            opening.gate.set()
            assert opening.ended.wait(WAIT_S), "the opening never ended"

    return run


def bar(app) -> str:
    return str(app.query_one(StatusBar).render())


def session_names(home: Path) -> list[str]:
    """The sessions the database holds (read after the app has ended)."""
    store = open_store(home / "data" / "picochat.db")
    try:
        return [s.name for s in store.list_sessions()]
    finally:
        store.close()


def test_the_bar_says_opening_then_names_the_session_and_a_message_sent_meanwhile_goes_there(
        held, home):
    seen: dict[str, object] = {}

    async def drive(app, pilot, gate) -> None:
        await pilot.pause()
        seen["first"] = bar(app)
        assert not app.opened
        prompt = app.query_one(Prompt)
        assert app.focused is prompt  # typing needs nothing the opening brings
        await pilot.press(*"our Redis runs on 6380")
        await pilot.press("enter")
        seen["typed"] = conversation(app)  # not shown as sent before its session is open
        gate.set()
        await settle(pilot, app, lambda: app.opened and app.ready)
        seen["opened"] = bar(app)
        store = app.sessions._store
        await settle(pilot, app, lambda: answered(app, store))
        seen["rows"] = [(m.role, m.content) for m in store.history(app.session.id)][:1]

    assert held(drive, "--model", "offline", "-s", "work") == 0
    assert "opening…" in seen["first"] and "work" not in seen["first"]
    assert "counting" not in seen["first"]  # no figures are on their way yet
    assert seen["typed"] == []
    assert "work" in seen["opened"] and "opening" not in seen["opened"]
    assert seen["rows"] == [("user", "our Redis runs on 6380")]


def test_a_missing_key_found_after_the_first_frame_is_the_line_and_status_ask_gives(
        held, home, monkeypatch, capsys):
    assert main(["ask", "--model", "gpt-4o-mini", "hello"]) != 0
    ask_line = capsys.readouterr().err
    ask_status = main(["ask", "--model", "gpt-4o-mini", "hello"])
    capsys.readouterr()

    async def drive(app, pilot, gate) -> None:
        await pilot.pause()
        await pilot.press(*"words typed meanwhile")
        gate.set()
        await settle(pilot, app, lambda: app.open_error is not None)

    status = held(drive, "--model", "gpt-4o-mini")
    err = capsys.readouterr().err
    assert status == ask_status == 2
    assert ask_line.strip() in err  # the same one line, after the screen is restored
    assert "Traceback" not in err
    # what was typed has no session to go back to: the terminal keeps the words
    assert "words typed meanwhile" in err
    assert session_names(home) == []  # nothing was written: no session made


@pytest.mark.parametrize("sent", [False, True])
def test_quitting_before_the_session_opens_ends_at_once_and_keeps_the_words(
        held, opening, capsys, sent):
    """Typed, or sent with Enter (it waits for the session): quitting keeps the words on the
    terminal, and the CLI does not wait for the opening (another picochat's lock can hold it
    for seconds)."""
    async def drive(app, pilot, gate) -> None:
        await pilot.pause()
        await pilot.press(*"half a thought")
        if sent:
            await pilot.press("enter")
            await pilot.press(*"and more")
        await pilot.press("ctrl+q")  # the gate stays shut: the session never opened here
        assert not app.opened

    assert held(drive, "--model", "offline", "-s", "later") == 0
    assert opening.left_behind  # the CLI returned with the opening still held
    err = capsys.readouterr().err
    # no session to give the words back to at the next start: the terminal keeps them
    assert "half a thought" in err and "Traceback" not in err
    assert ("and more" in err) is sent


def test_a_message_sent_while_opening_is_kept_when_the_opening_fails(held, capsys):
    async def drive(app, pilot, gate) -> None:
        await pilot.pause()
        await pilot.press(*"important words")
        await pilot.press("enter")
        gate.set()
        await settle(pilot, app, lambda: app.open_error is not None)

    assert held(drive, "--model", "gpt-4o-mini") == 2  # no key
    err = capsys.readouterr().err
    assert "important words" in err and "no API key" in err


def test_a_palette_command_picked_while_opening_waits_for_the_session_and_never_blocks_keys(
        held, home):
    """The palette runs its command on the app's message queue: waiting there for the session
    froze every key, and a failed opening could never end the app."""
    seen: dict[str, object] = {}

    async def drive(app, pilot, gate) -> None:
        await pilot.pause()
        info = next(c for c in slash.COMMANDS if c.name == "info")
        app.call_later(tui_app._runner(app, info))  # as the palette does
        await pilot.press(*"still typing")  # keys are handled meanwhile
        seen["typed"] = app.query_one(Prompt).text
        gate.set()
        await settle(pilot, app, lambda: type(app.screen).__name__ == "CardScreen")

    assert held(drive, "--model", "offline") == 0
    assert seen["typed"] == "still typing"


def test_a_palette_command_picked_while_opening_does_not_keep_a_failed_app_alive(held):
    async def drive(app, pilot, gate) -> None:
        await pilot.pause()
        info = next(c for c in slash.COMMANDS if c.name == "info")
        app.call_later(tui_app._runner(app, info))
        gate.set()
        await settle(pilot, app, lambda: app.open_error is not None)

    assert held(drive, "--model", "gpt-4o-mini") == 2


def test_a_bug_while_starting_the_session_ends_the_app_as_an_internal_error(
        held, monkeypatch, capsys):
    def broken(self, start):
        raise RuntimeError("a bug")

    monkeypatch.setattr(tui_app.PicochatApp, "_start", broken)

    async def drive(app, pilot, gate) -> None:
        await pilot.pause()
        gate.set()
        await settle(pilot, app, lambda: app.open_error is not None)

    assert held(drive, "--model", "offline") == 1
    err = capsys.readouterr().err
    assert "internal error (RuntimeError)" in err and "a bug" not in err


@pytest.mark.parametrize("key", ["f2", "f3"])
def test_f2_or_f3_pressed_while_opening_shows_its_view_once_the_session_is_open(held, home, key):
    seen: dict[str, object] = {}

    async def drive(app, pilot, gate) -> None:
        await pilot.pause()
        await pilot.press(key)
        seen["before"] = type(app.screen).__name__, app.query_one(CheckpointPanel).is_open
        gate.set()
        if key == "f3":  # the /info card
            await settle(pilot, app, lambda: type(app.screen).__name__ == "CardScreen")
            seen["shown"] = app.screen.title_text == "Context (/info)"
        else:  # the panel, filled, its list of checkpoints focused
            await settle(pilot, app, lambda: bool(app.query(OptionList))
                         and isinstance(app.focused, OptionList))
            seen["shown"] = app.query_one(CheckpointPanel).is_open
        seen["errors"] = [n.message for n in app._notifications if n.severity == "error"]

    assert held(drive, "--model", "offline") == 0
    assert seen["before"] == ("Screen", key == "f2")  # nothing shown before there is a session
    assert seen["shown"] is True
    assert seen["errors"] == []


# --- a session with a transcript: drawn from the store before the model opens -----------------


def seed(home: Path, name: str, exchanges: int, draft: str | None = None) -> None:
    """A session `name` holding `exchanges` questions and answers, the last one's answer
    "the newest answer"; `draft`: then a question whose answer a killed picochat left."""
    store = open_store(home / "data" / "picochat.db")
    try:
        sid = store.create_session(name).id
        for i in range(exchanges):
            append_message(store, sid, "user", f"question {i}", turn_id=f"t{i}")
            last = i == exchanges - 1
            append_message(store, sid, "assistant", "the newest answer" if last else
                           f"answer {i}", turn_id=f"t{i}")
        if draft is not None:
            append_message(store, sid, "user", "and the port?", turn_id="t_dead")
            dead_draft(store, sid, "t_dead", draft)
    finally:
        store.close()


def answers(app) -> list[str]:
    return [w.source for w in app.query_one(ChatView).query(AssistantMessage)]


def test_a_long_session_is_on_screen_while_its_model_still_opens_and_stays_as_drawn(
        held, home):
    seed(home, "work", 60)
    seen: dict[str, object] = {}

    async def drive(app, pilot, gate) -> None:
        await settle(pilot, app, lambda: "the newest answer" in answers(app),
                     what="the transcript was not drawn while the session opened")
        seen["early"] = answers(app), bar(app), app.opened
        widgets = list(app.query_one(ChatView).children)
        gate.set()
        await settle(pilot, app, lambda: app.opened and app.ready)
        seen["opened"] = answers(app), bar(app)
        # nothing changed meanwhile: the transcript is not drawn a second time
        seen["same widgets"] = list(app.query_one(ChatView).children) == widgets
        chat = app.query_one(ChatView)
        before = len(chat.query(AssistantMessage))
        await chat.load_older()  # scrolling up reads the older pages, from the worker
        seen["older"] = len(chat.query(AssistantMessage)) > before

    assert held(drive, "--model", "offline", "-s", "work") == 0
    early, early_bar, opened = seen["early"]
    assert "opening…" in early_bar and opened is False
    assert seen["opened"][0] == early
    assert "opening" not in seen["opened"][1]
    assert seen["same widgets"] is True
    assert seen["older"] is True


def test_a_message_written_elsewhere_while_the_session_opens_shows_once_it_has(held, home):
    seed(home, "work", 5)
    seen: dict[str, object] = {}

    async def drive(app, pilot, gate) -> None:
        await settle(pilot, app, lambda: "the newest answer" in answers(app))
        other = open_store(home / "data" / "picochat.db")  # another picochat, meanwhile
        try:
            sid = other.find_session("work").id
            append_message(other, sid, "user", "asked elsewhere", turn_id="x")
            append_message(other, sid, "assistant", "answered elsewhere", turn_id="x")
        finally:
            other.close()
        gate.set()
        await settle(pilot, app, lambda: "answered elsewhere" in answers(app),
                     what="the message written meanwhile never showed")
        seen["answers"] = answers(app)

    assert held(drive, "--model", "offline", "-s", "work") == 0
    assert seen["answers"][-2:] == ["the newest answer", "answered elsewhere"]


def test_an_answer_a_killed_picochat_left_shows_once_the_session_opens(held, home):
    seed(home, "work", 3, draft="The port is 8443")
    seen: dict[str, object] = {}

    async def drive(app, pilot, gate) -> None:
        gate.set()
        await settle(pilot, app, lambda: app.opened and app.ready)
        await settle(pilot, app, lambda: "The port is 8443" in answers(app),
                     what="the recovered answer was not in the transcript")
        seen["notes"] = [str(n.message) for n in app._notifications]

    assert held(drive, "--model", "offline", "-s", "work") == 0
    assert any("cut off when picochat stopped" in n for n in seen["notes"])


@pytest.mark.parametrize("key", ["e", "alt+p"])
def test_editing_or_pinning_a_message_drawn_while_opening_waits_for_the_session(
        held, home, key):
    """The transcript is there before the worker: e (edit from here) and alt+p (pin) on one
    of its messages ended the app, or failed, as keys that ran before there was a session."""
    seed(home, "work", 5)
    seen: dict[str, object] = {}

    async def drive(app, pilot, gate) -> None:
        await settle(pilot, app, lambda: "the newest answer" in answers(app))
        await pilot.press("alt+up", "up")  # the newest answer, then the question before it
        assert isinstance(app.focused, UserMessage) and app.focused.text == "question 4"
        await pilot.press(key)
        assert not app.opened
        gate.set()
        await settle(pilot, app, lambda: app.opened and app.ready)
        if key == "e":
            prompt = app.query_one(Prompt)
            await settle(pilot, app, lambda: prompt.text == "question 4",
                         what="the message never went to the prompt to edit")
        else:
            store = app.sessions._store
            await settle(pilot, app, lambda: bool(store.pins(app.session.id)),
                         what="the message was never pinned")
            seen["pins"] = [p.text for p in store.pins(app.session.id)]
        seen["errors"] = [str(n.message) for n in app._notifications if n.severity == "error"]

    assert held(drive, "--model", "offline", "-s", "work") == 0
    assert seen["errors"] == []
    if key == "alt+p":
        assert seen["pins"] == ["question 4"]


def test_an_older_page_asked_for_while_opening_leaves_no_gap_when_the_transcript_is_read_again(
        held, home):
    """Scrolled to the top of the transcript drawn early: its older page waits for the
    session, and the session's opening reads the transcript again (here: an answer a killed
    picochat left). The page read for what was replaced went in above the new one, and the
    messages between the two were never shown."""
    seed(home, "work", 100, draft="The port is 8443")
    seen: dict[str, object] = {}

    async def drive(app, pilot, gate) -> None:
        await settle(pilot, app, lambda: "the newest answer" in answers(app))
        chat = app.query_one(ChatView)
        chat.scroll_home(animate=False, immediate=True)
        chat.want_older()  # as reaching the top asks
        await settle(pilot, app, chat._older_lock.locked)
        gate.set()
        await settle(pilot, app, lambda: "The port is 8443" in answers(app)
                     and not chat._older_lock.locked())
        await chat.load_older()  # the reader goes on up
        seen["seqs"] = [w.seq for w in chat.children if getattr(w, "seq", None) is not None]

    assert held(drive, "--model", "offline", "-s", "work") == 0
    seqs = seen["seqs"]
    assert seqs == list(range(seqs[0], seqs[-1] + 1)), "a gap or a duplicate"
