"""Huge messages in the transcript: a 10 MB paste, a 10 MB answer and a 1 MB line open at
once, showing their head and tail with a note of what is left out; copying takes it all.
A long message of the user's (a 240 KB paste) is folded to a few lines until expanded."""

from __future__ import annotations

import pytest

from textual import events

from picochat.tui.answer import AssistantMessage
from picochat.tui.chat import ChatView, UserMessage
from picochat.tui.preview import FOLD_CHARS, FOLD_LINES, HEAD_CHARS, TAIL_CHARS, fold, preview
from picochat.tui.prompt import Prompt
from tests.helpers.tui import SIZE, make_app
from tests.helpers.waiting import settle
from tests.helpers.storage import append_message

PASTE = "".join(f"line {i:06d} of the pasted log, with some words after it\n"
                for i in range(180_000))                               # about 10 MB
LINE = "x" * 1_000_000


def test_a_short_text_is_shown_whole_and_a_huge_one_by_head_and_tail():
    assert preview("short") == "short"
    shown = preview(PASTE)
    assert len(shown) < HEAD_CHARS + TAIL_CHARS + 200
    assert shown.startswith("line 000000 ") and shown.endswith("line 179999 of the pasted "
                                                               "log, with some words after it\n")
    note = next(line for line in shown.splitlines() if line.startswith("…"))
    head, tail = shown.split(f"\n\n{note}\n\n")
    assert head.endswith("\n") and PASTE.startswith(head) and PASTE.endswith(tail)
    assert f"{len(PASTE) - len(head) - len(tail):,} characters not shown" in note
    assert preview(LINE).startswith("x" * HEAD_CHARS)  # no line break near: cut where it falls


@pytest.mark.slow
async def test_a_session_with_huge_messages_opens_and_copies_them_whole(store):
    app = make_app(store)
    sid = app.session.id
    append_message(store, sid, "user", PASTE, turn_id="t1")
    append_message(store, sid, "assistant", "# Log\n\n" + PASTE, turn_id="t1")
    append_message(store, sid, "user", LINE, turn_id="t2")
    append_message(store, sid, "assistant", "ok", turn_id="t2")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        await pilot.pause()
        # the 1 MB line alone fills the screens mounted at open; the rest loads on scrolling up
        assert [m.text for m in app.query(UserMessage)] == [LINE]
        chat = app.query_one(ChatView)
        chat.scroll_home(animate=False, immediate=True)
        await settle(pilot, app, lambda: len(app.query(UserMessage)) == 2)
        paste, line = app.query(UserMessage)
        answer = app.query(AssistantMessage).first()
        assert "179,992 more lines" in str(paste.render())  # folded: 6 lines, note, 2 lines
        assert len(str(line.render())) < 400                 # the 1 MB line: its start, cut
        shown = "".join(p.source for p in answer.query("ProseBlock"))
        assert "characters not shown" in shown and len(shown) < HEAD_CHARS + TAIL_CHARS + 200
        answer.focus()
        await pilot.press("c")
        assert app.clipboard == "# Log\n\n" + PASTE
        paste.focus()
        await pilot.press("c")
        assert app.clipboard == PASTE
        await pilot.press("enter", "h", "i")  # the prompt still answers at once
        assert app.query_one("#prompt").text == "hi"


def test_a_cut_inside_a_code_fence_closes_and_reopens_it():
    from picochat.tui.markdown import split_blocks

    code = "".join(f"value_{i} = {i}  # a line of the generated module\n" for i in range(3_000))
    answer = "Here it is:\n\n```python\n" + code + "```\n\nClosing remarks.\n"
    shown = preview(answer, markdown=True)
    blocks = split_blocks(shown)
    assert [b.kind for b in blocks] == ["text", "code", "text", "code", "text"]
    assert "characters not shown" in blocks[2].source  # the note is prose, not code
    assert blocks[1].lang == blocks[3].lang == "python"
    assert code.startswith(blocks[1].code) and code.endswith(blocks[3].code)
    assert blocks[4].source == "Closing remarks.\n"       # prose again, not a new fence
    assert preview(answer).count("```") == 2  # plain text is left as it is


LOG = "".join(f"2024-05-01 12:{i % 60:02d}:00 INFO worker-{i % 17} handled request "
              f"id={i:06d} in {i % 250} ms status=200\n" for i in range(2_965))  # 240 KB


def test_a_long_user_message_folds_to_its_first_and_last_lines_and_a_note():
    assert len(LOG) > 239_000
    assert fold("a question\n" * FOLD_LINES) is None                # a long question: whole
    assert fold("x" * FOLD_CHARS) is None
    folded = fold(LOG + "\nwhy are some requests slow?")
    assert folded.head == "".join(LOG.splitlines(keepends=True)[:6]).rstrip("\n")
    assert folded.tail.endswith("why are some requests slow?")  # typed after the paste: seen
    assert folded.note == ("… 2,959 more lines · 240 KB in all (folded: over 40 lines or 4,000 "
                           "characters) · Enter expands · c copies all")
    assert fold("y" * 5_000).note.startswith("… 4,801 more characters · 5 KB in all")


async def test_a_240_kb_paste_is_sent_whole_and_shown_folded_until_expanded(store):
    app = make_app(store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        prompt = app.query_one(Prompt)
        prompt.focus()
        app.post_message(events.Paste(LOG))  # as a terminal delivers a bracketed paste
        await settle(pilot, app, lambda: prompt.text == LOG)
        await pilot.press("enter")
        await settle(pilot, app, lambda: len(store.history(app.session.id)) == 2
                     and not app.worker.busy)
        await pilot.pause()
        assert store.history(app.session.id)[0].content == LOG  # every character sent, stored
        message = app.query_one(UserMessage)
        # laid out (a height of 0 would pass the checks below without meaning them)
        await settle(pilot, app, lambda: message.outer_size.height > 0)
        chat = app.query_one(ChatView)
        assert message.outer_size.height <= 10                  # not some 250 rows
        assert chat.virtual_size.height < 40                    # the chat fits one screen
        assert "2,957 more lines · 240 KB in all" in str(message.render())

        message.focus()
        await pilot.press("enter")                              # selected, Enter expands it
        await settle(pilot, app, lambda: message.outer_size.height > 100)
        assert "characters not shown" in str(message.render())  # the head and tail preview
        await pilot.press("c")
        assert app.clipboard == LOG                              # copy takes all of it
        await pilot.press("enter")                              # and folds it back
        await settle(pilot, app, lambda: message.outer_size.height <= 10)
        assert app.focused is message

        await app.reload()                                      # reopened: folded too
        await settle(pilot, app, lambda: app.query_one(UserMessage).outer_size.height > 0)
        assert app.query_one(UserMessage).outer_size.height <= 10
        await pilot.press("alt+up", "up", "c")
        assert app.clipboard == LOG


async def test_enter_on_a_short_message_still_goes_back_to_the_prompt(store):
    app = make_app(store)
    append_message(store, app.session.id, "user", "a short question", turn_id="t1")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, app.transcript_ready.is_set)
        await pilot.pause()
        app.query_one(UserMessage).focus()
        await pilot.press("enter")
        assert isinstance(app.focused, Prompt)
