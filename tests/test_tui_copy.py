"""What the app copies is what it shows (issue 31, item 4).

An answer may carry text the screen never draws: an OSC 8 hyperlink whose target is a shell
command, Unicode tag characters that spell one invisibly, zero-width spaces, bidi controls. The
screen drops the escapes and names the invisible characters (`<U+E0072>`); before this fix /copy
and c put the raw text on the clipboard, so a reader who copied `ls -la` pasted
`rm -rf ~/important-data` with it. Each copy path is driven as a user drives it, and the
clipboard is compared with what the item shows.
"""

from __future__ import annotations

import json

from textual.widgets import Static

from picochat.textsafe import clean, json_for_terminal
from picochat.tui.answer import AssistantMessage, CodeFence
from picochat.tui.chat import ToolBlock, UserMessage
from tests.helpers.scripted import Recorder
from tests.helpers.tui import SIZE, chat_once, make_app, say
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message

HIDDEN = "rm -rf ~/important-data"
LINK = f"\x1b]8;;{HIDDEN}\x1b\\ls -la\x1b]8;;\x1b\\"     # shows `ls -la`; the target is HIDDEN
TAGS = "".join(chr(0xE0000 + ord(c)) for c in HIDDEN)  # HIDDEN in tag characters: drawn as nothing
INVISIBLE = f"\u200b{TAGS}\u2060\ufeff"
ANSWER = (f"Run {LINK} to list it.{INVISIBLE} Then stop\u202e.\n\n"
          f"```sh\n{LINK}{INVISIBLE}\n```\n")


def assert_nothing_hidden(copied: str) -> None:
    """No escape, no bidi control and no invisible character reached the clipboard: the
    command is not in it, in any spelling, and what hid it is named."""
    assert "\x1b" not in copied and HIDDEN not in copied
    assert not any(c in copied for c in "\u200b\u2060\ufeff\u202e" + TAGS), repr(copied)
    assert "<U+E0072><U+E006D>" in copied  # "rm" as tag characters, named as the screen names it


def notices(app, start: str) -> list[str]:
    return [str(n.message) for n in app._notifications if str(n.message).startswith(start)]


async def press_c(pilot, app, item) -> str:
    """Select `item`, press c, and return what reached the clipboard once it got there."""
    app.copy_to_clipboard("")
    item.focus()
    await pilot.press("c")
    await settle(pilot, app, lambda: app.clipboard != "", what="c copied nothing")
    return app.clipboard


async def test_copy_takes_the_last_answer_as_shown_not_the_command_its_escapes_hide(store):
    app = make_app(store, provider=Recorder(turns=[ANSWER]))
    async with app.run_test(size=SIZE) as pilot:
        await chat_once(pilot, app, store, "how do I list it?")
        shown = app.query(AssistantMessage).last()
        await say(pilot, "/copy")
        await settle(pilot, app, lambda: notices(app, "Copied the last answer"))
        assert app.clipboard == shown.text == clean(ANSWER)
        assert_nothing_hidden(app.clipboard)
        assert app.clipboard.startswith("Run ls -la to list it.<U+200B><U+E0072>")
        # the count is of what was copied, not of the raw answer
        assert notices(app, "Copied the last answer") == [
            f"Copied the last answer ({len(app.clipboard):,} characters)"]


async def test_c_on_each_kind_of_item_copies_what_it_shows(store):
    """A message of the user's (a paste), a tool result, an answer and its code block."""
    session = store.create_session("t")
    call = {"id": "c1", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "notes.md"}'}}
    append_message(store, session.id, "user", f"what does {LINK} do?{INVISIBLE}", turn_id="x")
    append_message(store, session.id, "assistant", "", tool_calls=[call], turn_id="x")
    append_message(store, session.id, "tool", f"notes: {LINK}{INVISIBLE}", name="read_file",
                   tool_call_id="c1", tool_status="ok", turn_id="x")
    append_message(store, session.id, "assistant", ANSWER, turn_id="x")
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready and bool(app.query(CodeFence)))
        user = app.query_one(UserMessage)
        assert await press_c(pilot, app, user) == str(user.render())

        tool = app.query_one(ToolBlock)
        tool.collapsed = False
        result = tool.query_one("Contents").query_one(Static)
        assert await press_c(pilot, app, tool.query_one("CollapsibleTitle")) == \
            str(result.render())

        answer = app.query_one(AssistantMessage)
        assert await press_c(pilot, app, answer) == answer.text == clean(ANSWER)

        fence = app.query_one(CodeFence)
        code = await press_c(pilot, app, fence)
        assert code == fence.code and code.strip() in str(fence.query_one("Label").render())
        for copied in (str(user.render()), str(result.render()), answer.text, code):
            assert_nothing_hidden(copied)


async def test_copy_finds_the_last_answer_a_scroll_away(store):
    """A long paste of the user's fills the screen: the answer before it is not mounted, and
    /copy still takes it (it used to read the database; it now reads the transcript)."""
    session = store.create_session("t")
    append_message(store, session.id, "user", "hi", turn_id="x0")
    append_message(store, session.id, "assistant", "the answer", turn_id="x0")
    for i in range(40):
        append_message(store, session.id, "user", f"paste {i}\n" + "a line\n" * 30)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        await say(pilot, "/copy")
        await settle(pilot, app, lambda: notices(app, "Copied the last answer"))
        assert app.clipboard == "the answer"


async def test_every_copy_leaves_through_one_door_that_cleans(store):
    """Textual's own copies (selected text, the prompt's ctrl+c) call the app's
    copy_to_clipboard: it keeps what a terminal shows, and only that."""
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, lambda: app.ready)
        app.copy_to_clipboard(f"see {LINK}{INVISIBLE}\u202e")
        assert app.clipboard == clean(f"see {LINK}{INVISIBLE}\u202e")
        assert app.clipboard.startswith("see ls -la<U+200B>")
        assert_nothing_hidden(app.clipboard)


def test_clean_names_invisible_characters_but_keeps_what_joins_emoji_and_scripts():
    assert clean(f"a\u200bb{TAGS[:2]}\ufeff") == "a<U+200B>b<U+E0072><U+E006D><U+FEFF>"
    # one variation selector past U+E0100 per byte: a payload behind an emoji is shown
    assert clean("😀\U000e0100\U000e0101") == "😀<U+E0100><U+E0101>"
    kept = "👨\u200d👩\u200d👧 ❤️ می\u200cخواهم"  # ZWJ, VS16, ZWNJ: they hide no text
    assert clean(kept) == kept


def test_json_for_a_terminal_escapes_invisible_characters_and_parses_back():
    text = f"x\u200b{TAGS[:3]}\u202e"
    shown = json_for_terminal(json.dumps({"t": text}, ensure_ascii=False))
    assert shown == '{"t": "x\\u200b\\udb40\\udc72\\udb40\\udc6d\\udb40\\udc20\\u202e"}'
    assert json.loads(shown) == {"t": text}
