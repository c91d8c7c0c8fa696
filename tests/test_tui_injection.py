"""Text that did not come from picochat's own code reaches the screen as literal text.

Textual reads a plain `str` as markup in notices, option lists, border titles and most widgets:
a provider error holding `[@click=app.quit]` became a notice whose click quit the app (or ran
`/system PWNED`), and an unbalanced `[/]` raised MarkupError. Terminal escapes went through too:
a session named `esc\\x1b]0;T\\x07` retitled the terminal from /sessions.

Each test feeds markup and escape sequences through one surface (notices, titles, lists, the
status bar, the transcript) and checks what the screen shows: the literal text, no ESC or BEL,
no click action attached to it, and the app still running with its system prompt unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets._toast import Toast

from picochat.config import CompactionConfig, Config, ModelConfig, UiConfig
from picochat.models import create_provider, resolve_model
from picochat.paths import resolve_paths
from picochat.providers.offline import OfflineProvider
from picochat.tui.app import PicochatApp
from picochat.tui.chat import Notice, ToolBlock
from picochat.tui.panel import CheckpointPanel
from picochat.tui.prompt import Prompt
from picochat.tui.screens import CardScreen, ConfirmScreen, PickScreen
from picochat.tui.status import StatusBar
from tests.helpers.conversations import long_session
from tests.helpers.fakes.openai import FakeOpenAI, summary_text
from tests.helpers.scripted import Recorder
from tests.helpers.tui import SMALL_KEEP, idle, make_app, say, texts
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message

WIDE = (160, 40)  # wide enough that no hostile line wraps on screen

# markup that would run an action, an unbalanced closing tag (MarkupError when parsed), an
# opening tag, a terminal title (OSC ... BEL) and a screen clear (CSI)
CLICK = "[@click=app.quit]quit[/]"
HOSTILE = f"{CLICK} [bold]b [/] \x1b]0;T\x07\x1b[2J end"
SHOWN = f"{CLICK} [bold]b [/]  end"  # what the user must read: the escapes gone, the rest as is


def screen_text(app) -> str:
    """Every character the compositor would send to the terminal for the top screen (with
    its toasts), row by row."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


def screen_actions(app) -> list[str]:
    """The click actions attached to anything on the top screen: markup in text that was
    parsed leaves its `@click` here."""
    found = []
    for strip in app.screen._compositor.render_strips():
        for segment in strip:
            meta = segment.style.meta if segment.style else {}
            if "@click" in meta:
                found.append(str(meta["@click"]))
    return found


async def click_on(pilot, app, needle: str) -> None:
    """Click where `needle` is shown (in a notice): on a link, had the text been read as
    markup. Returns once the click is answered: the clicked notice has closed (after any
    action the click ran, which the caller looks for)."""
    toasts = len(app.screen.query(Toast))
    for y, row in enumerate(screen_text(app).split("\n")):
        if needle in row:
            await pilot.click(offset=(row.index(needle) + 1, y))
            await settle(pilot, app, lambda: not app.is_running
                         or len(app.screen.query(Toast)) < toasts,
                         what=f"the notice showing {needle!r} did not close when clicked")
            return
    raise AssertionError(f"{needle!r} is not on screen")


async def shows(pilot, app, *needles: str) -> str:
    """Wait until every one of `needles` is on screen (drawn, not only in a widget), and
    return what the screen shows."""
    await settle(pilot, app, lambda: all(n in screen_text(app) for n in needles),
                 what=f"never on screen: {needles!r}")
    return screen_text(app)


def toast_text(app) -> str:
    return "\n".join(str(t.render()) for t in app.screen.query(Toast))


def assert_literal(text: str, shown: str = SHOWN) -> None:
    assert shown in text, f"{shown!r} not in {text!r}"
    assert "\x1b" not in text and "\x07" not in text
    assert "0;T" not in text  # the title's body went with its escape


def assert_on_screen(app, shown: str = SHOWN, quoted: bool = False) -> None:
    """What the terminal gets: the literal text, no escape, no action from the text. Where
    picochat quotes a value with repr (`quoted`), an escape shows as the text `\\x1b]0;T`."""
    assert app.is_running
    text = screen_text(app)
    assert shown in text, f"{shown!r} not in {text!r}"
    assert "\x1b" not in text and "\x07" not in text
    assert quoted or "0;T" not in text
    assert not [a for a in screen_actions(app) if "quit" in a or "slash" in a]


# --- notices (notify) -----------------------------------------------------------------------

async def test_a_provider_error_in_an_auto_compaction_notice_is_shown_not_obeyed(
        store, monkeypatch, fake_openai: FakeOpenAI):
    """A hostile server answers the summary request with 500 and markup in its message: the
    notice shows that markup as text; clicking it runs nothing."""
    monkeypatch.setenv("FAKE_API_KEY", "test-key")
    hostile = f"[@click=app.slash('system PWNED')]Click here[/] {CLICK} \x1b]0;T\x07[/]"
    failure = ("status", 500, {"error": {"message": hostile, "type": "server_error"}})
    fake_openai.script_summary(*[failure] * 6)  # every summary request, retries too
    config = Config(models={"fake": ModelConfig(
        name="fake", model="openai/fake-model", api_base=fake_openai.base_url,
        api_key_env="FAKE_API_KEY", token_limit=3000)},
        context_compaction=CompactionConfig(reserve_tokens=1000, keep_recent_tokens=300))
    resolved = resolve_model(config, "fake")
    session = long_session(store, turns=12)  # over the threshold, under the window: no
    app = PicochatApp(store, session, resolved, create_provider(resolved), config)  # fallback
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready, timeout=90)
        assert app.worker.info().budget.should_compact(True)
        await say(pilot, "one more question")
        await settle(pilot, app, lambda: "compaction failed" in toast_text(app))
        await shows(pilot, app, "Click here")  # the notice drawn
        # the provider's message, as sent (the toast wraps it on screen)
        assert_literal(toast_text(app), "[@click=app.slash('system PWNED')]Click here[/] "
                                        f"{CLICK} [/]")
        assert_on_screen(app, "[@click=app.slash('system PWNED')]Click here[/]")
        await click_on(pilot, app, "Click here")  # only closes the notice
        # the turn and any command the click could have queued (/system) have ended
        await settle(pilot, app, lambda: not app.is_running or idle(app))
        assert app.is_running
        assert store.session(session.id).system_prompt is None
        assert "PWNED" not in (app.worker.system_prompt or "")


async def test_theme_file_names_and_values_in_notices_are_literal(store, tmp_path):
    paths = resolve_paths(str(tmp_path / "data"), str(tmp_path / "cfg" / "config.toml"))
    paths.user_themes_dir.mkdir(parents=True)
    # a file name with markup and an escape; a key (echoed as unknown) with an unbalanced tag
    (paths.user_themes_dir / "x[@click=app.quit]q[bold].toml").write_text(
        'name = "x"\n"[/]\\u001b]0;T\\u0007 [@click=app.quit]k" = "#ffffff"\n')
    config = Config(ui=UiConfig(theme="[@click=app.quit]t[/] [bold]"))
    session = store.create_session("t")
    app = PicochatApp(store, session, resolve_model(config, "offline"), OfflineProvider(0),
                      config, paths)
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        # both notes of the start are shown, as notices drawn on the screen
        await settle(pilot, app, lambda: "unknown key" in toast_text(app)
                     and "unknown theme" in toast_text(app))
        await shows(pilot, app, "unknown key", "unknown theme")
        text = toast_text(app)
        assert_literal(text, "x[@click=app.quit]q[bold].toml: [/] [@click=app.quit]k: "
                             "unknown key")
        assert "unknown theme '[@click=app.quit]t[/] [bold]'" in text
        assert not [a for a in screen_actions(app) if "quit" in a]
        assert app.is_running


# --- titles and lists -----------------------------------------------------------------------

def stored_as_named(store, name: str) -> None:
    """A session with a name picochat now refuses (escapes), as an older picochat or another
    program could have stored it."""
    session = store.create_session("to be renamed")
    with store.core.write() as c:
        c.execute("UPDATE sessions SET name = ? WHERE id = ?", (name, session.id))


async def test_a_session_name_in_the_list_status_bar_info_card_and_delete_question(store):
    """The session name of the issue, which retitled the terminal from /sessions."""
    store.create_session("other")
    stored_as_named(store, f"esc{HOSTILE}")
    app = make_app(store, name=f"esc{HOSTILE}")
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)
        assert_literal(str(app.query_one(StatusBar).render()), f"esc{SHOWN}")
        assert_on_screen(app, f"esc{SHOWN}")           # the status bar on screen

        await say(pilot, "/sessions")
        from picochat.tui.session_picker import SessionPicker

        await settle(pilot, app, lambda: isinstance(app.screen, SessionPicker))
        await shows(pilot, app, "the most recently active first")  # the list drawn
        assert_on_screen(app, f"esc{SHOWN}")
        await pilot.press("escape")

        await say(pilot, "/info")
        await settle(pilot, app, lambda: isinstance(app.screen, CardScreen))
        await shows(pilot, app, "Context (/info)")  # the card drawn: its title
        assert_on_screen(app, f"esc{SHOWN}")
        await pilot.press("escape")

        await say(pilot, "/delete")
        await settle(pilot, app, lambda: isinstance(app.screen, ConfirmScreen))
        await shows(pilot, app, "Delete session")  # the question drawn
        assert_on_screen(app, "esc[@click=app.quit]quit[/] [bold]b [/]", quoted=True)
        await pilot.press("n")
        await settle(pilot, app, lambda: not isinstance(app.screen, ConfirmScreen))
        await pilot.pause()  # the answer's callback and what it caused handled (no time)
        assert app.is_running and store.find_session(f"esc{HOSTILE}")


async def test_rename_shows_the_new_name_literally_in_the_notice_and_the_status_bar(store):
    """Markup in a new name is shown as written; escapes in one are refused (a session name
    is one line of visible text) and the name stays."""
    markup = f"{CLICK} [bold]b [/] end"
    app = make_app(store)
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, f"/rename {HOSTILE}")
        await settle(pilot, app, lambda: any("one line of visible text" in t
                                             for t in texts(app, Notice)))
        assert app.session.name == "t"
        await say(pilot, f"/rename {markup}")
        await settle(pilot, app, lambda: any("renamed" in t for t in texts(app, Notice)))
        # the notice and the status bar both drawn with the new name
        await settle(pilot, app, lambda: markup in str(app.query_one(StatusBar).render())
                     and screen_text(app).count(markup) >= 2)
        assert_literal(str(app.query_one(StatusBar).render()), markup)
        assert_literal("\n".join(texts(app, Notice)), f"Session renamed to {markup}")
        assert_on_screen(app, markup)


async def test_search_query_and_snippets_are_literal_in_the_list(store):
    session = store.create_session("t")
    append_message(store, session.id, "user", f"findme {HOSTILE}", turn_id="x1")
    append_message(store, session.id, "assistant", "ok", turn_id="x1")
    app = make_app(store)
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/search findme [@click=app.quit]quit[/] [bold]")
        await settle(pilot, app, lambda: isinstance(app.screen, PickScreen))
        text = await shows(pilot, app, "matches", "message 1 · you:")  # drawn
        assert "1 message matches 'findme [@click=app.quit]quit[/] [bold]'" in text  # title
        # the snippet, its matches marked «»
        assert_on_screen(app, "message 1 · you: «findme» [@«click»=«app».«quit»]"
                              "«quit»[/] [«bold»]b [/]  end")
        await pilot.press("escape")
        await settle(pilot, app, lambda: not app.is_running
                     or not isinstance(app.screen, PickScreen))
        assert app.is_running


async def test_the_checkpoint_panel_shows_a_hostile_summary_literally(store):
    summary = summary_text(1) + f"\n\n{HOSTILE}\n"
    session = long_session(store, turns=8)
    app = PicochatApp(store, session, resolve_model(SMALL_KEEP, "offline"),
                      Recorder(summaries=[summary]), SMALL_KEEP)
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/compact")
        await settle(pilot, app, lambda: bool(store.checkpoints(session.id))
                     and not app.worker.busy)
        await pilot.press("f2")
        panel = app.query_one(CheckpointPanel)
        # open and drawn: the summary's own title line is on screen
        await settle(pilot, app, lambda: panel.has_class("open"))
        await shows(pilot, app, "Summary 1: what the model reads")
        panel.scroll_end(animate=False)
        shown = await shows(pilot, app, "[@click=app.quit]quit[/]")  # the end of the summary
        assert "[@click=app.quit]quit[/]" in shown and "\x1b" not in shown
        assert "\x07" not in shown and "0;T" not in shown
        assert not [a for a in screen_actions(app) if "quit" in a]
        assert app.is_running


# --- the transcript and the prompt -----------------------------------------------------------

async def test_model_names_in_notices_and_the_status_bar_are_literal(store):
    hostile_key = f"m{HOSTILE}"   # a [models] key (no "/": not read as a litellm string)
    config = Config(models={hostile_key: ModelConfig(name=hostile_key, model="offline")})
    app = make_app(store, config=config)
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/model [@click=app.quit]quit[bold] \x1b]0;T\x07")
        await settle(pilot, app, lambda: bool(app.query("Notice.error")))
        await shows(pilot, app, "unknown model '")
        error = texts(app, Notice)[-1]
        assert "unknown model '[@click=app.quit]quit[bold] \\x1b]0;T\\x07'" in error
        assert_on_screen(app, "unknown model '[@click=app.quit]quit[bold]", quoted=True)
        await say(pilot, f"/model {hostile_key}")
        await settle(pilot, app, lambda: any(t.startswith("Model: ") for t in texts(app, Notice)))
        # the notice and the status bar both drawn with the new model's name
        await settle(pilot, app, lambda: f"· m{SHOWN}" in str(app.query_one(StatusBar).render())
                     and screen_text(app).count(f"m{SHOWN}") >= 2)
        assert_literal(texts(app, Notice)[-1], f"Model: m{SHOWN}")
        assert_literal(str(app.query_one(StatusBar).render()), f"· m{SHOWN}")
        assert_on_screen(app, f"m{SHOWN}")


async def test_export_to_a_path_with_markup_and_escapes_names_it_literally(store, tmp_path):
    name = "x[@click=app.quit]q[/] [bold]\x1b[2J.md"
    (tmp_path / name).parent.mkdir()  # the "/" of "[/]" makes a folder: /export creates none
    app = make_app(store)
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, f"/export md {tmp_path / name}")
        await settle(pilot, app, lambda: any("Exported" in t for t in texts(app, Notice)))
        await shows(pilot, app, "Exported")
        assert_on_screen(app, "x[@click=app.quit]q[/] [bold].md")


async def test_tool_names_and_model_answers_in_the_transcript_are_literal(store, tmp_path,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    provider = Recorder(turns=[{"calls": [("c1", f"t{HOSTILE}", "{}")], "text": "Using it. "},
                               f"answer {HOSTILE}"])
    app = make_app(store, provider=provider)
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "go")
        await settle(pilot, app, lambda: not app.worker.busy and len(provider.turn_requests) == 2
                     and bool(app.query(ToolBlock)))
        shown = await shows(pilot, app, f"t{SHOWN}",  # both turns drawn
                            "answer [@click=app.quit]quit[/] [bold]b [/]")
        assert f"t{SHOWN}" in shown            # the tool's title
        assert "answer [@click=app.quit]quit[/] [bold]b [/]" in shown
        assert_on_screen(app, f"t{SHOWN}")


async def test_an_earlier_prompt_recalled_with_up_carries_no_escape(store):
    """Earlier prompts come from the database (any client wrote them) into the prompt."""
    session = store.create_session("t")
    append_message(store, session.id, "user", f"old {HOSTILE}", turn_id="x1")
    app = make_app(store)
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)
        app.query_one(Prompt).focus()
        await pilot.press("up")
        await settle(pilot, app, lambda: app.query_one(Prompt).text == f"old {SHOWN}",
                     what="up did not recall the earlier prompt")
        assert app.query_one(Prompt).text == f"old {SHOWN}"
        text = await shows(pilot, app, f"old {SHOWN}")  # in the prompt, on screen
        assert "\x1b" not in text and "\x07" not in text


# --- the one gateway ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", [HOSTILE, "[/]", "[bold]", "[@click=app.quit]x[/]",
                                  "trailing \\"])
async def test_any_text_through_literal_in_a_notice_is_shown_as_is(store, text):
    """The one gateway, fed markup that is broken, unbalanced or live: the notice shows the
    cleaned text as is, and a click on it only closes it."""
    from picochat.tui.safe import clean, literal

    app = make_app(store)
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await settle(pilot, app, lambda: app.ready)
        app.notify(literal(text), severity="warning")
        await settle(pilot, app, lambda: toast_text(app) == clean(text))
        await shows(pilot, app, clean(text))  # the notice drawn
        assert toast_text(app) == clean(text)
        assert_on_screen(app, clean(text))
        await click_on(pilot, app, clean(text))
        assert app.is_running


def test_every_notify_and_title_in_the_app_goes_through_literal():
    """A source audit backing the tests above: in picochat/tui no `notify(` takes a bare
    f-string or variable, and no border title is set from one."""
    import re

    root = Path(__file__).parent.parent / "picochat" / "tui"
    bad = []
    for path in root.glob("*.py"):
        source = path.read_text()
        for m in re.finditer(r"\.notify\(\s*([^\s)][^,)]*)", source):
            if not m.group(1).startswith("literal(") and "super()" not in source[
                    m.start() - 8:m.start()]:
                bad.append(f"{path.name}: notify({m.group(1)}")
        for m in re.finditer(r"border_(?:sub)?title = ([^\n]+)", source):
            value = m.group(1)
            if not (value.startswith("literal(") or value.startswith('"')
                    or value in ("INTERRUPTED_NOTE", "QUEUED", "EDITOR_HINT")):
                bad.append(f"{path.name}: {m.group(0)}")
    assert not bad, bad
